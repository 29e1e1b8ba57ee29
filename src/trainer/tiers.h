/* Where a run's slabs live: trainer_open's set-up of the tiers and
 * `strata plan` (trainer_plan, declared in trainer.h) share it.
 *
 * Budgets come from --device-mem / --host-mem or the machine (the smaller of
 * MemAvailable and the cgroup's headroom); the flags force what they name
 * (--place, --recompute, --activations, --device-updates); everything else
 * is the planner's (engine/plan.h), which measures or reads the hardware
 * profile only once something must leave the device. */
#ifndef ST_TIERS_H
#define ST_TIERS_H

#include "trainer/trainer.h"

/* Decide every slab's home, allocate the slabs and the executor, start the
 * store (staging pools, disk tier) and load the weights of model_dir. */
int tiers_setup(struct st_trainer *tr, const char *model_dir, int grads);

/* Say, at the start, when one held-out evaluation streams offloaded weights
 * for more than a tenth of the weight traffic of the steps between two (an
 * evaluation reads every offloaded weight once per micro-batch). */
void tiers_note_eval_traffic(const struct st_trainer *tr);

#endif
