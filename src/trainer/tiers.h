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

/* Budgets (--device-mem, --host-mem: "auto" or sizes) for a run whose
 * state takes `need` bytes: the flags, or from the machine. On the CPU
 * backend the device tier is RAM too, so "auto" leaves both unlimited while
 * the whole state fits in 90% of the available memory, and otherwise gives
 * the device 30% and the host 60% of it (offload then needs --offload-dir).
 * With one budget given, the other tier gets its share of that rule
 * (unlimited, it would take the rest of the state, more than memory holds).
 * Budgets above the available memory are warned. The available memory is
 * the smaller of MemAvailable and the cgroup's headroom (engine/memavail.h):
 * under a container's or a job's limit the host's RAM is not the run's;
 * which one it is, is said. Train, plan, and eval and sample share it. */
int tiers_budgets(const char *device_mem, const char *host_mem, size_t need,
		  size_t budgets[ST_TIER__COUNT]);

/* Decide every slab's home, allocate the slabs and the executor, start the
 * store (staging pools, disk tier) and load the weights of model_dir. */
int tiers_setup(struct st_trainer *tr, const char *model_dir, int grads);

/* Say, at the start, when one held-out evaluation streams offloaded weights
 * for more than a tenth of the weight traffic of the steps between two (an
 * evaluation reads every offloaded weight once per micro-batch). */
void tiers_note_eval_traffic(const struct st_trainer *tr);

#endif
