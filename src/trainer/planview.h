/* `strata plan`'s table: the plan training would use (engine/plan.h) —
 * each slab kind's bytes per tier, the activation policy per layer, the
 * device-updated units, tier totals against the budgets — and the predicted
 * busy time of each queue and of the step. */
#ifndef ST_PLANVIEW_H
#define ST_PLANVIEW_H

#include "engine/plan.h"
#include "trainer/options.h"

/* prof NULL: nothing leaves the device, no prediction to print. */
void plan_print(const struct st_model *m, const struct st_plan *p, const struct st_plan_model *pm,
		const struct st_train_opts *o, const struct st_profile *prof);

#endif
