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
	printf("usage: strata plan --model DIR [train options]\n"
	       "       strata plan --resume RUN [train options]   (the run's saved options)\n\n"
	       "Prints the plan `strata train` would use with these options, without training:\n"
	       "every slab kind's bytes per tier, each layer's activations (keep, recompute,\n"
	       "swap to host or disk), the units updated on the device, tier totals against the\n"
	       "budgets, and the predicted busy time of each queue and of the step. The\n"
	       "hardware profile is --profile FILE (else $STRATA_PROFILE, else\n"
	       "~/.cache/strata/profile.json); when missing it is measured now (matmul, copies,\n"
	       "optimizers, the first --offload-dir) and written there. Edit it to plan for\n"
	       "another machine. The options are train's (--micro-batch, --seq-len,\n"
	       "--grad-accum, --optimizer, --device-mem, --host-mem, --offload-dir, --place,\n"
	       "--prefetch, --activations, --recompute, --device-updates, ...), read as\n"
	       "train reads them: a --resume run's saved options < --config FILE < flags; see\n"
	       "`strata train --help`. Sizes count in powers of 1024: --device-mem 10G is\n"
	       "10 GiB, and 10GB, 10gb or 10GiB are read as 10 GiB too.\n\n"
	       "  --json    print the plan as one JSON object instead of the table (bytes as\n"
	       "            whole numbers, null where nothing is predicted); messages go to\n"
	       "            stderr as always\n"
	       "  --out DIR the run directory train would write: where an --offload-dir is on\n"
	       "            its file system, plan checks there is room for a checkpoint\n"
	       "            beside the offload files, as train does (without --out it cannot)\n");
}

int cmd_plan(int argc, char **argv)
{
	struct cli_args a;
	ST_TRY(cli_parse(&a, argc, argv));
	if (cli_has(&a, "help")) {
		help();
		return ST_OK;
	}
	int json;
	ST_TRY(cli_get_bool(&a, "json", &json));
	/* train's order: defaults < the checkpoint's options < --config < flags */
	struct st_train_opts o;
	struct cli_train_src src;
	ST_TRY(cli_train_read(&a, &o, &src));
	const char *resume = src.resume, *conf = src.conf, *dir = src.dir;
	ST_TRY(cli_train_flags(&a, &o, "config,json"));
	ST_TRY(cli_check_bf16_source(&a, &src, &o));
	struct st_train_opts checked = o; /* checked as trainer_plan checks them */
	if (checked.steps == 0 && checked.max_tokens <= 0)
		checked.steps = 1; /* a plan needs no training length (but -1 is no length) */
	ST_TRY(cli_check_config_values(&a, &src, &checked));
	cli_note_unused_options(&a, conf, &checked);
	/* train's resume checks: a plan of what train would refuse (another
	 * GaLore rank, an optimizer whose state cannot convert) is no plan */
	if (resume) {
		ST_TRY(cli_check_resume(&a, conf, &src.saved, &o, dir));
		snprintf(o.resume, sizeof o.resume, "%s", dir);
	} else {
		ST_TRY(cli_train_model(&a, conf, &o));
	}
	return trainer_plan(&o, json);
}
