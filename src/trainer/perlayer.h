/* Per-layer GaLore updates (Zhao et al. 2024, section 4.3): no full-model
 * gradient buffer. All layer units share one gradient slab
 * (ST_GRADS_SHARED_LAYERS); after each layer's backward, the executor's
 * per-unit hook consumes that layer's gradient at once:
 *   - a GaLore matrix's gradient is projected into its R-sized accumulator
 *     (R = proj(G), or R += proj(G) for later micro-batches: projection is
 *     linear, so this equals projecting the accumulated gradient exactly);
 *     at a refresh update the projector is computed first, from this
 *     micro-batch's gradient (the first micro-batch's, or, where a
 *     matrix's gradient in it is all zero, the first one after it with a
 *     gradient: the zeros before add nothing to R);
 *   - every other parameter of the layer (the norm gains) is added into its
 *     own small accumulator;
 *   - with one micro-batch per step, the layer's squared gradient norm is
 *     taken then, over the whole gradient;
 *   - the shared slab is zeroed for the next layer.
 * The low-rank updates run once the global norm (and so the clip factor)
 * is known, after the backward of the last micro-batch; the embedding and
 * head keep their own gradient slabs and ordinary updates.
 *
 * Semantics against the in-memory path (GaLore with every unit's gradient
 * kept): with --grad-accum 1 the same operations run on the same values, so
 * results are bit-identical (tested). With accumulation, two things differ,
 * because the full accumulated gradient of a matrix never exists:
 *   - global-norm clipping counts each GaLore matrix by the norm of its
 *     projected accumulated gradient, ||R||, the gradient its optimizer
 *     actually sees (equal to ||G|| at full rank);
 *   - at a refresh update the projector comes from one micro-batch's
 *     gradient (the first with a non-zero gradient of that matrix) rather
 *     than the step's accumulated one.
 * A step skipped for a non-finite gradient restores the projectors refreshed
 * in it, so nothing it computed survives.
 *
 * Weights and state may be offloaded: the hook acquires each layer's state
 * slab from the store (prefetching the next layers' in backward order) and
 * writes it home only after a refresh; the updates run through the updater
 * (engine/updater.h, with perlayer_update as its step_unit), which streams
 * each unit's weights and state; with anything offloaded, on its worker
 * thread beside the next step's forward, as for the other optimizers (the
 * hooks run only in backward, after the forward waited for every unit's
 * update, so they never meet an update: see perlayer_begin). The
 * accumulators are plain host memory (perlayer_acc_bytes, counted in the
 * placement's host budget). */
#ifndef ST_TRAINER_PERLAYER_H
#define ST_TRAINER_PERLAYER_H

#include "engine/session.h"
#include "optim/optim.h"

struct st_perlayer {
	const struct st_ops *ops;
	const struct st_optim *o;
	const struct st_model *m;
	struct st_store *store; /* state slabs are acquired from it, so they may be offloaded */
	int prefetch;        /* state slabs fetched ahead in backward (the plan's depth) */
	int grad_accum;
	long t;              /* the update this step will make if it is applied */
	int micro;           /* micro-batches consumed in this step */
	int fresh;           /* a step began and its first hook has not run */
	unsigned char *pending; /* per parameter: its refresh is due in this step and not yet made */
	float **acc;         /* per parameter of a layer unit: R (GaLore) or its gradient */
	double *unit_sumsq;  /* per unit, for layer units */
	float *bak;          /* projectors replaced in this step, for undo and rotation */
	int *bak_param;
	size_t *bak_off;
	int n_bak, cap_bak;
	size_t bak_floats;   /* capacity of bak */
	size_t acc_bytes;    /* the accumulators, for reports */
};

int perlayer_init(struct st_perlayer *pl, const struct st_ops *ops, const struct st_optim *o,
		  struct st_store *store, int prefetch, int grad_accum);
/* The bytes perlayer_init allocates for the accumulators and the projector
 * backups (host memory the placement counts), for o's model. */
size_t perlayer_host_bytes(const struct st_optim *o);
void perlayer_free(struct st_perlayer *pl);
/* Before the first micro-batch of a step that would make update t. */
void perlayer_begin(struct st_perlayer *pl, long t);
/* The executor's on_unit_grad hook (ctx: the st_perlayer). */
void perlayer_on_unit(void *ctx, int unit);
/* After each micro-batch's backward. */
void perlayer_end_micro(struct st_perlayer *pl);
/* Squared gradient norm of layer unit u for this step (after the last
 * micro-batch). */
double perlayer_unit_sumsq(const struct st_perlayer *pl, int u);
/* Unit u's update with the step's clip factor, as the updater's step_unit
 * (engine/updater.h; ctx: the st_perlayer): a layer from its accumulators
 * (g unused), the embedding and head by optim_step_unit from their gradient
 * g. w: the unit's master weights, st: its state slab, both acquired. */
void perlayer_update(void *ctx, int u, float *w, const float *g, void *st, long t, float lr,
		     float grad_scale);
/* The step is skipped: put back the projectors it refreshed. */
void perlayer_undo(struct st_perlayer *pl);

#endif
