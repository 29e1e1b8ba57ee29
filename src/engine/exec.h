/* The executor: walks the model's units through forward, loss and backward
 * for one micro-batch (and, for evaluation, through the forward of a group
 * of micro-batches, exec_eval_group), asking the store for each unit's slabs just before the
 * unit runs and handing them back right after: on_unit_grad is called the
 * moment a unit's gradient for the micro-batch is complete, before_unit
 * before a unit's forward (the updater's per-unit wait).
 *
 * Activations, per layer (the plan's activation policy):
 *   keep       the layer's A slab lives on the device from forward to backward;
 *   recompute  only its input is kept; its forward is re-run, into one
 *              scratch block shared by the recomputed layers, just before its
 *              backward (activation checkpointing);
 *   host/disk  its A slab's home is the host or the disk: forward fills a
 *              staging slot (acquired before the previous unit runs, which
 *              writes the layer's input) and releases it dirty, so it is
 *              written out behind the compute; backward prefetches it back
 *              `prefetch` layers ahead, reads it, and discards it.
 * Every policy runs the same kernels on the same inputs, so training is
 * bit-identical under any mix.
 *
 * Streaming: before computing unit u the executor asks the store to
 * prefetch the weights of the next `prefetch` units in the direction of the
 * pass (and, in backward, their gradients when accumulating), so the copy and
 * disk queues fill those slots while u computes. Weights are acquired for
 * reading (no wait for a write-back of them in flight), gradients for writing.
 *
 * A tied head reads the embedding's weights and adds into its gradient, so
 * the embed unit's W and G stay acquired from the head's forward to the end
 * of backward. */
#ifndef ST_EXEC_H
#define ST_EXEC_H

#include <stdint.h>

#include "model/llama.h"
#include "ops/ops.h"
#include "store/store.h"

struct st_exec {
	const struct st_ops *ops;
	const struct st_model *model;
	struct st_store *store;
	struct st_acts acts;
	int b, t;
	/* called after each unit's backward (reverse unit order); may be NULL */
	void (*on_unit_grad)(void *ctx, int unit);
	void *on_unit_grad_ctx;
	/* called before each unit's forward (the trainer waits there for the
	 * unit's optimizer update of the previous step); may be NULL */
	void (*before_unit)(void *ctx, int unit);
	void *before_unit_ctx;
	/* when set, the squared norm of each unit's finished gradient (n_units),
	 * taken while it is still on the device */
	double *grad_sumsq;
	int prefetch;       /* units of weights fetched ahead of the one computing */
	struct st_trace *trace; /* unit passes on the compute track; may be NULL */
	unsigned char *act; /* per layer: enum st_act_policy */
	int n_recompute;
	float *sink;        /* where a recomputed layer's output goes when the next
			     * layer's activations are swapped out (never read) */
};

enum st_act_policy { ST_ACT_KEEP, ST_ACT_RECOMPUTE, ST_ACT_HOST, ST_ACT_DISK, ST_ACT__COUNT };

/* Allocate the activation slabs for micro-batches of b x t tokens (swapped
 * layers' homes on the host or disk, the rest on the device), with act
 * per layer (NULL: keep all; copied); reports the bytes missing when the
 * budget is too small. Swapped layers need an A staging pool of at least 2
 * slots at store_start. */
int exec_init(struct st_exec *ex, const struct st_ops *ops, const struct st_model *m,
	      struct st_store *s, int b, int t, const unsigned char *act);
void exec_free(struct st_exec *ex);

/* Forward (and, when loss_scale > 0, backward) of one micro-batch.
 * tokens, targets: (B,T); targets < 0 are ignored. Gradients of
 * loss_scale * sum(per-token losses) are ADDED to the G slabs. Returns the
 * sum of the per-token losses; *n_targets gets the number of counted tokens. */
double exec_micro_step(struct st_exec *ex, const int32_t *tokens, const int32_t *targets,
		       float loss_scale, long *n_targets);

/* Evaluation, layer-major: the forward of k micro-batches (tokens, targets:
 * k x (B,T)) unit by unit, each unit's weights acquired once for the group,
 * where exec_micro_step would stream every offloaded weight once per
 * micro-batch. hidden (k rows of exec_eval_row_floats, 64-byte aligned)
 * holds the group's residual streams between units (host memory the
 * kernels read and write directly, as the CPU backend's activations are; a
 * device backend would keep the rows in the device's memory, or copy them
 * through its queues). Each micro-batch runs the same kernels on the same
 * inputs as exec_micro_step with loss_scale 0, and its loss is added to
 * *loss_sum in turn (its counted tokens to *n_targets), as k calls of it
 * would add them: the sum is bit-identical. */
void exec_eval_group(struct st_exec *ex, const int32_t *tokens, const int32_t *targets, int k,
		     float *hidden, double *loss_sum, long *n_targets);
/* The micro-batches an evaluation groups: 1 when no weights stream (a
 * repeated pass moves nothing), else as many as fit in the smallest of
 * 1 GiB, an eighth of the available memory (engine/memavail.h) and what
 * the host tier's budget leaves unused. Test hook: STRATA_EVAL_GROUP=K
 * sets it. */
int exec_eval_group_max(const struct st_exec *ex);
/* One micro-batch's residual stream (B x T x dim floats), rounded up to 64
 * bytes: a row of exec_eval_group's hidden. */
size_t exec_eval_row_floats(const struct st_exec *ex);

#endif
