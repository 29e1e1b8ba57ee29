/* The update queue: per-unit optimizer updates, run by a CPU worker thread
 * while the main thread computes, or inline when nothing is offloaded.
 *
 * Why the updates start when backward ends, not as each unit's backward
 * finishes (Fuyou's overlap): global-norm clipping scales every gradient by
 * min(1, clip / |g|), and a step whose gradient is not finite must leave
 * weights and moments untouched, so no unit's update can be computed exactly
 * before the last unit's gradient norm is known. What can start earlier does:
 * each unit's gradient leaves the device as its backward ends (its norm taken
 * first), and the optimizer's reads of master weights and state are
 * prefetched ahead of the update that needs them. The arithmetic then
 * overlaps the NEXT step's forward instead: updates run in forward unit
 * order, and the forward of unit u waits only for u's own update
 * (updater_wait_unit), so the optimizer runs just ahead of the forward pass.
 *
 * Each job: acquire the unit's master weights, gradient and state, run
 * optim_step_unit, release weights and state dirty (written back behind),
 * then discard the gradient (it reads as zeros for the next step, with no
 * disk write; per-layer GaLore's layers have no gradient slab of their own
 * and a step_unit of their own, see below). A step skipped for a non-finite
 * gradient discards only. Bits
 * are the same as the in-memory trainer's: the same kernels on the same
 * inputs; only when each runs changes. */
#ifndef ST_UPDATER_H
#define ST_UPDATER_H

#include <pthread.h>

#include "model/llama.h"
#include "ops/ops.h"
#include "optim/optim.h"
#include "store/store.h"
#include "util/trace.h"

struct st_update_job {
	int unit;
	int apply;        /* 0: discard the gradient only (skipped step) */
	long t;           /* 1-based update count */
	float lr, clip;
};

struct st_updater {
	const struct st_ops *ops;
	const struct st_optim *opt;
	const struct st_model *m;
	struct st_store *store;
	int prefetch;
	int threads;         /* OpenMP threads for the worker's kernels */
	int threaded;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct st_update_job *q; /* ring of n_units */
	int q_head, q_count;
	long gen;            /* steps submitted */
	long *done;          /* per unit: the last step whose job finished */
	int stop;
	/* called before each unit's update is applied (a checkpoint capturing
	 * the unit holds it back); may be NULL */
	void (*before_update)(void *ctx, int unit);
	void *before_update_ctx;
	struct st_trace *trace; /* may be NULL */
	/* per unit, may be NULL: units updated on the device. Their jobs are not
	 * queued for the worker: the compute thread runs each one when it next
	 * waits for the unit (before its forward), with the unit's state and
	 * gradient resident on the device (Deep Optimizer States' GPU-updated
	 * subgroups). Same kernel, same inputs, same bits. */
	const unsigned char *on_device;
	struct st_update_job *dev_job; /* per unit: its pending device job */
	/* may be NULL: optim_step_unit. Per-layer GaLore's update (trainer/
	 * perlayer.h), whose layer units read their low-rank accumulators, not a
	 * gradient slab: no_grad marks them (per unit, may be NULL), and their
	 * jobs neither acquire nor discard G (g is NULL). */
	void (*step_unit)(void *ctx, int unit, float *w, const float *g, void *st, long t,
			  float lr, float clip);
	void *step_unit_ctx;
	const unsigned char *no_grad;
	double busy_s;       /* time spent in updates (worker) */
	double wait_s;       /* time the main thread waited for updates */
};

int updater_init(struct st_updater *up, const struct st_ops *ops, const struct st_optim *opt,
		 const struct st_model *m, struct st_store *store, int prefetch, int threads,
		 int threaded);
void updater_free(struct st_updater *up);
/* Queue every unit's job for one step, in forward unit order. */
void updater_submit(struct st_updater *up, int apply, long t, float lr, float clip);
/* Wait for unit's job of the last submitted step (running it here when the
 * unit updates on the device). */
void updater_wait_unit(struct st_updater *up, int unit);
/* Wait for every queued job, running the device units' pending ones. */
void updater_drain(struct st_updater *up);

#endif
