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
	printf("usage: strata plan --model DIR [train options] [--profile FILE]\n\n"
	       "Prints the memory plan `strata train` would use with these options (every slab\n"
	       "kind's bytes per tier, staging pools, recomputed layers, tier totals against the\n"
	       "budgets) and the predicted busy time of each queue and of the step, from a\n"
	       "hardware profile: FILE when it exists (edit it to plan for another machine),\n"
	       "else measured now (matmul, copy, AdamW and the first --offload-dir) and written\n"
	       "to FILE. The options are train's (--micro-batch, --seq-len, --grad-accum,\n"
	       "--optimizer, --device-mem, --host-mem, --offload-dir, --place, --prefetch,\n"
	       "--recompute, ...); see `strata train --help`.\n");
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
	return trainer_plan(&o);
}
