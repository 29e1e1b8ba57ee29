/* Loading checkpoints; see trainer.h and checkpoint.c (the format is
 * ckpt_format.h's).
 *
 * A path given to --resume, eval or sample resolves to a step directory
 * (ckpt_resolve); trainer.json's options are the resumed run's base; its
 * "model" is checked against the checkpoint's config.json; the optimizer
 * file's metadata are checked against the run's optimizer (a setting that
 * differs is refused, or converted within a family: convert.c) before its
 * tensors are read, each checked finite. A load that fails names the
 * newest earlier checkpoint of the run to resume from instead. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "io/fsutil.h"
#include "io/safetensors.h"
#include "model/hf.h"
#include "trainer/ckpt_format.h"
#include "trainer/trainer.h"
#include "util/check.h"
#include "util/parse.h"
#include "util/finite.h"

/* A checkpoint of run directory run saved after the step `latest` names
 * (named) by the same run, whose save stopped before `latest` moved (a
 * kill between the two renames, a tmpfs out of inodes): the checkpoint
 * chain back from it (ckpt_chain: each hop the very checkpoint its
 * successor names) reaches named, and its trainer.json was written after
 * `latest` was last set (a resume from an earlier step sets `latest` back
 * to it on purpose, after the later ones were saved). Said, with the path
 * that goes on from it; `latest` is still what --resume RUN takes, since a
 * copy of the run may not keep the times that tell the two apart. (It went
 * on from `latest`'s step and then spoke of the newer one as a checkpoint
 * of an abandoned run.) */
static void later_than_latest(const char *run, long named)
{
	char name[256], path[4400], link[4200];
	const long newest = ckpt_newest(run, name, sizeof name);
	/* while a run trains there, that is its save between its two renames */
	if (newest <= named || ckpt_run_busy(run))
		return;
	long steps[4096], legacy;
	const int k = ckpt_chain(run, newest, steps, 4096, &legacy);
	int on = 0;
	for (int i = 1; i < k; i++)
		on |= steps[i] == named;
	struct stat tj, ln;
	snprintf(path, sizeof path, "%s/%s/trainer.json", run, name);
	snprintf(link, sizeof link, "%s/latest", run);
	if (!on || stat(path, &tj) != 0 || lstat(link, &ln) != 0 ||
	    (tj.st_mtim.tv_sec < ln.st_mtim.tv_sec ||
	     (tj.st_mtim.tv_sec == ln.st_mtim.tv_sec && tj.st_mtim.tv_nsec < ln.st_mtim.tv_nsec)))
		return;
	static int said; /* train resolves the path twice */
	if (!said++)
		st_log_warn("%s/latest names step-%06ld, but %s/%s, saved after it by the same run, is "
			    "newer (its save seems to have stopped before `latest` moved): give that "
			    "path to use it",
			    run, named, run, name);
}

/* The flag the checkpoints named in messages are given to: train's
 * --resume, or eval's and sample's --model (ckpt_paths_flag). */
static const char *path_flag = "--resume";

void ckpt_paths_flag(const char *flag) { path_flag = flag; }

/* The directory ckpt_pin holds; -1: none. */
static int pin_fd = -1;

void ckpt_unpin(void)
{
	if (pin_fd >= 0)
		close(pin_fd); /* and the lock with it */
	pin_fd = -1;
}

int ckpt_pin(const char *dir)
{
	ckpt_unpin();
	const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno != ENOENT; /* gone; another failure is the load's to say */
	if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
		const int err = errno;
		close(fd);
		return err != EWOULDBLOCK; /* a prune holds it: being removed */
	}
	/* still under its name: a prune may have renamed it away and removed
	 * it between the resolve and the lock */
	struct stat held, now;
	if (fstat(fd, &held) != 0 || stat(dir, &now) != 0 || held.st_dev != now.st_dev ||
	    held.st_ino != now.st_ino) {
		close(fd);
		return 0;
	}
	pin_fd = fd; /* held until ckpt_unpin, or the process ends */
	return 1;
}

/* path's length without its trailing slashes ("/" keeps its one) */
static size_t base_len(const char *path)
{
	size_t len = strlen(path);
	while (len > 1 && path[len - 1] == '/')
		len--;
	return len;
}

int ckpt_resolve(char *out, size_t n, const char *path)
{
	char p[4200];
	ST_CHECK(*path, "give the path of a model, a checkpoint or a run directory",
		 "an empty path was given for the model or checkpoint");
	if (!fs_exists(path)) { /* a step directory moved aside by an unfinished re-save? */
		fs_dirname(p, sizeof p, path);
		ckpt_recover_aside(p, 0);
	}
	ST_CHECK(fs_exists(path), "check the path", "%s does not exist", path);
	ST_CHECK(fs_is_dir(path), "give a checkpoint directory (run/step-NNNNNN) or a run directory",
		 "%s is not a directory", path);
	snprintf(p, sizeof p, "%s/trainer.json", path);
	if (fs_exists(p)) {
		snprintf(out, n, "%s", path);
		return ST_OK;
	}
	ckpt_recover_aside(path, 0); /* a re-save killed between its renames */
	snprintf(p, sizeof p, "%s/latest", path);
	char target[PATH_MAX];
	ssize_t len = readlink(p, target, sizeof target - 1);
	static int said; /* train resolves the path twice */
	struct stat ls;
	const int other = len <= 0 && lstat(p, &ls) == 0; /* a `latest` that is no link */
	if (len <= 0 && ckpt_newest(path, target, sizeof target) >= 0) {
		/* a run killed after its first checkpoint went in, before `latest` */
		if (!said++)
			st_log_warn("%s %s: using its newest checkpoint, %s", path,
				    other ? "has a `latest` that is not a link"
					  : "has no `latest` (the run stopped before it was written)",
				    target);
		len = (ssize_t)strlen(target);
	}
	/* a model or data directory given for a run: said as what it is (it
	 * read as a run stopped before its first checkpoint) */
	char probe[4300];
	snprintf(probe, sizeof probe, "%s/config.json", path);
	ST_CHECK_USAGE(len > 0 || !fs_exists(probe),
		       "start a new run from it with --model (--resume takes a run directory or one "
		       "of its step-NNNNNN checkpoints)",
		       "%s is a model directory, not a run or a checkpoint", path);
	snprintf(probe, sizeof probe, "%s/train.bin", path);
	ST_CHECK_USAGE(len > 0 || !fs_exists(probe),
		       "give it as --data (--resume takes a run directory or one of its "
		       "step-NNNNNN checkpoints)",
		       "%s is a prepared data directory, not a run or a checkpoint", path);
	ST_CHECK(len > 0, "a run stopped before its first checkpoint: start it again with its "
		 "original command (or give a checkpoint directory, run/step-NNNNNN)",
		 "no checkpoint at %s (neither trainer.json nor latest found)", path);
	target[len] = '\0';
	if (target[0] == '/') /* a link made by hand: absolute (strata writes the step's name) */
		snprintf(out, n, "%s", target);
	else
		snprintf(out, n, "%.*s/%s", (int)base_len(path), path, target); /* RUN/ as RUN */
	/* a link made by hand into another run: a resume continues that run,
	 * and writes there */
	char rp[PATH_MAX], rt[PATH_MAX], parent[PATH_MAX];
	static int said_other; /* train resolves the path twice */
	if (realpath(path, rp) && realpath(out, rt)) {
		fs_dirname(parent, sizeof parent, rt);
		if (strcmp(parent, rp) != 0 && !said_other++)
			st_log_warn("%s/latest points to %s, in another directory: a resume continues "
				    "that run, and writes its checkpoints there",
				    path, target);
	}
	if (!fs_exists(out)) {
		ST_ERROR("give one of the run's step-NNNNNN directories",
			 "%s/latest points to %s, which does not exist", path, target);
		char newest[256];
		if (ckpt_newest(path, newest, sizeof newest) >= 0)
			st_log_info("the run's newest checkpoint: %s %s/%s", path_flag, path, newest);
		else
			st_log_info("%s holds no checkpoint", path);
		return ST_FAIL;
	}
	snprintf(p, sizeof p, "%s/trainer.json", out);
	if (!fs_exists(p)) {
		ST_ERROR("the checkpoint is incomplete; pick an earlier step directory",
			 "%s has no trainer.json", out);
		ckpt_name_earlier(out);
		return ST_FAIL;
	}
	long named;
	if (target[0] != '/' && fs_step_name(target, &named))
		later_than_latest(path, named);
	return ST_OK;
}

/* Whether the directory is named step-N (RUN/step-N/ as well), and N; dir
 * gets the path without its trailing slashes. */
static int dir_step(char dir[4200], const char *ckpt_dir, long *step)
{
	snprintf(dir, 4200, "%s", ckpt_dir);
	for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/';)
		dir[--n] = '\0';
	const char *base = strrchr(dir, '/');
	return fs_step_name(base ? base + 1 : dir, step);
}

void ckpt_name_earlier(const char *ckpt_dir)
{
	char dir[4200], run[4200], best_name[256] = "";
	long current, best = -1, s;
	if (!dir_step(dir, ckpt_dir, &current))
		return;
	fs_dirname(run, sizeof run, dir);
	DIR *d = opendir(run);
	if (!d)
		return;
	struct dirent *e;
	char path[4600];
	while ((e = readdir(d))) {
		/* a checkpoint: a step-N directory without trainer.json (empty,
		 * another tool's) was named, and --resume then found nothing */
		snprintf(path, sizeof path, "%s/%s/trainer.json", run, e->d_name);
		if (fs_step_name(e->d_name, &s) && s < current && s > best && fs_exists(path)) {
			best = s;
			snprintf(best_name, sizeof best_name, "%s", e->d_name);
		}
	}
	closedir(d);
	if (best >= 0)
		st_log_info("the newest earlier checkpoint: %s %s/%s", path_flag, run, best_name);
	else
		st_log_info("%s holds no checkpoint earlier than step %ld", run, current);
}

static int read_json(const char *path, cJSON **root)
{
	ST_TRY(fs_read_json(path, root, "the checkpoint is damaged; use an earlier one"));
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(*root, "format");
	if (!cJSON_IsString(f) || strcmp(f->valuestring, CKPT_FORMAT) != 0) {
		cJSON_Delete(*root);
		ST_ERROR("the checkpoint was written by another version of strata",
			 "%s: unknown checkpoint format", path);
		return ST_FAIL;
	}
	return ST_OK;
}

int ckpt_read_options(struct st_train_opts *o, const char *ckpt_dir)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/trainer.json", ckpt_dir);
	cJSON *root;
	if (read_json(path, &root) != ST_OK) {
		ckpt_name_earlier(ckpt_dir);
		return ST_FAIL;
	}
	/* runs saved before --galore-start-spread existed computed every first
	 * projector at update 1: keep that for them */
	o->galore_start_spread = 1;
	const cJSON *opts = cJSON_GetObjectItemCaseSensitive(root, "options");
	int rc = ST_OK;
	if (!opts) {
		ST_ERROR("the file was changed or damaged: resume from another checkpoint",
			 "%s has no \"options\"", path);
		rc = ST_FAIL;
	}
	if (rc == ST_OK)
		rc = train_opts_from_cjson(o, opts, path);
	cJSON_Delete(root);
	if (rc != ST_OK)
		ckpt_name_earlier(ckpt_dir);
	return rc;
}

/* A whole number in a metadata value (the text as written, nothing after). */
static int meta_long(const struct st_safetensors *sf, const char *key, long *out)
{
	const char *v = safetensors_meta(sf, key);
	char *end;
	if (!v)
		return 0;
	if (!(*v >= '0' && *v <= '9') && *v != '-')
		return -1; /* strtol would skip leading blanks and take a '+' */
	errno = 0;
	*out = strtol(v, &end, 10);
	return end != v && *end == '\0' && errno == 0 ? 1 : -1;
}

/* A metadata key every strata optimizer file has. */
static int require_meta(const struct st_safetensors *sf, const char *path, const char *key)
{
	ST_CHECK(safetensors_meta(sf, key),
		 "the file was not written by strata, or was rewritten without its metadata; use "
		 "another checkpoint",
		 "%s has no '%s' in its metadata", path, key);
	return ST_OK;
}

/* What the optimizer file holds, as check_optimizer_meta reads it. */
struct saved_state {
	enum st_optim_kind kind;
	int block;   /* the 8-bit kinds' quantization block */
	int convert; /* laid out otherwise than this run's state: ckpt_convert_state */
	int setting; /* a failed check was of a setting the run asks otherwise (a usage
		      * error), not damage */
};

/* The settings the state was written with, against the run's: the
 * optimizer, for the 8-bit kinds the block and the fp32-state threshold
 * (they decide which tensors exist and their shapes), and the update count,
 * which the bias correction follows (a file from another step has another);
 * for SGD, whether it keeps a momentum buffer. Another optimizer of the same
 * family (adamw / adamw8bit, sgd / sgd8bit) or another block or threshold
 * means the state is converted; anything else is refused. Files written
 * before quant_min_size or momentum was recorded skip those checks. */
static int check_optimizer_meta(const struct st_trainer *tr, const struct st_safetensors *sf,
				const char *path, struct saved_state *src)
{
	const struct st_optim_cfg *c = &tr->opt.cfg;
	ST_TRY(require_meta(sf, path, "optimizer"));
	const char *kind = safetensors_meta(sf, "optimizer");
	ST_CHECK(optim_parse_kind(&src->kind, kind) == ST_OK, "use a checkpoint strata wrote",
		 "%s holds state of an unknown optimizer '%s'", path, kind);
	/* an --optimizer the state cannot become is refused before this
	 * (cli_check_resume, from trainer.json's): here the two files disagree */
	ST_CHECK(src->kind == c->kind || ckpt_can_convert(src->kind, c->kind),
		 "trainer.json and the state file disagree: the checkpoint was changed or damaged; "
		 "use an earlier one",
		 "%s holds %s state, but the run asks for --optimizer %s", path, kind,
		 optim_kind_name(c->kind));
	src->convert = src->kind != c->kind;
	src->block = c->quant_block;
	long v;
	int got;
	if (optim_kind_is_8bit(src->kind)) {
		ST_TRY(require_meta(sf, path, "quant_block"));
		got = meta_long(sf, "quant_block", &v);
		ST_CHECK(got == 1 && optim_quant_block_ok((int)v) && v == (int)v,
			 "the checkpoint is damaged; use an earlier one",
			 "%s was written with quantization block %s, not a power of two in [16, 65536]",
			 path, safetensors_meta(sf, "quant_block"));
		src->block = (int)v;
		got = meta_long(sf, "quant_min_size", &v);
		ST_CHECK(got != -1, "the checkpoint is damaged; use an earlier one",
			 "%s was written with --quant-min-size %s, which is not a whole number", path,
			 safetensors_meta(sf, "quant_min_size"));
		if (src->kind == c->kind && (src->block != c->quant_block ||
					     (got == 1 && v != c->quant_min_numel))) {
			src->setting = 1;
			ST_CHECK_USAGE(ckpt_can_convert(src->kind, c->kind),
				 "resume with the --quant-block and --quant-min-size the run was started "
				 "with (GaLore's state is not converted)",
				 "%s was written with quantization block %d and --quant-min-size %s, the "
				 "run asks for %d and %ld",
				 path, src->block,
				 got == 1 ? safetensors_meta(sf, "quant_min_size") : "(not recorded)",
				 c->quant_block, c->quant_min_numel);
			src->setting = 0;
			src->convert = 1;
		}
	}
	/* SGD keeps a momentum buffer only with momentum (sgd8bit always has
	 * one): a resume that turns it on or off would find tensors missing or
	 * left over (a changed non-zero value is a hyperparameter like --lr,
	 * and allowed) */
	const char *mom = safetensors_meta(sf, "momentum");
	if ((c->kind == ST_OPT_SGD || c->kind == ST_OPT_SGD8) && mom) {
		const int had = src->kind == ST_OPT_SGD8 || strtod(mom, NULL) != 0.0,
			  has = c->momentum != 0.0f;
		src->setting = had != has;
		ST_CHECK_USAGE(had == has,
			 had ? "resume with a non-zero --momentum, as the run was started"
			 : c->kind == ST_OPT_SGD8
				 ? "sgd8bit quantizes a momentum buffer this checkpoint does not have; "
				   "resume with --optimizer sgd --momentum 0"
				 : "resume with --momentum 0, as the run was started",
			 "%s was written by %s with --momentum %s (%s momentum buffer), the run asks "
			 "for --momentum %g",
			 path, src->kind == ST_OPT_SGD ? "SGD" : kind, mom, had ? "a" : "no",
			 (double)c->momentum);
	}
	ST_TRY(require_meta(sf, path, "updates"));
	if (tr->plan_only) /* plan reads no trainer.json counts to match */
		return ST_OK;
	got = meta_long(sf, "updates", &v);
	ST_CHECK(got == 1 && v == tr->updates,
		 "the checkpoint's files do not belong together; use an earlier checkpoint",
		 "%s holds the state after %s updates, but trainer.json counts %ld", path,
		 safetensors_meta(sf, "updates"), tr->updates);
	return ST_OK;
}

/* Whether name is one of the run's state tensors (for the error message). */
static int is_state_name(const struct st_optim *o, const char *name)
{
	for (int i = 0; i < o->m->n_params; i++) {
		const char *pn = o->m->params[i].name;
		const size_t len = strlen(pn);
		if (strncmp(name, pn, len) != 0 || name[len] != '.')
			continue;
		struct st_state_tensor st[ST_STATE_TENSORS_MAX];
		const int k = optim_state_tensors(o, i, st);
		for (int j = 0; j < k; j++)
			if (!strcmp(name + len + 1, st[j].suffix))
				return 1;
	}
	return 0;
}

/* Every state tensor the run lays out, from the file into the S slabs; each
 * fp32 one finite, each absmax and fp32 second moment >= 0; no tensor in the
 * file left over. */
static int load_optimizer(struct st_trainer *tr, const struct st_safetensors *sf,
			  const char *path)
{
	const struct st_model *m = &tr->s.model;
	const char *damaged = "the checkpoint is damaged; resume from an earlier one";
	int rc = ST_OK, n = 0;
	for (int u = 0; u < m->n_units && rc == ST_OK; u++) {
		if (!tr->opt.unit_bytes[u])
			continue;
		char *state = store_acquire(&tr->s.store, u, ST_SLAB_S);
		const struct st_unit *un = &m->units[u];
		for (int i = un->first_param; i < un->first_param + un->n_params && rc == ST_OK; i++) {
			const struct st_param *p = &m->params[i];
			struct st_state_tensor st[ST_STATE_TENSORS_MAX];
			int k = optim_state_tensors(&tr->opt, i, st);
			for (int j = 0; j < k && rc == ST_OK; j++, n++) {
				char name[200];
				snprintf(name, sizeof name, "%.95s.%.31s", p->name, st[j].suffix);
				rc = safetensors_load_raw(sf, name, st[j].dtype, st[j].ndim,
							  st[j].shape, state + st[j].off, st[j].bytes);
				const float *x = (const float *)(state + st[j].off);
				const size_t nf = rc == ST_OK ? ckpt_state_f32_numel(&st[j]) : 0;
				const long bad = st_first_nonfinite(x, nf);
				if (bad >= 0) {
					ST_ERROR(damaged, "%s: %s holds %g at element %ld", path, name,
						 (double)x[bad], bad);
					rc = ST_FAIL;
				}
				/* what cannot be negative: a block absmax, Adam's v */
				const char *sfx = strrchr(st[j].suffix, '.');
				const char *what = sfx && !strcmp(sfx, ".absmax") ? "absmax"
						   : !strcmp(st[j].suffix, "exp_avg_sq")
							   ? "second moment"
							   : NULL;
				for (size_t e = 0; rc == ST_OK && what && e < nf; e++)
					if (x[e] < 0) {
						ST_ERROR(damaged, "%s: %s holds a negative %s (%g) at "
								  "element %zu",
							 path, name, what, (double)x[e], e);
						rc = ST_FAIL;
					}
			}
		}
		store_release(&tr->s.store, u, ST_SLAB_S, 1);
	}
	if (rc == ST_OK && sf->n != n) { /* every name loaded was there: more in the file */
		int t = 0;
		while (t < sf->n - 1 && is_state_name(&tr->opt, sf->tensors[t].name))
			t++;
		ST_ERROR("the file belongs to another model or optimizer; use this run's checkpoint",
			 "%s holds %d tensors where this run has %d: %s is not one of them", path,
			 sf->n, n, sf->tensors[t].name);
		rc = ST_FAIL;
	}
	return rc;
}

/* The weights hold the step trainer.json counts: every file carries its
 * step (ST_STEP_META; files written before it, or by other tools, carry none
 * and pass). A model.safetensors copied in from another step resumed with
 * the weights of one step and the optimizer state of another. */
static int check_weights_step(const char *ckpt_dir, long step)
{
	struct st_weight_files wf;
	ST_TRY(weights_open(&wf, ckpt_dir));
	int rc = ST_OK;
	for (int i = 0; rc == ST_OK && i < wf.n; i++) {
		const char *v = safetensors_meta(&wf.sf[i], ST_STEP_META);
		char *end;
		const long s = v ? strtol(v, &end, 10) : step;
		if (s != step || (v && (end == v || *end))) {
			ST_ERROR("the checkpoint is damaged: its files come from different steps; use an "
				 "earlier one",
				 "%s holds the weights of step %s, but trainer.json is at step %ld",
				 wf.sf[i].path, v, step);
			rc = ST_FAIL;
		}
	}
	weights_close(&wf);
	return rc;
}

/* *damaged: whether a failure is the checkpoint's (not a setting that
 * disagrees with it), for ckpt_load_state to name an earlier one. */
static int load_state(struct st_trainer *tr, const char *ckpt_dir, int *damaged)
{
	*damaged = 1;
	char path[4200];
	snprintf(path, sizeof path, "%s/trainer.json", ckpt_dir);
	cJSON *root;
	ST_TRY(read_json(path, &root));
	const cJSON *step = cJSON_GetObjectItemCaseSensitive(root, "step");
	const cJSON *upd = cJSON_GetObjectItemCaseSensitive(root, "updates");
	const cJSON *skip = cJSON_GetObjectItemCaseSensitive(root, "skipped");
	const cJSON *toks = cJSON_GetObjectItemCaseSensitive(root, "tokens_seen");
	const cJSON *last = cJSON_GetObjectItemCaseSensitive(root, "last_loss");
	const cJSON *val = cJSON_GetObjectItemCaseSensitive(root, "last_val_loss");
	const cJSON *thr = cJSON_GetObjectItemCaseSensitive(root, "threads");
	const cJSON *wu = cJSON_GetObjectItemCaseSensitive(root, "warmup_steps");
	const cJSON *mdl = cJSON_GetObjectItemCaseSensitive(root, "model");
	const cJSON *dh = cJSON_GetObjectItemCaseSensitive(root, "train_data_fnv1a");
	const cJSON *sdata = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(root, "options"), "data");
	int ok = cJSON_IsNumber(step) && cJSON_IsNumber(toks) && cJSON_IsNumber(upd) &&
		 cJSON_IsNumber(skip) && (!wu || cJSON_IsNumber(wu));
	/* threads: a count, or absent (checkpoints before it was saved) */
	if (ok && thr && !(cJSON_IsNumber(thr) && thr->valuedouble >= 1 &&
			   thr->valuedouble <= 1 << 20 && thr->valuedouble == floor(thr->valuedouble))) {
		ST_ERROR("the checkpoint is damaged; use an earlier one",
			 "%s: \"threads\" is not a thread count", path);
		cJSON_Delete(root);
		return ST_FAIL;
	}
	if (ok && mdl && ckpt_check_model(&tr->s.model.cfg, mdl, path, ckpt_dir) != ST_OK) {
		cJSON_Delete(root);
		return ST_FAIL;
	}
	/* the same data path holding other tokens: re-prepared since (another
	 * path is said where the options are merged) */
	if (ok && cJSON_IsString(dh) && cJSON_IsString(sdata) && !strcmp(sdata->valuestring, tr->o.data)) {
		char hx[24];
		snprintf(hx, sizeof hx, "%016llx", (unsigned long long)tr->data.train.hash);
		if (strcmp(hx, dh->valuestring) != 0)
			st_log_warn("%s holds other training tokens than when %s was saved (prepared "
				    "again since?): the run goes on with them, not as it would have",
				    tr->data.train.path, ckpt_dir);
	}
	/* whole numbers a long holds exactly (a double's 2^53), before the casts:
	 * 4.5 or 1e300 is damage, not a count */
	/* warmup_steps: absent in checkpoints before 2026-11-25 */
	const cJSON *counts[] = {step, upd, skip, wu};
	for (int i = 0; ok && i < 4 && counts[i]; i++) {
		const double v = counts[i]->valuedouble;
		if (!(v >= 0 && v <= ST_EXACT_INT_MAX && v == floor(v))) {
			ST_ERROR("the checkpoint is damaged; use an earlier one",
				 "%s: \"%s\" is %g, not a count", path, counts[i]->string, v);
			cJSON_Delete(root);
			return ST_FAIL;
		}
	}
	/* up to --max-tokens' bound: 1e300 was taken, and printed as a
	 * 300-digit count into metrics.jsonl */
	if (ok && !(toks->valuedouble >= 0 && toks->valuedouble <= ST_EXACT_INT_MAX)) {
		ST_ERROR("the checkpoint is damaged; use an earlier one",
			 "%s: \"tokens_seen\" is %g, not a count", path, toks->valuedouble);
		cJSON_Delete(root);
		return ST_FAIL;
	}
	if (ok) {
		tr->step = (long)step->valuedouble;
		tr->updates = (long)upd->valuedouble;
		tr->skipped = (long)skip->valuedouble;
		tr->tokens_seen = toks->valuedouble;
		tr->last_loss = cJSON_IsNumber(last) ? last->valuedouble : NAN;
		tr->last_val_loss = cJSON_IsNumber(val) ? val->valuedouble : NAN;
		tr->ckpt_threads = thr ? (int)thr->valuedouble : 0;
		tr->run_warmup = wu ? (long)wu->valuedouble : -1;
	}
	cJSON_Delete(root);
	ST_CHECK(ok, "the checkpoint is damaged; use an earlier one", "%s: missing step counts", path);
	/* every step is an update or a skipped one */
	ST_CHECK(tr->step >= 1 && tr->updates >= 0 && tr->skipped >= 0 &&
			 tr->step == tr->updates + tr->skipped && tr->tokens_seen >= 0,
		 "the checkpoint is damaged; use an earlier one",
		 "%s: inconsistent counts: step %ld, updates %ld, skipped %ld (step must equal "
		 "updates + skipped, none negative)",
		 path, tr->step, tr->updates, tr->skipped);
	/* a step-N directory holds step N: one copied or renamed over another
	 * step's name would be resumed, pruned and named earlier as that step */
	char dir[4200];
	long named;
	ST_CHECK(!dir_step(dir, ckpt_dir, &named) || named == tr->step,
		 "rename the directory to the step it holds, or copy it under another name",
		 "%s holds step %ld, not the step its name says", ckpt_dir, tr->step);

	ST_TRY(check_weights_step(ckpt_dir, tr->step));

	snprintf(path, sizeof path, "%s/optimizer.safetensors", ckpt_dir);
	struct st_safetensors sf;
	ST_TRY(safetensors_open(&sf, path));
	struct saved_state src = {0};
	int rc = check_optimizer_meta(tr, &sf, path, &src);
	*damaged = !src.setting; /* a setting: the same in earlier steps */
	if (rc == ST_OK)
		rc = src.convert ? ckpt_convert_state(tr, &sf, path, src.kind, src.block)
				 : load_optimizer(tr, &sf, path);
	safetensors_close(&sf);
	/* a setting the state disagrees with (a usage error, said above with
	 * what to give) is the same in earlier steps: no earlier one named */
	if (rc != ST_OK && *damaged)
		ST_ERROR("resume from an earlier checkpoint", "cannot resume from %s", ckpt_dir);
	return rc == ST_OK ? store_ok(&tr->s.store) : rc;
}

int ckpt_check_state_settings(const struct st_trainer *tr, const char *ckpt_dir)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/optimizer.safetensors", ckpt_dir);
	struct st_safetensors sf;
	ST_TRY(safetensors_open(&sf, path));
	struct saved_state src = {0};
	const int rc = check_optimizer_meta(tr, &sf, path, &src);
	safetensors_close(&sf);
	return rc;
}

int ckpt_load_state(struct st_trainer *tr, const char *ckpt_dir)
{
	int damaged;
	const int rc = load_state(tr, ckpt_dir, &damaged);
	if (rc != ST_OK && damaged)
		ckpt_name_earlier(ckpt_dir);
	return rc;
}
