/* The planner: where every slab lives, what happens to each layer's
 * activations, and which units update on the device, chosen from a measured
 * hardware profile by predicting the step time of candidate plans.
 *
 * plan_make is a pure function (no I/O, no clocks) of the model's sizes and
 * FLOPs, the profile, the budgets and the user's forced choices. It searches:
 *   activations  per layer keep / recompute / swap to host / swap to disk.
 *                LLaMA layers are identical, so Fuyou's benefit-per-byte
 *                ranking (recompute FLOPs saved per byte moved) ties across
 *                layers; what differs is lifetime: the first layers' saved
 *                tensors wait longest for their backward, so they are the
 *                ones swapped (disk first, then host: the slowest transfer
 *                gets the most time to hide), then recomputed ones, and the
 *                last layers, consumed first by backward, are kept. Every
 *                count of disk / host / recomputed layers that fits the
 *                budgets is predicted (in steps of L/16 for deep models) and
 *                the fastest taken; among ties (within 0.1%), the one with
 *                the least compute (swap before recompute while a link has
 *                room, as Fuyou), then the fewest bytes moved.
 *   updates      how many units update on the device (Deep Optimizer States'
 *                interleaving: spread evenly over the units, each with its
 *                optimizer state and gradient resident on the device, so
 *                neither crosses to the host) and which on the CPU worker.
 *   placement    the homes of weights, gradients and state (engine/place.h)
 *                within what the activations and device updates leave.
 *   prefetch     when not given: the depth, 1 to PLAN_MAX_PREFETCH units
 *                ahead, for the best plan (deeper hides more transfer time
 *                and takes more staging buffers).
 * The searches alternate once (activations, then updates, then activations
 * again given the updates), at prefetch 2 when the depth is to be chosen.
 *
 * The prediction (plan_predict) simulates three steps of the executor's
 * timeline and reports the third: a compute queue (each unit's forward,
 * backward, recompute and device updates), the copy and disk queues (each
 * staged slab's transfers, FIFO in the order the executor issues them, with
 * its prefetch window) and the CPU optimizer worker (each unit's update once
 * backward ends, in forward order, reading its state ahead and writing it
 * behind; the next forward of a unit waits for its update). With
 * shared_cores (the CPU backend) the worker's updates take their turn on the
 * compute queue, since both use the same cores, and the disk queue's own CPU
 * work (the profile's disk_cpu_share of each transfer's time) is charged to
 * the next compute, less what the compute sat idle. */
#ifndef ST_PLAN_H
#define ST_PLAN_H

#include <stddef.h>

#include "engine/exec.h"
#include "engine/place.h"
#include "engine/profile.h"

/* What the planner needs to know about the model and the run. */
struct st_plan_model {
	int n_units, n_layers;             /* units: embed, layers, head */
	int width;                         /* the model's dim: its matmuls' rate
					    * (profile_matmul_rate; 0: the rate at
					    * ST_LMM_D_NARROW) */
	const size_t *w_bytes, *g_bytes;   /* per unit; g_bytes NULL: no gradient slabs */
	const size_t *s_bytes;             /* optimizer state per unit */
	const size_t *numel;               /* parameters per unit */
	const double *fwd_flops;           /* per unit: one micro-batch's forward */
	const double *fwd_bf16_flops;      /* per unit: of fwd_flops, those at the profile's
					    * bf16 matmul rate (the linear layers under
					    * --matmul-precision bf16); NULL: none */
	const double *fwd_attn_flops;      /* per unit: of fwd_flops, attention's (at the
					    * profile's attention rate for seq_len);
					    * NULL: none */
	int seq_len;                       /* tokens per sequence (0: the short
					    * attention rate) */
	const double *fwd_ew_bytes, *bwd_ew_bytes; /* per unit: the bytes one
					    * micro-batch's other kernels move in its
					    * forward and its backward (model_unit_ew_bytes;
					    * at the profile's elementwise rate); NULL: none */
	const double *upd_flops;           /* per unit: its update's matmul FLOPs a step
					    * (GaLore's projections); NULL: none */
	const double *hook_flops;          /* per unit: the CPU matmul FLOPs its backward's
					    * hook adds each micro-batch (per-layer GaLore
					    * projecting the gradient); NULL: none */
	size_t act_layer, act_input, act_rest; /* bytes: a layer's saved tensors, a
						* recomputed layer's input, the head's block */
	int grad_accum;
	int quantized;                     /* 8-bit optimizer: its rates */
	int state_in_backward;             /* each layer's state is read in its backward
					    * too (per-layer GaLore's projector) */
};

#define PLAN_MAX_PREFETCH 4

struct st_plan_opts {
	struct st_place_opts place;        /* budgets, prefetch (<= 0: choose), forced homes, n_dirs */
	const unsigned char *act;          /* per layer, forced; NULL: choose */
	int device_updates;                /* units updated on the device; -1: choose */
	int threaded_updates;              /* the CPU worker runs beside the compute
					    * when anything is staged (0: never) */
};

struct st_plan_time {
	double compute_s, copy_s, disk_s, optimizer_s; /* busy seconds per step */
	double step_s;
	double disk_read, disk_written, copied;        /* bytes per step */
	const char *bound;
};

struct st_plan {
	struct st_place place;
	unsigned char *act;                /* per layer: enum st_act_policy */
	unsigned char *dev_update;         /* per unit: 1 = updated on the device */
	int n_act[ST_ACT__COUNT], n_dev_updates;
	int prefetch;                      /* units fetched ahead (chosen or given) */
	size_t act_device;                 /* activation bytes on the device, swap pool included */
	int candidates;                    /* plans predicted */
	struct st_plan_time t;
};

/* Fails (saying how many bytes are missing in which tier) when no plan fits.
 * prof may be NULL when nothing is left to choose (o->act given and
 * o->device_updates >= 0): the plan is then laid out but not predicted. */
int plan_make(struct st_plan *p, const struct st_plan_model *pm, const struct st_profile *prof,
	      const struct st_plan_opts *o);
void plan_free(struct st_plan *p);
/* The predicted step of a made plan (plan_make fills p->t with it). */
void plan_predict(struct st_plan_time *t, const struct st_plan_model *pm,
		  const struct st_profile *prof, const struct st_plan *p, int prefetch, int threaded);
/* "auto", "keep", "recompute", "host", "disk", or one letter per layer
 * (k, r, h, d) -> act (L bytes), *forced = 0 for auto. */
int plan_parse_act(const char *s, int n_layers, unsigned char *act, int *forced);

#endif
