/* Placement: the home tier of every unit's weights, gradients and optimizer
 * state, and the staging pools, from the byte budgets of the tiers.
 *
 * A pure function of sizes and budgets (no I/O, no clocks): the planner
 * issue replaces these fixed rules with a measured cost model, behind the
 * same struct. The rules, in order:
 *   1. the device holds the activations (the executor's A slabs) always;
 *   2. if the weights and gradients of every unit fit beside them, they all
 *      live on the device; otherwise they stream through staging pools
 *      (weights: prefetch + 3 slots, gradients: 4) and the device's remaining
 *      budget keeps as many units resident as fit, weights first (read twice
 *      a step, and by the optimizer), then gradients;
 *   3. everything not on the device goes to the host while it fits (weights
 *      and gradients first, they move more bytes per step than optimizer
 *      state), then to disk; optimizer state off the host streams through a
 *      host pool of prefetch + 1 slots.
 * A kind can be forced to a tier (--place), which the budgets then check.
 * Units updated on the device (the planner's choice) have their optimizer
 * state and gradients on the device before anything else is placed. */
#ifndef ST_PLACE_H
#define ST_PLACE_H

#include <stddef.h>

#include "model/llama.h"
#include "store/store.h"

struct st_place_opts {
	size_t budget[ST_TIER__COUNT]; /* device and host (0: unlimited); disk unlimited */
	int prefetch;                  /* units of weights fetched ahead (>= 1) */
	int prefetch_given;            /* the user chose it (the hints may then name it) */
	int force[ST_SLAB__COUNT];     /* a tier, or -1 to choose */
	int n_dirs;                    /* offload directories available */
	size_t io_block;               /* the disk tier's stripe block (0: ST_IO_ALIGN): each
					* slab there takes whole blocks, the tier whole stripes */
	size_t host_reserved;          /* host bytes already taken (swapped activations) */
	size_t host_fixed;             /* host bytes the run holds outside the store, and what
					* they are (per-layer GaLore's accumulators) */
	const char *host_fixed_what, *host_fixed_hint; /* the hint where they alone exceed it */
	size_t host_scratch;           /* more such bytes: the optimizer's scratch (GaLore's
					* projection), and the same two words for them */
	const char *host_scratch_what, *host_scratch_hint;
	const unsigned char *dev_unit; /* per unit, may be NULL: units updated on the device
					* (their state and gradients live there) */
	/* what act_bytes is and the options that size it, for the messages
	 * (NULL: "activations of one micro-batch", "--micro-batch / --seq-len") */
	const char *act_what, *act_options;
};

struct st_place {
	enum st_tier *home;            /* n_units x ST_SLAB__COUNT (W, G, S used) */
	int n_units;
	int pool_slots[ST_SLAB__COUNT];
	size_t budget[ST_TIER__COUNT];
	size_t bytes[ST_TIER__COUNT];  /* what the placement puts in each tier, pools included */
	size_t host_fixed;             /* of bytes[HOST]: the options' host_fixed */
	size_t host_scratch;           /* of bytes[HOST]: the options' host_scratch */
	int offloaded;                 /* anything staged */
};

/* w_bytes, g_bytes, s_bytes: per unit (g_bytes may be NULL: no gradients);
 * act_bytes: the activation slabs in total. Fails, saying how many bytes are
 * missing in which tier, when no placement fits. */
int place_make(struct st_place *p, int n_units, const size_t *w_bytes,
	       const size_t *g_bytes, const size_t *s_bytes, size_t act_bytes,
	       const struct st_place_opts *o);
void place_free(struct st_place *p);
/* A kind forced onto disk (--place KIND=disk) with no offload directory. */
int place_check_disk(const int force[ST_SLAB__COUNT], int n_dirs);
static inline enum st_tier place_home(const struct st_place *p, int unit, enum st_slab_kind k)
{
	return p->home[(size_t)unit * ST_SLAB__COUNT + k];
}

/* "2G", "512M", "1.5GiB", "4096" -> bytes; "auto" or "" -> 0. */
int parse_bytes(const char *s, size_t *out, const char *what);
/* "weights=disk,gradients=host,optimizer=disk" -> force[]; "auto" or "" -> all -1. */
int parse_place(const char *s, int force[ST_SLAB__COUNT]);

#endif
