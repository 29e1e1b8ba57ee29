/* `strata plan`: a run's memory plan and its predicted step, printed without
 * training. The placement is the one training would use (engine/place.c and
 * the recompute rule); the prediction applies a hardware profile
 * (engine/profile.h) to each queue's work per optimizer step:
 *   compute    training FLOPs (plus the recomputed layers' forward) at the
 *              matmul rate;
 *   optimizer  parameters at the AdamW rate;
 *   disk, copy every staged slab's traffic per step at the disk / copy rates:
 *              weights read by forward, backward and the update and written
 *              by it; gradients written each micro-batch, read back when
 *              accumulating and by the update; optimizer state read and
 *              written once.
 * Offloaded, the queues overlap and the step is the busiest one; in memory,
 * compute and optimizer run one after the other. A model, not a measurement:
 * the queue report at the end of a run gives the measured shares. */
#ifndef ST_PLANVIEW_H
#define ST_PLANVIEW_H

#include "engine/place.h"
#include "engine/profile.h"
#include "optim/optim.h"
#include "trainer/options.h"

struct st_plan_prediction {
	double compute_s, optimizer_s, disk_s, copy_s, step_s;
	double disk_read, disk_written, copied; /* bytes per step */
	const char *bound;
};

/* s_bytes: the optimizer state of each unit (optim's unit_bytes). */
void plan_predict(struct st_plan_prediction *pr, const struct st_model *m, const struct st_place *pl,
		  const size_t *s_bytes, const struct st_train_opts *o, int n_recompute,
		  const struct st_profile *prof);
void plan_print(const struct st_model *m, const struct st_place *pl, const struct st_train_opts *o,
		const struct st_optim *opt, int n_recompute, size_t act, const struct st_profile *prof);

#endif
