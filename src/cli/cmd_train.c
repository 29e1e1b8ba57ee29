/* strata train: flags and/or a JSON config (same keys), fresh or --resume. */
#include <stdio.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "cli/cli.h"
#include "engine/session.h"
#include "model/config.h"
#include "io/fsutil.h"
#include "trainer/interrupt.h"
#include "trainer/trainer.h"
#include "util/check.h"
#include "util/parse.h"

static void help(void)
{
	printf("usage: strata train --model DIR --data DIR --out DIR [options]\n"
	       "       strata train --resume RUN_OR_CKPT [options to override]\n"
	       "       strata train --config FILE.json [options]\n\n"
	       "  --config FILE          JSON object with any of the keys below\n");
	train_opts_help(stdout);
	printf("\nSizes (--device-mem, --host-mem, --io-block, --shard-size) count in powers of\n"
	       "1024: 10G is 10 GiB, and 10GB, 10gb or 10GiB are read as 10 GiB too; a bare\n"
	       "number is bytes.\n"
	       "\nOn --resume the checkpoint's saved options are the base; flags given\n"
	       "override them (for example --steps to train further).\n");
}

/* The updates GaLore's first projectors are spread over (galore.c caps the
 * spread at the refresh gap). */
static int first_spread(const struct st_train_opts *o)
{
	return o->galore_start_spread < o->galore_update_gap ? o->galore_start_spread
							     : o->galore_update_gap;
}

/* An option given for another optimizer than the one the run uses
 * (--galore-rank under adamw, --quant-block under sgd), or another schedule
 * (--decay-frac under cosine, --min-lr-ratio under constant), as a flag or a
 * key of the --config file conf: said, since it changes nothing. */
static void note_unused(const char *key, const struct st_train_opts *o, const char *conf)
{
	const char *opt = o->optimizer;
	const int galore = !strncmp(opt, "galore", 6), q8 = strstr(opt, "8bit") != NULL,
		  sgd = !strncmp(opt, "sgd", 3);
	char k[64];
	snprintf(k, sizeof k, "%s", key);
	for (char *c = k; *c; c++)
		*c = *c == '_' ? '-' : *c;
	const int unused = (!strncmp(k, "galore-", 7) && !galore) || (!strncmp(k, "quant-", 6) && !q8) ||
			   (!strcmp(k, "momentum") && !sgd) ||
			   ((!strcmp(k, "beta1") || !strcmp(k, "beta2") || !strcmp(k, "eps")) && sgd);
	if (unused && conf)
		st_log_warn("%s: \"%s\" is not used by --optimizer %s", conf, key, opt);
	else if (unused)
		st_log_warn("--%s is not used by --optimizer %s", k, opt);
	const int sched = (!strcmp(k, "decay-frac") && strcmp(o->schedule, "wsd")) ||
			  (!strcmp(k, "min-lr-ratio") && !strcmp(o->schedule, "constant"));
	if (sched && conf)
		st_log_warn("%s: \"%s\" is not used by --schedule %s", conf, key, o->schedule);
	else if (sched)
		st_log_warn("--%s is not used by --schedule %s", k, o->schedule);
}

void cli_note_unused_options(const struct cli_args *a, const char *conf,
			     const struct st_train_opts *o)
{
	/* options that fail their checks are refused later, and said once:
	 * not first warned as unused (--quant-block 100 under adamw read "not
	 * used by --optimizer adamw", then "must be a power of two") */
	const int muted = st_log_mute(1);
	const int bad = train_opts_validate(o) != ST_OK;
	st_log_mute(muted);
	if (bad)
		return;
	for (int i = 0; i < a->n; i++)
		note_unused(a->key[i], o, NULL);
	cJSON *root = NULL;
	const int old = st_log_mute(1); /* read once already: its errors were said */
	const int rc = conf ? fs_read_json(conf, &root, NULL) : ST_FAIL;
	st_log_mute(old);
	if (rc != ST_OK)
		return;
	const cJSON *it;
	cJSON_ArrayForEach(it, root)
		if (!cli_get((struct cli_args *)a, it->string, NULL)) /* a flag overrides it */
			note_unused(it->string, o, conf);
	cJSON_Delete(root);
}

/* Whether this command gives option `key` (spelled with dashes), as a flag
 * or a key of the --config file conf, either spelling. */
static int given(struct cli_args *a, const char *conf, const char *key)
{
	char us[64];
	snprintf(us, sizeof us, "%s", key);
	for (char *c = us; *c; c++)
		*c = *c == '-' ? '_' : *c;
	if (cli_get(a, key, NULL)) /* either spelling */
		return 1;
	cJSON *root = NULL;
	const int old = st_log_mute(1); /* read once already: its errors were said */
	const int rc = conf ? fs_read_json(conf, &root, NULL) : ST_FAIL;
	st_log_mute(old);
	const int in_conf = rc == ST_OK && (cJSON_GetObjectItemCaseSensitive(root, key) ||
					    cJSON_GetObjectItemCaseSensitive(root, us));
	cJSON_Delete(root);
	return in_conf;
}

/* Whether key is one of the comma-separated keys of skip. */
static int skipped(const char *skip, const char *key)
{
	const size_t n = strlen(key);
	for (const char *s = skip; *s; s += strcspn(s, ",") + (s[strcspn(s, ",")] == ',')) {
		if (strcspn(s, ",") == n && !strncmp(s, key, n))
			return 1;
	}
	return 0;
}

int cli_train_flags(struct cli_args *a, struct st_train_opts *o, const char *skip)
{
	/* --offload-dir may repeat (one per SSD): the flags' values are joined */
	char dirs[sizeof o->offload_dir] = "";
	int dirs_given = 0;
	for (int i = 0; i < a->n; i++) {
		if (skip && skipped(skip, a->key[i]))
			continue;
		ST_CHECK_USAGE(a->val[i] != cli_bare || !train_opts_needs_value(a->key[i]),
			 "give the value after it; strata train --help lists each option's values",
			 "--%s needs a value", a->key[i]);
		if (cli_key_is(a->key[i], "offload-dir")) {
			size_t len = strlen(dirs);
			ST_CHECK_USAGE(len + strlen(a->val[i]) + 2 < sizeof dirs, "use shorter paths",
				 "--offload-dir: too many or too long directories");
			if (*a->val[i])
				snprintf(dirs + len, sizeof dirs - len, "%s%s", len ? "," : "", a->val[i]);
			dirs_given = 1;
			a->used[i] = 1;
			continue;
		}
		ST_TRY(train_opts_set(o, a->key[i], a->val[i]));
		o->place_given |= cli_key_is(a->key[i], "place");
		o->device_updates_given |= cli_key_is(a->key[i], "device-updates");
		a->used[i] = 1;
	}
	if (dirs_given) /* --offload-dir '' alone: none (a resume's saved ones cleared) */
		ST_TRY(train_opts_set(o, "offload-dir", dirs));
	o->offload_dir_given = dirs_given;
	return ST_OK;
}

/* The run directory holding checkpoint directory dir: its parent, from the
 * resolved path (so "run/step-000002/." or "." inside a step directory name
 * the run, not the step). */
static int run_dir_of(char *out, size_t n, const char *dir)
{
	char real[PATH_MAX];
	ST_CHECK(realpath(dir, real), "check the --resume path", "cannot resolve %s: %s", dir,
		 strerror(errno));
	char *slash = strrchr(real, '/');
	if (slash == real)
		slash++; /* a checkpoint directly under / */
	*slash = '\0';
	ST_CHECK(strlen(real) < n, "use a shorter path", "run directory path too long: %s", real);
	snprintf(out, n, "%s", real);
	return ST_OK;
}

/* A checkpoint copied out of its run into a directory that holds no run:
 * its parent would become the run directory, and `latest`, metrics.jsonl
 * and the new step-N land there without a word (the working directory,
 * $HOME). Refused without --out. A run directory holds `latest`,
 * metrics.jsonl, or a step-N besides the checkpoint itself (a step-N
 * copied alone into a directory is no run's either). */
static int check_lone_checkpoint(const char *ckpt, const char *parent)
{
	char real[PATH_MAX], path[PATH_MAX + 32];
	long s, first;
	if (!realpath(ckpt, real))
		return ST_OK; /* said where it is opened */
	const char *base = strrchr(real, '/');
	const int is_step = fs_step_name(base ? base + 1 : real, &s);
	snprintf(path, sizeof path, "%s/latest", parent);
	struct stat st;
	if (lstat(path, &st) == 0)
		return ST_OK;
	snprintf(path, sizeof path, "%s/metrics.jsonl", parent);
	if (fs_exists(path) || ckpt_count_later(parent, -1, LONG_MAX, &first) > is_step)
		return ST_OK;
	ST_ERROR("give --out DIR for the run's checkpoints (a new directory, or the run it came from)",
		 "%s is a checkpoint outside a run directory: the run would go on in %s, which holds "
		 "no run (no latest, metrics.jsonl or other step-N)",
		 real, parent);
	return ST_FAIL;
}

/* A resume whose length or schedule options differ from the run's: the
 * warmup and decay are a function of the whole run, so the learning rate
 * from here on follows the new curve, not the one the run was on. Said once. */
static void note_new_schedule(const struct st_train_opts *saved, const struct st_trainer *tr)
{
	long total, warmup;
	train_schedule(saved, tr->step, tr->tokens_seen, &total, &warmup);
	if (saved->warmup < 0 && tr->run_warmup >= 0)
		warmup = tr->run_warmup; /* the one the run used (trainer.json) */
	const long next = tr->step + 1;
	if (next > tr->total_steps)
		return; /* nothing to train */
	const double was = lr_at(saved, next, total, warmup),
		     now = lr_at(&tr->o, next, tr->total_steps, tr->warmup);
	/* the same curve: the same rate, floor (where the schedule has one)
	 * and kind, and wsd's share of decay */
	const int wsd = !strcmp(tr->o.schedule, "wsd");
	const int same_curve = saved->lr == tr->o.lr && !strcmp(saved->schedule, tr->o.schedule) &&
			       (!strcmp(tr->o.schedule, "constant") ||
				saved->min_lr_ratio == tr->o.min_lr_ratio) &&
			       (!wsd || saved->decay_frac == tr->o.decay_frac);
	if (total == tr->total_steps && warmup == tr->warmup && same_curve)
		return;
	/* a constant rate does not depend on the run's length */
	if (same_curve && warmup == tr->warmup && !strcmp(tr->o.schedule, "constant"))
		return;
	/* what changed, each with the run's own value */
	char what[320] = "";
	size_t n = 0;
	if (strcmp(saved->schedule, tr->o.schedule))
		n += (size_t)snprintf(what + n, sizeof what - n, "--schedule %s (was %s)", tr->o.schedule,
				      saved->schedule);
	/* those the new curve has: a floor but under constant, wsd's decay */
	const struct {
		const char *flag;
		double now, was;
		int used;
	} vals[] = {{"lr", tr->o.lr, saved->lr, 1},
		    {"min-lr-ratio", tr->o.min_lr_ratio, saved->min_lr_ratio,
		     strcmp(tr->o.schedule, "constant") != 0},
		    {"decay-frac", tr->o.decay_frac, saved->decay_frac, wsd}};
	for (int i = 0; i < 3 && n < sizeof what; i++)
		if (vals[i].used && vals[i].now != vals[i].was) {
			char a[32], b[32];
			n += (size_t)snprintf(what + n, sizeof what - n, "%s--%s %s (was %s)", n ? ", " : "",
					      vals[i].flag, st_shortest(a, sizeof a, vals[i].now),
					      st_shortest(b, sizeof b, vals[i].was));
		}
	if (total != tr->total_steps || warmup != tr->warmup)
		st_log_info("the schedule now spans %ld steps (warmup %ld), not %ld (warmup %ld)%s%s: the "
			    "learning rate at step %ld is %.3g, where the run's own schedule had %.3g",
			    tr->total_steps, tr->warmup, total, warmup, *what ? ", with " : "", what, next,
			    now, was);
	else
		st_log_info("the learning-rate schedule changed (%s): the rest of the run follows the new "
			    "curve; at step %ld it is %.3g, where the run's own schedule had %.3g",
			    what, next, now, was);
}

/* A --config whose "out" names another directory than the one a resumed
 * run goes on in (run_dir): said, since only the --out flag moves it. */
static void note_config_out(const struct cli_args *a, const char *conf, const char *conf_out,
			    const char *run_dir)
{
	char real[PATH_MAX];
	/* o.out holds the checkpoint's saved one where the file has none (a
	 * copied run's names the original: that was said as the file's) */
	if (!conf || cli_get((struct cli_args *)a, "out", NULL) || !*conf_out ||
	    !given((struct cli_args *)a, conf, "out"))
		return;
	if (!realpath(conf_out, real))
		snprintf(real, sizeof real, "%s", conf_out); /* does not exist: surely another */
	if (strcmp(real, run_dir) != 0)
		st_log_warn("%s's \"out\" is not used on --resume: the run goes on in %s, the "
			    "checkpoint's run directory (give --out to write elsewhere)",
			    conf, run_dir);
}

/* --model naming a run or a checkpoint (not a model directory): a new run
 * from its weights, said, with a fresh optimizer (--resume continues it). */
static int start_from_checkpoint(struct st_train_opts *o)
{
	char dir[sizeof o->model];
	if (!*o->model)
		return ST_OK; /* the trainer asks for one */
	ST_TRY(resolve_model_dir(dir, sizeof dir, o->model));
	char p[sizeof o->model + 16];
	snprintf(p, sizeof p, "%s/trainer.json", dir);
	if (fs_exists(p)) /* a checkpoint: a run's, given or found */
		st_log_info("starting a new run from the weights of %s (a fresh optimizer and "
			    "schedule; --resume %s continues that run instead)",
			    dir, o->model);
	snprintf(o->model, sizeof o->model, "%s", dir);
	return ST_OK;
}

/* The default --seq-len on a model with fewer positions: the model's
 * length, said (a --seq-len given beyond it is refused by the trainer). */
static void fit_default_seq_len(struct st_train_opts *o)
{
	struct st_config cfg;
	char path[sizeof o->model + 16];
	snprintf(path, sizeof path, "%s/config.json", o->model);
	const int old = st_log_mute(1); /* unreadable: the trainer says why */
	const int rc = fs_exists(path) ? config_load(&cfg, path) : ST_FAIL;
	st_log_mute(old);
	if (rc != ST_OK || cfg.max_seq >= o->seq_len || cfg.max_seq < 2)
		return;
	st_log_info("--seq-len %d: the model's max_position_embeddings (the default %d is longer)",
		    cfg.max_seq, o->seq_len);
	o->seq_len = cfg.max_seq;
}

int cli_train_read(struct cli_args *a, struct st_train_opts *o, struct cli_train_src *src)
{
	train_opts_defaults(o);
	ST_TRY(cli_get_str(a, "resume", NULL, &src->resume));
	ST_TRY(cli_get_str(a, "config", NULL, &src->conf));
	if (!src->resume && src->conf) {
		/* a --config file's "resume" resumes as the flag does */
		struct st_train_opts c;
		train_opts_defaults(&c);
		ST_TRY(train_opts_load_json(&c, src->conf));
		snprintf(src->conf_resume, sizeof src->conf_resume, "%s", c.resume);
		src->resume = *src->conf_resume ? src->conf_resume : NULL;
	}
	if (src->resume) {
		ST_TRY(ckpt_resolve(src->dir, sizeof src->dir, src->resume));
		ST_TRY(ckpt_read_options(o, src->dir));
		o->resume[0] = '\0';
		src->saved = *o; /* the checkpoint's options: its schedule, its paths */
		/* a trace is of the leg that asked for it: the saved one, replayed,
		 * wrote the next leg's over it without a word */
		o->trace[0] = '\0';
	}
	if (src->conf) {
		ST_TRY(train_opts_load_json(o, src->conf));
		train_opts_defaults(&src->conf_only);
		ST_TRY(train_opts_load_json(&src->conf_only, src->conf));
	}
	return ST_OK;
}

int cli_check_bf16_source(struct cli_args *a, const struct cli_train_src *src,
			  const struct st_train_opts *o)
{
	const char *impl;
	if (strcmp(o->matmul_precision, "bf16") != 0 || cli_get(a, "matmul-precision", NULL) ||
	    session_cpu_bf16(&impl))
		return ST_OK; /* a flag's refusal names the flag (session_matmul_precision) */
	const int from_conf = src->conf && !strcmp(src->conf_only.matmul_precision, "bf16");
	if (from_conf)
		ST_USAGE_ERROR("remove it from the file, or give --matmul-precision fp32",
			       "the --config file %s gives matmul_precision bf16, and this CPU has no "
			       "bf16 matrix unit oneDNN uses (its bf16 matmul: %s)",
			       src->conf, impl);
	else
		ST_USAGE_ERROR("give --matmul-precision fp32 to go on here (the weights and state are "
			       "fp32 either way)",
			       "the run trained with --matmul-precision bf16 (saved in "
			       "%s/trainer.json), and this CPU has no bf16 matrix unit oneDNN uses (its "
			       "bf16 matmul: %s)",
			       src->dir, impl);
	return ST_FAIL;
}

/* The first error validating o would say ("" when it passes). */
static void first_error(const struct st_train_opts *o, char *msg, size_t n)
{
	const int old = st_log_mute(1);
	const int bad = train_opts_validate(o) != ST_OK;
	snprintf(msg, n, "%s", bad ? st_log_last_error() : "");
	st_log_mute(old);
}

int cli_check_config_values(struct cli_args *a, const struct cli_train_src *src,
			    const struct st_train_opts *o)
{
	if (!src->conf)
		return ST_OK;
	/* the file is to blame when its options alone fail as the merged ones
	 * do, and the options without it do not (a length no source gave is
	 * nobody's) */
	char merged[512], alone[512], without[512];
	first_error(o, merged, sizeof merged);
	if (!*merged)
		return ST_OK;
	struct st_train_opts c = src->conf_only, w;
	c.steps = o->steps, c.max_tokens = o->max_tokens; /* a length from elsewhere */
	first_error(&c, alone, sizeof alone);
	if (src->resume)
		w = src->saved;
	else
		train_opts_defaults(&w);
	const int old = st_log_mute(1);
	const int flags_ok = cli_train_flags(a, &w, "config,json") == ST_OK;
	st_log_mute(old);
	/* a length only the file gave is the file's to blame; none at all is
	 * nobody's */
	if (flags_ok && !w.steps && !w.max_tokens && !src->conf_only.steps &&
	    !src->conf_only.max_tokens)
		w.steps = o->steps, w.max_tokens = o->max_tokens;
	first_error(&w, without, sizeof without);
	if (!flags_ok || strcmp(merged, alone) != 0 || !strcmp(merged, without))
		return ST_OK;
	train_opts_validate(o); /* said as it fails */
	ST_USAGE_ERROR("fix the value in the file, or give the option as a flag",
		 "%s: the value above is the --config file's", src->conf);
	return ST_FAIL;
}

int cli_train_model(struct cli_args *a, const char *conf, struct st_train_opts *o)
{
	ST_TRY(start_from_checkpoint(o));
	if (!given(a, conf, "seq-len"))
		fit_default_seq_len(o);
	return ST_OK;
}

/* Other training data on resume: said, and a validation file saved with
 * the run (a --val given when it started) that would go on scoring the
 * old data is warned. */
static void note_new_data(struct cli_args *a, const char *conf, const struct st_train_opts *saved,
			  const struct st_train_opts *o)
{
	char now[PATH_MAX], was[PATH_MAX];
	if (!realpath(o->data, now))
		snprintf(now, sizeof now, "%s", o->data);
	if (!realpath(saved->data, was))
		snprintf(was, sizeof was, "%s", saved->data);
	if (!strcmp(now, was))
		return;
	st_log_info("training data: %s (the run trained on %s so far)", now, was);
	if (*o->val && !strcmp(o->val, saved->val) && !given(a, conf, "val"))
		st_log_warn("the held-out loss still reads %s, the --val the run started with: give "
			    "--val '' for the new data's val.bin, or --val FILE",
			    o->val);
}

/* The rank each GaLore matrix gets from --galore-rank r (galore.c: a whole
 * rank, or a fraction of the hidden size; at most the matrix's smaller
 * side), for the three shapes a LLaMA layer has: equal for two values of r
 * when the state they lay out is the same. */
static void galore_ranks(double r, const struct st_config *c, int out[3])
{
	const int want = r >= INT_MAX ? INT_MAX : r >= 1 ? (int)r : (int)lround(r * c->dim);
	const int q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
	const int sides[3] = {q < c->dim ? q : c->dim, kv < c->dim ? kv : c->dim,
			      c->ffn_dim < c->dim ? c->ffn_dim : c->dim};
	for (int i = 0; i < 3; i++)
		out[i] = want < sides[i] ? want : sides[i];
}

/* What a resume may not change, or changes silently, against the
 * checkpoint's own options (saved; its directory ckpt). */
int cli_check_resume(struct cli_args *a, const char *conf, const struct st_train_opts *saved,
			struct st_train_opts *o, const char *ckpt)
{
	/* before the new optimizer's own option checks (sgd8bit's --momentum):
	 * they would ask for what cannot be used */
	enum st_optim_kind from, to;
	/* an unknown name is said by train_opts_validate below, naming the
	 * file it came from (it was said three times, not named) */
	const int old_mute = st_log_mute(1);
	const int names_ok = optim_parse_kind(&from, saved->optimizer) == ST_OK &&
			     optim_parse_kind(&to, o->optimizer) == ST_OK;
	st_log_mute(old_mute);
	ST_CHECK_USAGE(!names_ok || from == to || ckpt_can_convert(from, to),
		 "resume with the optimizer the run was started with (adamw and adamw8bit convert "
		 "into each other, as do sgd and sgd8bit)",
		 "the run trained with --optimizer %s, whose state cannot become --optimizer %s's",
		 saved->optimizer, o->optimizer);
	/* plain SGD without momentum keeps no buffer for sgd8bit to quantize */
	ST_CHECK_USAGE(!names_ok || from != ST_OPT_SGD || to != ST_OPT_SGD8 || saved->momentum != 0.0,
		 "resume with --optimizer sgd --momentum 0, or start a new run for sgd8bit",
		 "the run trained with --optimizer sgd and no momentum: its checkpoint has no momentum "
		 "buffer for sgd8bit to quantize");
	/* (a checkpoint saved before the option reads back as fp32, the default) */
	if (strcmp(o->matmul_precision, saved->matmul_precision) != 0)
		st_log_info("matmul precision: %s from here on (the run trained with %s before)",
			    o->matmul_precision, saved->matmul_precision);
	/* The options as merged, checked here to name where a bad value came
	 * from: the saved options were checked when the run began, so when
	 * they fail on their own, trainer.json was changed since (the error
	 * read as if a flag had given the value). A flag may still fix it. */
	if (train_opts_validate(o) != ST_OK) {
		const int old = st_log_mute(1);
		const int saved_bad = train_opts_validate(saved) != ST_OK;
		st_log_mute(old);
		if (saved_bad) {
			ST_USAGE_ERROR("fix the value in the file, give the option as a flag, or resume from "
				 "another checkpoint",
				 "%s/trainer.json: the value above is the checkpoint's saved one", ckpt);
			ckpt_name_earlier(ckpt);
		}
		return ST_FAIL;
	}
	if (strcmp(o->model, saved->model) != 0) {
		if (given(a, conf, "model"))
			st_log_warn("%s is not used on --resume: the checkpoint holds the model "
				    "(to start a new run from %s, leave out --resume)",
				    cli_get(a, "model", NULL) ? "--model" : "the --config file's \"model\"",
				    o->model);
		memcpy(o->model, saved->model, sizeof o->model); /* trainer.json keeps the run's */
	}
	/* checkpoints written before paths were saved absolute hold them as
	 * typed, relative to where that run started */
	const char *paths[2] = {o->data, o->val}, *saved_paths[2] = {saved->data, saved->val};
	for (int i = 0; i < 2; i++)
		ST_CHECK(!*paths[i] || *paths[i] == '/' || strcmp(paths[i], saved_paths[i]) ||
				 fs_exists(paths[i]),
			 "give --data (and --val) again, or resume from the directory the run started in",
			 "the %s path '%s' came from the checkpoint's saved options and is relative to "
			 "where that run started (runs save absolute paths since 2026-11-23)",
			 i ? "validation" : "data", paths[i]);
	/* an absolute one that is gone: the data moved since (its open would
	 * say only "check the path") */
	for (int i = 0; i < 2; i++)
		ST_CHECK(!*paths[i] || strcmp(paths[i], saved_paths[i]) || fs_exists(paths[i]) ||
				 given(a, conf, i ? "val" : "data"), /* the user's: its open says */
			 i ? "give --val PATH where the validation data is now"
			   : "give --data PATH where the training data is now (the same tokens)",
			 "the %s path %s, saved with the run, does not exist now", i ? "validation" : "data",
			 paths[i]);
	note_new_data(a, conf, saved, o);
	if (strncmp(o->optimizer, "galore", 6) || strncmp(saved->optimizer, "galore", 6))
		return ST_OK; /* other pairs: the state's own checks (checkpoint.c) */
	/* each GaLore matrix's moments count their updates from its start: the
	 * first projectors' spread stays; a spread not given keeps the run's */
	const int spread = first_spread(saved);
	if (!given(a, conf, "galore-start-spread")) /* as a flag or a --config key */
		o->galore_start_spread = spread;
	char hint[200];
	snprintf(hint, sizeof hint,
		 "this run spread its first projectors over %d update%s: give --galore-start-spread "
		 "%d with a --galore-update-gap of %d or more",
		 spread, spread == 1 ? "" : "s", spread, spread);
	ST_CHECK_USAGE(first_spread(o) == spread, hint,
		 "--galore-start-spread %d with --galore-update-gap %d on resume spreads the first "
		 "projectors over %d update%s; this run used %d, which fixed when each matrix's "
		 "updates began",
		 o->galore_start_spread, o->galore_update_gap, first_spread(o),
		 first_spread(o) == 1 ? "" : "s", spread);
	/* the rank is the shape of the projectors and moments: the same state,
	 * whichever way it is written (8 or 0.03125 of 256) */
	struct st_config cfg;
	char path[4200];
	snprintf(path, sizeof path, "%s/config.json", ckpt);
	if (config_load(&cfg, path) != ST_OK) {
		ckpt_name_earlier(ckpt);
		return ST_FAIL;
	}
	int want[3], had[3];
	galore_ranks(o->galore_rank, &cfg, want);
	galore_ranks(saved->galore_rank, &cfg, had);
	ST_CHECK_USAGE(!memcmp(want, had, sizeof want),
		 "leave --galore-rank as the run started (start a new run for another rank)",
		 "--galore-rank %g on resume: the run used %g, and its projectors and moments have "
		 "that rank",
		 o->galore_rank, saved->galore_rank);
	return ST_OK;
}

int cmd_train(int argc, char **argv)
{
	struct cli_args a;
	ST_TRY(cli_parse(&a, argc, argv));
	if (cli_has(&a, "help")) {
		help();
		return ST_OK;
	}
	ST_CHECK_USAGE(a.n > 0, "strata train --help lists the options",
		 "strata train: give --model DIR --data DIR --out DIR and a length (--steps N or "
		 "--max-tokens N), or --resume RUN");
	/* order of precedence: defaults < checkpoint's options < --config < flags */
	struct st_train_opts o;
	struct cli_train_src src;
	ST_TRY(cli_train_read(&a, &o, &src));
	const char *resume = src.resume, *conf = src.conf, *dir = src.dir;
	const struct st_train_opts *saved = &src.saved;
	/* A resumed run writes beside the checkpoint (its run directory), not to
	 * an "out" saved in it or in the --config the run started with: those
	 * name the original run, relative to where it started, and would be
	 * written into from a copy. Only the --out flag moves it. */
	if (resume) {
		char conf_out[sizeof o.out];
		snprintf(conf_out, sizeof conf_out, "%s", o.out);
		ST_TRY(run_dir_of(o.out, sizeof o.out, dir));
		note_config_out(&a, conf, conf_out, o.out);
	}
	ST_TRY(cli_train_flags(&a, &o, "config"));
	ST_TRY(cli_check_bf16_source(&a, &src, &o));
	if (resume && !cli_get(&a, "out", NULL))
		ST_TRY(check_lone_checkpoint(dir, o.out));
	o.offload_dir_given |= given(&a, conf, "offload-dir"); /* a --config's too */
	o.place_given |= given(&a, conf, "place"); /* a --config's too */
	o.device_updates_given |= given(&a, conf, "device-updates");
	o.warmup_given = given(&a, conf, "warmup");
	/* A new token budget on resume, without --steps: the budget sets the
	 * length, not the steps saved with the run (--steps wins when both are
	 * given, as in a fresh run). */
	const int steps_given = given(&a, conf, "steps"), tokens_given = given(&a, conf, "max-tokens");
	if (resume && tokens_given && !steps_given)
		o.steps = 0;
	if (o.steps > 0 && o.max_tokens > 0 && tokens_given)
		st_log_warn("--max-tokens %.15g is not used: --steps %ld sets the run's length",
			    o.max_tokens, o.steps);
	ST_TRY(cli_check_config_values(&a, &src, &o));
	cli_note_unused_options(&a, conf, &o);
	if (resume)
		ST_TRY(cli_check_resume(&a, conf, saved, &o, dir));
	else
		ST_TRY(cli_train_model(&a, conf, &o));
	struct st_trainer tr;
	const int out_existed = fs_exists(o.out);
	ST_TRY(interrupt_catch()); /* before trainer_open starts any thread */
	int rc = trainer_open(&tr, &o);
	const int opened = rc == ST_OK;
	const long start_step = opened ? tr.step : 0;
	if (rc == ST_OK && resume)
		note_new_schedule(saved, &tr);
	if (rc == ST_OK)
		rc = trainer_run(&tr);
	const int interrupted = rc == ST_OK ? tr.interrupted : 0; /* it said so itself */
	char val[64] = "no validation data", train[32] = "none";
	if (rc == ST_OK && tr.data.has_val)
		snprintf(val, sizeof val, isnan(tr.last_val_loss) ? "no held-out loss" : "val loss %.4f",
			 tr.last_val_loss);
	if (rc == ST_OK && !isnan(tr.last_loss)) /* NaN: no step had a loss target */
		snprintf(train, sizeof train, "%.4f", tr.last_loss);
	if (rc == ST_OK && !interrupted && tr.skipped)
		printf("done: step %ld (%ld skipped for a non-finite loss or gradient, or one too "
		       "large), last finite train loss %s, %s\n",
		       tr.step, tr.skipped, train, val);
	else if (rc == ST_OK && !interrupted)
		printf("done: step %ld, train loss %s, %s\n", tr.step, train, val);
	char lock[sizeof o.out + 8], metrics[sizeof o.out + 16];
	snprintf(lock, sizeof lock, "%s/.lock", o.out);
	snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", o.out);
	/* a resume with nothing to train (said) into a new directory leaves
	 * none: its empty metrics.jsonl and lock go with it */
	struct stat mst;
	const int idle = opened && rc == ST_OK && tr.step == start_step && !out_existed;
	if (idle && stat(metrics, &mst) == 0 && mst.st_size == 0)
		unlink(metrics);
	if ((!opened || idle) && !out_existed && tr.lock_fd >= 0)
		unlink(lock); /* ours, made with the directory; removed while still held */
	/* a checkpoint still being written is finished first; one that went
	 * into place without `latest` moved to it (said by the save) is the
	 * run's last, not the step `latest` still names */
	char lagging[sizeof o.out + 300] = "";
	char resumed[sizeof tr.ckpt_loaded]; /* what a run that saved nothing can go on from */
	snprintf(resumed, sizeof resumed, "%s", opened ? tr.ckpt_loaded : "");
	if (opened)
		ckpt_finish(&tr); /* its failure was said; joined, it is in ck.rc */
	if (opened && tr.ck.rc != ST_OK && tr.ck.in_place)
		snprintf(lagging, sizeof lagging, "%s/%s", o.out, tr.ck.name);
	/* the directories rundir_check made for --out, as prefixes of o.out
	 * (tr's copy is made absolute later; trainer_close clears tr) */
	size_t made[ST_MADE_MAX];
	const int n_made = tr.n_out_made;
	memcpy(made, tr.out_made, sizeof made);
	trainer_close(&tr);
	if (opened && rc != ST_OK && *lagging) {
		st_log_info("the run's last checkpoint is %s (`latest` still names an earlier one): "
			    "`strata train --resume %s` goes on from it once the cause above is fixed",
			    lagging, lagging);
	} else if (opened && rc != ST_OK) {
		/* a run that stopped on an error: where it can go on from */
		char last[sizeof o.out + 300];
		const int old = st_log_mute(1);
		const int found = ckpt_resolve(last, sizeof last, o.out) == ST_OK;
		st_log_mute(old);
		if (found) {
			st_log_info("the run's last checkpoint is %s: `strata train --resume %s` goes on "
				    "from it once the cause above is fixed",
				    last, o.out);
		} else if (*resumed) {
			st_log_info("the run saved no checkpoint; it resumed from %s: `strata train "
				    "--resume %s --out %s` starts again from there once the cause above "
				    "is fixed",
				    resumed, resumed, o.out);
		} else {
			st_log_info("the run saved no checkpoint");
		}
	}
	/* a run that could not start, or had nothing to do, leaves no empty
	 * directory, nor the ones above it that it made (rmdir removes only
	 * an empty one) */
	if ((!opened || idle) && !out_existed)
		fs_rmdir_made(o.out, made, n_made);
	if (interrupted)
		interrupt_reraise(interrupted); /* saved and closed: end as the signal would */
	return rc;
}
