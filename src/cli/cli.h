/* Command-line front end: one file per subcommand, a shared argument parser
 * (the benchmarks in bench/ use it too). Only the CLI exits; everything below
 * returns errors up to here. */
#ifndef ST_CLI_H
#define ST_CLI_H

#include <stdio.h>

#include "trainer/options.h"

#define CLI_MAX_ARGS 4096

/* "--key value", "--key=value" and bare "--flag" (value cli_bare, "true":
 * told apart by address from a "true" typed by the user, so a flag that
 * needs a value and got none can say so). */
extern const char cli_bare[];
struct cli_args {
	int n;
	const char *key[CLI_MAX_ARGS];
	const char *val[CLI_MAX_ARGS];
	int used[CLI_MAX_ARGS];
	/* the keys the command looked for (cli_get), for the "did you mean"
	 * of an unknown option (copies: some callers pass keys they free) */
	char asked[64][48];
	int n_asked;
};

int cli_parse(struct cli_args *a, int argc, char **argv);
/* For a small program (the benchmarks): parse argv[1..] and, on --help,
 * print `usage`. Returns the exit status to end with (0 after --help, 2 on a
 * parse error), or CLI_RUN to go on. */
#define CLI_RUN (-1)
int cli_start(struct cli_args *a, int argc, char **argv, const char *usage);
/* Whether a flag's name as given is key (spelled with dashes): '_' reads
 * as '-' in every command, as train's options and --config keys take it. */
int cli_key_is(const char *given, const char *key);
/* Last value given for key, either spelling (and marks it used), or def. */
const char *cli_get(struct cli_args *a, const char *key, const char *def);
int cli_has(struct cli_args *a, const char *key);
/* cli_get for a flag that must have a value: an error for a bare "--key". */
int cli_get_str(struct cli_args *a, const char *key, const char *def, const char **out);
/* An on/off flag: 0 when absent, 1 when bare, else its value as train's
 * options spell booleans (true/false, 1/0, yes/no); anything else is an
 * error, so `--force no` cannot mean yes. */
int cli_get_bool(struct cli_args *a, const char *key, int *out);
/* A file for the results named by --key, opened for writing (*out NULL when
 * the flag is absent): opened before any work, so a bad path fails at once.
 * It is PATH.tmp until cli_close_out, which closes it (a full disk fails
 * there) and renames it over PATH: a run that fails or is killed leaves the
 * previous results file as it was. */
int cli_get_out(struct cli_args *a, const char *key, FILE **out);
int cli_close_out(struct cli_args *a, const char *key, FILE *f);
/* Parse numbers with a clear error naming the flag; a whole number must lie
 * in [lo, hi] (the int the value goes into, at most). */
int cli_get_long(struct cli_args *a, const char *key, long def, long lo, long hi, long *out);
int cli_get_double(struct cli_args *a, const char *key, double def, double *out);
/* Error for any flag no command looked at; prog names the command in the
 * message ("strata eval", "bench/optim"), and the hint the option it looked
 * for that the flag is a slip for, if one is near (--sed: --seed). */
int cli_check_unused(const struct cli_args *a, const char *prog);

/* eval's and sample's memory options, as train takes them: --device-mem,
 * --host-mem, and --offload-dir (repeated, or comma-separated: the values
 * joined). */
struct st_forward_mem;
int cli_get_forward_mem(struct cli_args *a, struct st_forward_mem *mem);
/* Their lines of --help. */
#define CLI_FORWARD_MEM_HELP                                                                       \
	"  --device-mem S     device budget for the weights and activations, e.g. 2G\n"          \
	"                     (auto: from the machine, as train) [auto]\n"                       \
	"  --host-mem S       host budget for the weights that leave the device [auto]\n"        \
	"  --offload-dir DIR  disk tier for the weights that fit neither (repeat or use\n"       \
	"                     commas for several SSDs); what does not fit on the device\n"       \
	"                     streams from the host or disk\n"

/* A model directory, a checkpoint, or a run directory (its latest
 * checkpoint): the directory holding the model (cmd_eval.c). */
int resolve_model_dir(char *out, size_t n, const char *path);
/* resolve_model_dir, and the checkpoint it finds held against the pruning
 * of a run training there (ckpt_pin) until ckpt_unpin, once its weights
 * are loaded: eval and sample, which may read a run directory while its
 * run saves and removes checkpoints. */
int resolve_model_pinned(char *out, size_t n, const char *path);

int cmd_init(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_plan(int argc, char **argv);
/* Apply every flag but those of `skip` (comma-separated keys: "config",
 * plan's "config,json") to train options (--offload-dir may repeat: the
 * values are joined with commas). */
int cli_train_flags(struct cli_args *a, struct st_train_opts *o, const char *skip);
/* A new run's --model: a run or checkpoint names its weights (said); the
 * default --seq-len (not given as a flag or in conf) fits a shorter model.
 * For train and plan alike. */
int cli_train_model(struct cli_args *a, const char *conf, struct st_train_opts *o);
/* Warnings for options given (flags or conf's keys) that o's --optimizer
 * does not use; none when o fails its checks (refused later). For train and
 * plan alike. */
void cli_note_unused_options(const struct cli_args *a, const char *conf,
			     const struct st_train_opts *o);
/* What a resume may not change against the checkpoint's saved options (in
 * its directory ckpt): refused, or set back in o, as train does; plan runs
 * the same checks so that it plans what train would run. */
int cli_check_resume(struct cli_args *a, const char *conf, const struct st_train_opts *saved,
		     struct st_train_opts *o, const char *ckpt);
/* Where a run's options come from, read in train's order up to the flags:
 * defaults < the checkpoint's saved options < --config. */
struct cli_train_src {
	const char *resume, *conf;   /* --resume and --config, NULL when not given; a
				      * --config file's "resume" stands for the flag */
	char conf_resume[ST_PATH];   /* that "resume" */
	char dir[ST_PATH];           /* the checkpoint resumed from */
	struct st_train_opts saved;  /* its saved options */
	struct st_train_opts conf_only; /* defaults < --config alone */
};
/* A value the --config file gave that fails the options' checks: said with
 * the file's name (the error read as if a flag had given it). ST_OK when
 * the options pass, or the file is not what fails. */
int cli_check_config_values(struct cli_args *a, const struct cli_train_src *src,
			    const struct st_train_opts *o);
/* o from the defaults, the checkpoint (o->resume cleared) and --config. For
 * train and plan alike; the flags come after (cli_train_flags). */
int cli_train_read(struct cli_args *a, struct st_train_opts *o, struct cli_train_src *src);
/* --matmul-precision bf16 on a CPU without a bf16 unit, refused naming
 * where it came from when that is not a flag: the --config file, or the run
 * being resumed (a flag's refusal names the flag). */
int cli_check_bf16_source(struct cli_args *a, const struct cli_train_src *src,
			  const struct st_train_opts *o);

/* errno of a write to standard output that failed mid-command, for the
 * error main() gives at exit (0: none kept) */
extern int cli_stdout_errno;
/* Standard input and output the caller closed (`<&-`, `>&-`): main() puts
 * /dev/null and /dev/full in their place, so that no file strata opens takes
 * their numbers, and says a closed one where it is used. */
extern int cli_stdin_closed, cli_stdout_closed;

#endif
