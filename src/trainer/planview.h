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
/* The same as one JSON object on stdout (`strata plan --json`), bytes as
 * exact integers: "model", "slabs" (each kind's bytes per tier, and whether
 * it streams through a staging pool), "layers" (the policy letters, k r h d,
 * and their counts), "updates", "tiers" (totals, pools included, and the
 * budgets: null for unlimited), and "predicted" and "profile" (null when
 * nothing leaves the device). */
int plan_print_json(const struct st_model *m, const struct st_plan *p,
		    const struct st_plan_model *pm, const struct st_train_opts *o,
		    const struct st_profile *prof);

#endif
