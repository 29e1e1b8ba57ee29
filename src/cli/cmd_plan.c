/* strata plan: where a training run's state would live and how fast its step
 * would be, without training (trainer_plan). Takes the options of `strata
 * train`. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "trainer/trainer.h"
#include "util/check.h"

static void help(void)
{
	printf("usage: strata plan --model DIR [train options]\n\n"
	       "Prints the plan `strata train` would use with these options, without training:\n"
	       "every slab kind's bytes per tier, each layer's activations (keep, recompute,\n"
	       "swap to host or disk), the units updated on the device, tier totals against the\n"
	       "budgets, and the predicted busy time of each queue and of the step. The\n"
	       "hardware profile is --profile FILE (else $STRATA_PROFILE, else\n"
	       "~/.cache/strata/profile.json); when missing it is measured now (matmul, copies,\n"
	       "optimizers, the first --offload-dir) and written there. Edit it to plan for\n"
	       "another machine. The options are train's (--micro-batch, --seq-len,\n"
	       "--grad-accum, --optimizer, --device-mem, --host-mem, --offload-dir, --place,\n"
	       "--prefetch, --activations, --recompute, --device-updates, ...); see\n"
	       "`strata train --help`.\n");
}

int cmd_plan(int argc, char **argv)
{
	struct cli_args a;
	ST_TRY(cli_parse(&a, argc, argv));
	if (cli_has(&a, "help")) {
		help();
		return ST_OK;
	}
	struct st_train_opts o;
	train_opts_defaults(&o);
	ST_TRY(cli_train_flags(&a, &o, NULL));
	const char *conf = cli_get(&a, "config", NULL);
	if (!*o.resume)
		ST_TRY(cli_train_model(&a, conf && *conf ? conf : NULL, &o));
	return trainer_plan(&o);
}
