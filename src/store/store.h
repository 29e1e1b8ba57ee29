/* The store: where every slab of every unit lives, under per-tier byte budgets.
 *
 * Tiers: DEVICE (GPU memory; on a CPU-only machine a budgeted RAM arena, so
 * the same executor runs everywhere), HOST (RAM; pinned when CUDA is present)
 * and DISK (offload directories; arrives with the offload issue). A slab is
 * one contiguous buffer of one kind for one unit. The store never knows what
 * a slab means; model code never knows where a slab lives: the executor asks
 * the store for a resident pointer (store_acquire) before a unit runs and
 * hands it back (store_release) after.
 *
 * This first version keeps every slab resident in its home tier, so acquire
 * returns the home pointer; budgets are still enforced at allocation, and
 * peak use per tier is tracked and reported. The offload issue adds disk
 * homes, prefetch and write-back behind the same calls. */
#ifndef ST_STORE_H
#define ST_STORE_H

#include <stddef.h>

enum st_tier { ST_TIER_DEVICE, ST_TIER_HOST, ST_TIER_DISK, ST_TIER__COUNT };

enum st_slab_kind {
	ST_SLAB_W, /* compute weights */
	ST_SLAB_M, /* master weights (aliases W when the compute dtype is fp32) */
	ST_SLAB_S, /* optimizer state */
	ST_SLAB_G, /* gradients */
	ST_SLAB_A, /* saved activations and scratch (one per micro-batch shape) */
	ST_SLAB__COUNT
};

struct st_slab {
	enum st_tier home;
	size_t bytes;
	void *ptr;       /* resident memory in the home tier */
	int alias_of;    /* kind this slab aliases (M -> W on CPU), or -1 */
	int shared_from; /* unit whose slab of this kind it shares, or -1 */
};

struct st_tier_use {
	size_t budget;   /* hard limit in bytes; 0 = unlimited */
	size_t used, peak;
};

struct st_store {
	int n_units;
	struct st_slab *slabs; /* n_units x ST_SLAB__COUNT */
	struct st_tier_use tiers[ST_TIER__COUNT];
};

const char *tier_name(enum st_tier t);
const char *slab_kind_name(enum st_slab_kind k);

int store_init(struct st_store *s, int n_units, const size_t budgets[ST_TIER__COUNT]);
void store_free(struct st_store *s);
/* Allocate a zeroed, 64-byte aligned slab in tier; fails with the number of
 * missing bytes when the tier's budget would be exceeded. */
int store_alloc(struct st_store *s, int unit, enum st_slab_kind kind, enum st_tier tier,
		size_t bytes);
/* Make slab kind `kind` share the memory of `target` (M aliasing W on CPU). */
void store_alias(struct st_store *s, int unit, enum st_slab_kind kind, enum st_slab_kind target);
/* Make unit's slab `kind` the same memory as from_unit's (one gradient slab
 * for all layers when their gradients are consumed unit by unit). Counted
 * once, freed once. */
void store_share(struct st_store *s, int unit, enum st_slab_kind kind, int from_unit);
/* A pointer the backend can compute on, valid until store_release. */
void *store_acquire(struct st_store *s, int unit, enum st_slab_kind kind);
/* dirty: the caller wrote to the slab and it must reach its home. */
void store_release(struct st_store *s, int unit, enum st_slab_kind kind, int dirty);
static inline struct st_slab *store_slab(struct st_store *s, int unit, enum st_slab_kind kind)
{
	return &s->slabs[(size_t)unit * ST_SLAB__COUNT + kind];
}
/* Print where each slab kind lives and how many bytes each tier holds. */
void store_report(const struct st_store *s);
/* "1.5 GiB" style formatting into buf. */
const char *fmt_bytes(char *buf, size_t n, double bytes);

#endif
