/* Saving checkpoints, written atomically; see trainer.h (loading: ckpt_load.c).
 *
 * Save: everything goes into out/.tmp-step-NNNNNN.PID, each file fsynced as it
 * is written, the directory fsynced, then renamed to out/step-NNNNNN and the
 * run directory fsynced; out/latest is a symlink replaced by rename. A process
 * killed at any point leaves the earlier checkpoints and `latest` untouched
 * (a stale .tmp-* directory is removed by the next save). Re-saving a step
 * that exists (a resume from an earlier step into the same run) swaps the
 * directories with one rename (RENAME_EXCHANGE); where the file system cannot,
 * the old one is moved aside to .old-step-N.PID first, and put back if the
 * second rename fails, or by the next save (or a resume given the run
 * directory) if a kill came between the two renames. A save that
 * fails, at any file, removes its temp directory and names the checkpoint
 * the run keeps; one whose weights or state hold inf or NaN is refused, so it
 * cannot push a good checkpoint out. Checkpoints beyond --keep-ckpts are
 * renamed to .del-step-N.PID before they are removed, so a kill mid-removal
 * leaves no partial step-N. */
#define _GNU_SOURCE /* renameat2 */
#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <omp.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/fsutil.h"
#include "io/safetensors.h"
#include "model/hf.h"
#include "trainer/ckpt_format.h"
#include "trainer/progress.h"
#include "trainer/trainer.h"
#include "util/check.h"
#include "util/finite.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Test hook STRATA_FAULT_POISON_CKPT=NAME:K: inf is written at element K of
 * the weight or optimizer-state tensor NAME as the save reads it, so that
 * the checks on what a save writes can be tested on any tensor. 1 when
 * `name` is the one named (*k set). */
static int poison_wanted(const char *name, long *k)
{
	const char *v = getenv("STRATA_FAULT_POISON_CKPT"), *colon = v ? strrchr(v, ':') : NULL;
	if (!colon || strlen(name) != (size_t)(colon - v) || strncmp(v, name, strlen(name)) != 0)
		return 0;
	*k = atol(colon + 1);
	return 1;
}

/* State tensors come from the store a unit at a time (staged state too). */
struct state_source {
	struct st_trainer *tr;
	int *unit;      /* per tensor */
	size_t *off;    /* per tensor, in its unit's S slab */
	size_t *numel;  /* per tensor: fp32 elements to check, 0 for codes */
	char (*names)[192]; /* per tensor */
	int bad;        /* the first tensor holding inf or NaN, or -1 */
	long bad_at;
	float bad_val;
};

static const void *state_get(void *ctx, int i)
{
	struct state_source *ss = ctx;
	const char *p = (const char *)store_acquire_as(&ss->tr->s.store, ss->unit[i], ST_SLAB_S,
						       ST_ACCESS_READ) + ss->off[i];
	long k;
	if (poison_wanted(ss->names[i], &k) && k >= 0 && (size_t)k < ss->numel[i])
		((float *)p)[k] = INFINITY;
	if (ss->bad < 0 && ss->numel[i]) {
		ss->bad_at = st_first_nonfinite((const float *)p, ss->numel[i]);
		if (ss->bad_at >= 0) {
			ss->bad = i;
			ss->bad_val = ((const float *)p)[ss->bad_at];
		}
	}
	return p;
}

/* Units at and past `unit` are not captured yet: every unit below it is. */
static void mark_captured(struct st_ckpt_async *c, int *done, int unit)
{
	pthread_mutex_lock(&c->mu);
	if (*done < unit) {
		*done = unit;
		pthread_cond_broadcast(&c->cv);
	}
	pthread_mutex_unlock(&c->mu);
}

static void state_put(void *ctx, int i)
{
	struct state_source *ss = ctx;
	store_release(&ss->tr->s.store, ss->unit[i], ST_SLAB_S, 0);
	/* the next tensor's unit: all before it are in the file */
	mark_captured(&ss->tr->ck, &ss->tr->ck.s_done, ss->unit[i + 1]);
}

static int save_optimizer(struct st_trainer *tr, const char *path)
{
	const struct st_model *m = &tr->s.model;
	const int cap = m->n_params * ST_STATE_TENSORS_MAX;
	struct st_tensor_out *t = st_calloc((size_t)cap, sizeof *t);
	char (*names)[192] = st_calloc((size_t)cap, sizeof *names);
	struct state_source ss = {tr, st_calloc((size_t)cap + 1, sizeof(int)),
				  st_calloc((size_t)cap, sizeof(size_t)),
				  st_calloc((size_t)cap, sizeof(size_t)), names, -1, -1, 0};
	if (!t || !names || !ss.unit || !ss.off || !ss.numel) {
		free(t);
		free(names);
		free(ss.unit);
		free(ss.off);
		free(ss.numel);
		return ST_FAIL;
	}
	int n = 0;
	for (int i = 0; i < m->n_params; i++) {
		const struct st_param *p = &m->params[i];
		struct st_state_tensor st[ST_STATE_TENSORS_MAX];
		int k = optim_state_tensors(&tr->opt, i, st);
		for (int j = 0; j < k; j++, n++) {
			snprintf(names[n], sizeof names[n], "%.95s.%.31s", p->name, st[j].suffix);
			t[n] = (struct st_tensor_out){.name = names[n], .dtype = st[j].dtype,
						      .ndim = st[j].ndim};
			ss.unit[n] = p->unit;
			ss.off[n] = st[j].off;
			ss.numel[n] = ckpt_state_f32_numel(&st[j]);
			t[n].shape[0] = st[j].shape[0];
			t[n].shape[1] = st[j].shape[1];
		}
	}
	ss.unit[n] = m->n_units; /* past the last tensor: every unit */
	char updates[32], block[32], min_size[32], momentum[32];
	snprintf(updates, sizeof updates, "%ld", tr->ck.updates);
	snprintf(block, sizeof block, "%d", tr->opt.cfg.quant_block);
	snprintf(min_size, sizeof min_size, "%ld", tr->opt.cfg.quant_min_numel);
	snprintf(momentum, sizeof momentum, "%g", (double)tr->opt.cfg.momentum);
	const char *meta[] = {"optimizer",   optim_kind_name(tr->opt.cfg.kind),
			      "updates",     updates,
			      "quant_block", block,
			      "quant_min_size", min_size,
			      "momentum",    momentum};
	struct st_tensor_source src = {state_get, state_put, &ss};
	int rc = safetensors_write_from(path, t, n, meta, (int)(sizeof meta / sizeof meta[0] / 2),
					&src);
	if (rc == ST_OK)
		rc = store_ok(&tr->s.store); /* a failed read is named as such, not as inf */
	if (rc == ST_OK && ss.bad >= 0) {
		tr->ck.nonfinite = 1;
		ST_ERROR(NULL, "the optimizer state %s holds %g at element %ld", t[ss.bad].name,
			 (double)ss.bad_val, ss.bad_at);
		rc = ST_FAIL;
	}
	free(t);
	free(names);
	free(ss.unit);
	free(ss.off);
	free(ss.numel);
	return rc;
}

/* Weights, a unit at a time through the store, marking each unit captured. */
static const float *weights_get(void *ctx, int unit)
{
	struct st_trainer *tr = ctx;
	const float *w = store_acquire_as(&tr->s.store, unit, ST_SLAB_W, ST_ACCESS_READ);
	struct st_ckpt_async *c = &tr->ck;
	const struct st_unit *u = &tr->s.model.units[unit];
	for (int i = u->first_param; i < u->first_param + u->n_params && unit != c->scanned_unit; i++) {
		const struct st_param *p = &tr->s.model.params[i];
		long k;
		if (poison_wanted(p->name, &k) && k >= 0 && (size_t)k < p->numel)
			((float *)w)[p->offset + (size_t)k] = INFINITY;
	}
	if (c->bad_unit < 0 && unit != c->scanned_unit) { /* asked once per parameter */
		c->scanned_unit = unit;
		c->bad_at = st_first_nonfinite(w, tr->s.model.units[unit].numel);
		if (c->bad_at >= 0) {
			c->bad_unit = unit;
			c->bad_val = w[c->bad_at];
		}
	}
	return w;
}

static void weights_put(void *ctx, int unit)
{
	struct st_trainer *tr = ctx;
	store_release(&tr->s.store, unit, ST_SLAB_W, 0);
	mark_captured(&tr->ck, &tr->ck.w_done, unit);
}

static int save_model(struct st_trainer *tr, const char *dir)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/config.json", dir);
	ST_TRY(config_save_with(&tr->s.model.cfg, path, tr->cfg_text));
	size_t shard;
	ST_TRY(parse_bytes(tr->o.shard_size, &shard, "--shard-size"));
	tr->ck.bad_unit = tr->ck.scanned_unit = -1;
	char step[32];
	snprintf(step, sizeof step, "%ld", tr->ck.step);
	ST_TRY(model_save_weights_dir(&tr->s.model, dir, shard ? shard : ST_DEFAULT_SHARD_BYTES,
				      weights_get, weights_put, tr, step));
	mark_captured(&tr->ck, &tr->ck.w_done, tr->s.model.n_units);
	ST_TRY(store_ok(&tr->s.store)); /* a failed read is named as such, not as inf */
	const struct st_model *m = &tr->s.model;
	if (tr->ck.bad_unit >= 0) {
		const struct st_unit *u = &m->units[tr->ck.bad_unit];
		const size_t at = (size_t)tr->ck.bad_at;
		const struct st_param *p = &m->params[u->first_param];
		for (int i = u->first_param; i < u->first_param + u->n_params; i++)
			if (m->params[i].offset <= at && at < m->params[i].offset + m->params[i].numel)
				p = &m->params[i];
		tr->ck.nonfinite = 1;
		ST_ERROR(NULL, "the weight %s holds %g at element %zu", p->name,
			 (double)tr->ck.bad_val, at - p->offset);
		return ST_FAIL;
	}
	return ST_OK;
}

/* The model a run trains, saved in trainer.json under "model" (since
 * 2026-11-24): the config.json keys that decide its computation, which a
 * resume checks the checkpoint's config.json against. An edited or damaged
 * config.json (another head count, rope_theta or norm epsilon, with weights
 * of the same shapes) resumed without a word, as another model. */
#define MODEL_KEYS 11
struct model_value {
	const char *key; /* as config.json names it */
	double v;
};

static void model_values(const struct st_config *c, struct model_value out[MODEL_KEYS])
{
	const struct model_value v[MODEL_KEYS] = {
		{"vocab_size", c->vocab_size},
		{"hidden_size", c->dim},
		{"intermediate_size", c->ffn_dim},
		{"num_hidden_layers", c->n_layers},
		{"num_attention_heads", c->n_heads},
		{"num_key_value_heads", c->n_kv_heads},
		{"head_dim", c->head_dim},
		{"rope_theta", c->rope_theta},
		{"rms_norm_eps", (double)c->norm_eps},
		{"tie_word_embeddings", c->tied},
		{"stable_embedding", c->stable_embedding},
	};
	memcpy(out, v, sizeof v);
}

int ckpt_check_model(const struct st_config *c, const cJSON *saved, const char *path,
		       const char *ckpt_dir)
{
	struct model_value mv[MODEL_KEYS];
	model_values(c, mv);
	for (int i = 0; i < MODEL_KEYS; i++) {
		const char *key = mv[i].key;
		const double v = mv[i].v;
		const cJSON *it = cJSON_GetObjectItemCaseSensitive(saved, key);
		ST_CHECK(cJSON_IsNumber(it), "the checkpoint is damaged; use an earlier one",
			 "%s: \"model\" has no number \"%s\"", path, key);
		/* config.json's rope_theta was written in cJSON's 15 digits
		 * until 2026-11-24, which read back within an ulp (its rule):
		 * that much is no change */
		const double a = it->valuedouble, tol = fmax(fabs(a), fabs(v)) * DBL_EPSILON;
		ST_CHECK(a == v || fabs(a - v) <= tol,
			 "put the value back; to train the changed model, start a new run from this "
			 "checkpoint (--model instead of --resume)",
			 "%s/config.json has %s %.17g, but the run trained a model with %.17g (%s): the "
			 "file was changed since the checkpoint was saved",
			 ckpt_dir, key, v, a, path);
	}
	return ST_OK;
}

static int save_trainer_json(const struct st_trainer *tr, const char *path)
{
	cJSON *r = cJSON_CreateObject();
	cJSON_AddStringToObject(r, "format", CKPT_FORMAT);
	cJSON_AddNumberToObject(r, "step", (double)tr->step);
	cJSON_AddNumberToObject(r, "updates", (double)tr->updates);
	cJSON_AddNumberToObject(r, "skipped", (double)tr->skipped);
	cJSON_AddNumberToObject(r, "total_steps", (double)tr->total_steps);
	/* the warmup in steps (--warmup -1 resolved): a resume keeps it */
	cJSON_AddNumberToObject(r, "warmup_steps", (double)tr->warmup);
	json_add_exact(r, "tokens_seen", tr->tokens_seen); /* exact: it counts a --max-tokens budget */
	cJSON_AddNumberToObject(r, "last_loss", tr->last_loss);
	/* bit-identical resume holds for the same thread count (matmul rounding) */
	cJSON_AddNumberToObject(r, "threads", omp_get_max_threads());
	if (*tr->run_id)
		cJSON_AddStringToObject(r, "run_id", tr->run_id);
	else /* a run resumed from a checkpoint saved before run ids */
		cJSON_AddNullToObject(r, "run_id");
	cJSON_AddStringToObject(r, "ckpt_id", tr->ck.id);
	/* the checkpoint before this one in the run's history (null: none) */
	if (tr->prev_ckpt_step >= 0 && tr->prev_ckpt_step < tr->step)
		cJSON_AddNumberToObject(r, "prev_step", (double)tr->prev_ckpt_step);
	else
		cJSON_AddNullToObject(r, "prev_step");
	/* null beside a step: resumed from a checkpoint saved without an id */
	if (tr->prev_ckpt_step >= 0 && tr->prev_ckpt_step < tr->step && *tr->prev_ckpt_id)
		cJSON_AddStringToObject(r, "prev_id", tr->prev_ckpt_id);
	else
		cJSON_AddNullToObject(r, "prev_id");
	if (isfinite(tr->last_val_loss))
		cJSON_AddNumberToObject(r, "last_val_loss", tr->last_val_loss);
	cJSON *opts = train_opts_to_cjson(&tr->o);
	cJSON_AddItemToObject(r, "options", opts ? opts : cJSON_CreateNull());
	struct model_value mv[MODEL_KEYS];
	model_values(&tr->s.model.cfg, mv);
	cJSON *mdl = cJSON_AddObjectToObject(r, "model");
	for (int i = 0; mdl && i < MODEL_KEYS; i++)
		json_add_exact(mdl, mv[i].key, mv[i].v);
	/* the training tokens, to say a resume on the same path re-prepared */
	char hx[24];
	snprintf(hx, sizeof hx, "%016llx", (unsigned long long)tr->data.train.hash);
	cJSON_AddStringToObject(r, "train_data_fnv1a", hx);
	char *text = cJSON_Print(r);
	cJSON_Delete(r);
	if (!text) {
		ST_ERROR(NULL, "out of memory formatting %s", path);
		return ST_FAIL;
	}
	int rc = fs_write_file_atomic(path, text, strlen(text));
	free(text);
	return rc;
}


static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

/* Another process holds the run directory's lock (trainer.c): a run is
 * writing there, and a step moved aside may be its re-save in flight. */
int ckpt_run_busy(const char *out)
{
	char p[4200];
	snprintf(p, sizeof p, "%s/.lock", out);
	const int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	const int busy = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
	close(fd); /* and the shared lock with it */
	return busy;
}

/* A step directory moved aside by a re-save killed before the new one went
 * in (.old-step-N.PID with no step-N): put it back. Other .old-* are stale.
 * held: the caller holds the run's lock; otherwise nothing is moved while
 * another process does. */
void ckpt_recover_aside(const char *out, int held)
{
	if (!held && ckpt_run_busy(out))
		return;
	DIR *d = opendir(out);
	if (!d)
		return;
	struct dirent *e;
	char path[4200], step[4200];
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, ".old-step-", 10) != 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", out, e->d_name);
		snprintf(step, sizeof step, "%s/%.*s", out, (int)strcspn(e->d_name + 5, "."),
			 e->d_name + 5);
		if (!fs_exists(step) && rename(path, step) == 0)
			st_log_warn("restored %s, moved aside by a save that did not finish", step);
	}
	closedir(d);
}

int ckpt_count_later(const char *out, long step, long last, long *first)
{
	DIR *d = opendir(out);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	char p[4200];
	while ((e = readdir(d))) {
		long s;
		if (!fs_step_name(e->d_name, &s) || s <= step || s > last)
			continue;
		/* checkpoints only: a stray file or empty directory of that name is none */
		snprintf(p, sizeof p, "%s/%s/trainer.json", out, e->d_name);
		if (fs_exists(p) && (!n++ || s < *first))
			*first = s;
	}
	closedir(d);
	return n;
}

/* The digits at s (at least one): past them, or NULL. */
static const char *past_digits(const char *s)
{
	const char *t = s;
	while (*t >= '0' && *t <= '9')
		t++;
	return t > s ? t : NULL;
}

/* Whether name is a temp entry strata leaves when killed, exactly as it
 * names them (a file of another tool, .latest.json say, is not one):
 * .tmp-step-N.PID (a save), .old-step-N.PID (a re-save), .del-step-N.PID
 * (a removal), .latest.PID and .write-test.tmp.PID.K. */
static int strata_leftover(const char *name)
{
	static const char *const dirs[] = {".tmp-step-", ".old-step-", ".del-step-"};
	for (int k = 0; k < 3; k++)
		if (!strncmp(name, dirs[k], 10)) {
			const char *t = past_digits(name + 10);
			t = t && *t == '.' ? past_digits(t + 1) : NULL;
			return t && !*t;
		}
	if (!strncmp(name, ".latest.", 8)) {
		const char *t = past_digits(name + 8);
		return t && !*t;
	}
	if (!strncmp(name, ".write-test.tmp.", 16)) {
		const char *t = past_digits(name + 16);
		t = t && *t == '.' ? past_digits(t + 1) : NULL;
		return t && !*t;
	}
	return 0;
}

static int remove_unread(const char *out, long step);
static void remove_marked(const char *out, const char *name, const char *keep);
static int is_prune_mark(const char *name);

void ckpt_tidy(const char *out, const char *spare)
{
	ckpt_recover_aside(out, 1);
	char keep[PATH_MAX] = "", path[PATH_MAX + 300], real[PATH_MAX];
	if (spare && !realpath(spare, keep))
		*keep = '\0';
	DIR *d = opendir(out);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (is_prune_mark(e->d_name)) /* a checkpoint a reader held at a save */
			remove_marked(out, e->d_name, keep);
		if (!strata_leftover(e->d_name))
			continue;
		snprintf(path, sizeof path, "%s/%s", out, e->d_name);
		if (*keep && realpath(path, real) && !strcmp(real, keep))
			continue; /* the checkpoint this run resumed from, under such a name */
		if (!strncmp(e->d_name, ".old-step-", 10)) {
			/* an aside copy is removed only beside its step (the restore
			 * above failed otherwise: it is that step's only copy) */
			char step[PATH_MAX + 300];
			snprintf(step, sizeof step, "%s/%.*s", out, (int)strcspn(e->d_name + 5, "."),
				 e->d_name + 5);
			if (!fs_exists(step))
				continue;
		}
		if (e->d_name[1] == 'l' || e->d_name[1] == 'w')
			unlink(path); /* a `latest` or write probe killed before its rename or unlink */
		else
			fs_rmtree(path);
	}
	closedir(d);
}

/* Removes checkpoint step-N of out unless a reader holds it (ckpt_pin: an
 * eval or sample loading it, whose files would vanish part-way through the
 * load, failing it as if the checkpoint were damaged). Renamed out of the
 * step-* names first, so a kill during the removal leaves no half-deleted
 * checkpoint to be resumed from. 1: removed, 0: being read, -1: not
 * removed (left for a later save). */
static int remove_unread(const char *out, long step)
{
	char path[4200], gone[4200];
	snprintf(path, sizeof path, "%s/step-%06ld", out, step);
	snprintf(gone, sizeof gone, "%s/.del-step-%06ld.%d", out, step, (int)getpid());
	const int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
		close(fd);
		return 0;
	}
	int rc = -1;
	if (rename(path, gone) == 0 && fs_fsync_dir(out) == ST_OK) {
		if (getenv("STRATA_FAULT_KILL_IN_PRUNE")) { /* test hook: die mid-removal */
			char file[4300];
			snprintf(file, sizeof file, "%s/model.safetensors", gone);
			unlink(file);
			raise(SIGKILL);
		}
		fs_rmtree(gone);
		rc = 1;
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Checkpoints a save left to their readers are marked by a file
 * OUT/.prune-step-N holding their ckpt_id, and tried again by ckpt_tidy at
 * each later save and resume of the run, apart from the chain, which the
 * newer ones removed since may have cut off from them. The id tells each
 * from a step saved again under its name since; the checkpoint a run
 * resumed from (keep, its real path) is kept, its mark dropped. name: the
 * mark's. */
static void remove_marked(const char *out, const char *name, const char *keep)
{
	char mark[4400], dir[4400], id[32] = "", real[PATH_MAX];
	const long step = strtol(name + 12, NULL, 10);
	snprintf(mark, sizeof mark, "%s/%s", out, name);
	snprintf(dir, sizeof dir, "%s/step-%06ld", out, step);
	FILE *f = fopen(mark, "r");
	if (f) {
		if (!fgets(id, sizeof id, f))
			*id = '\0';
		fclose(f);
	}
	id[strcspn(id, "\n")] = '\0';
	struct ckpt_ids ids;
	const int same = ckpt_read_ids(dir, &ids) && *id && !strcmp(ids.self, id);
	const int spared = *keep && realpath(dir, real) && !strcmp(real, keep);
	if (!same || spared || remove_unread(out, step) == 1)
		unlink(mark);
}

static int is_prune_mark(const char *name)
{
	const char *t = !strncmp(name, ".prune-step-", 12) ? past_digits(name + 12) : NULL;
	return t && !*t;
}

static void defer(const char *out, long step)
{
	char dir[4200], mark[4200];
	struct ckpt_ids ids;
	snprintf(dir, sizeof dir, "%s/step-%06ld", out, step);
	snprintf(mark, sizeof mark, "%s/.prune-step-%06ld", out, step);
	if (!ckpt_read_ids(dir, &ids) || !*ids.self)
		return; /* no id to tell it by: left, as a checkpoint off the chain is */
	FILE *f = fopen(mark, "w");
	if (f) {
		fprintf(f, "%s\n", ids.self);
		fclose(f);
	}
}

/* After a save: what ckpt_tidy removes, and the oldest checkpoints beyond
 * keep of this run's history, the chain of checkpoints from the one just
 * saved (current) back through each one's predecessor (ckpt_chain). A run
 * resumed from an earlier step leaves the later checkpoints of the run it
 * resumed off the chain, neither counted nor removed, however its steps
 * fall among them (counting every step up to current, as before, kept an
 * abandoned step-7 and removed this run's own step-6). A checkpoint saved
 * before the chain was recorded ends it: the step directories below it
 * (holding a trainer.json: another tool's step-N is not the run's history)
 * count, as they all did. One a reader holds is left to a later save
 * (remove_marked). */
static void prune(const char *out, int keep, long current)
{
	ckpt_tidy(out, NULL);
	if (keep <= 0)
		return; /* every one kept */
	long steps[4096], legacy;
	int n = ckpt_chain(out, current, steps, 4096, &legacy);
	char path[4200];
	DIR *d = legacy >= 0 ? opendir(out) : NULL;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		long s;
		snprintf(path, sizeof path, "%s/%s/trainer.json", out, e->d_name);
		if (fs_step_name(e->d_name, &s) && s < legacy && n < 4096 && fs_exists(path))
			steps[n++] = s;
	}
	if (d)
		closedir(d);
	if (keep <= 0 || n <= keep)
		return;
	qsort(steps, (size_t)n, sizeof steps[0], cmp_long);
	for (int i = 0; i < n - keep; i++)
		if (steps[i] != current && remove_unread(out, steps[i]) == 0)
			defer(out, steps[i]);
}

/* The tokenizer files of the model the run started from travel into every
 * checkpoint, so a checkpoint is a complete Hugging Face model directory
 * (sample, eval and transformers find its tokenizer there), and so do the
 * keys of its config.json that strata does not use (config_save_with). They are read
 * once, at the start: the directory they came from may be a checkpoint
 * that --keep-ckpts (of this run, or of the run it came from) removes. */
/* chat_template.jinja: where transformers 5's save_pretrained writes the chat
 * template (not in tokenizer_config.json); checkpoints lost it */
const char *const st_tok_files[ST_TOK_FILES] = {"tokenizer.json", "tokenizer_config.json",
					 "special_tokens_map.json", "generation_config.json",
					 "chat_template.jinja"};

int ckpt_read_tokenizer_files(struct st_trainer *tr)
{
	for (int i = 0; i < ST_TOK_FILES; i++) {
		char src[4200];
		snprintf(src, sizeof src, "%s/%s", tr->model_dir, st_tok_files[i]);
		if (fs_exists(src))
			ST_TRY(fs_read_file(src, &tr->tok_text[i], &tr->tok_len[i]));
	}
	char src[4200];
	size_t len;
	snprintf(src, sizeof src, "%s/config.json", tr->model_dir);
	if (fs_exists(src))
		ST_TRY(fs_read_file(src, &tr->cfg_text, &len));
	return ST_OK;
}

static int copy_tokenizer_files(const struct st_trainer *tr, const char *dir)
{
	for (int i = 0; i < ST_TOK_FILES; i++) {
		if (!tr->tok_text[i])
			continue;
		char dst[4200];
		snprintf(dst, sizeof dst, "%s/%s", dir, st_tok_files[i]);
		ST_TRY(fs_write_file_atomic(dst, tr->tok_text[i], tr->tok_len[i]));
	}
	return ST_OK;
}

/* out/latest -> name, replaced by a rename (never missing in between). */
static int point_latest(const char *out, const char *name)
{
	char link_tmp[4096], link[4096];
	snprintf(link_tmp, sizeof link_tmp, "%s/.latest.%d", out, (int)getpid());
	snprintf(link, sizeof link, "%s/latest", out);
	unlink(link_tmp);
	const int ok = symlink(name, link_tmp) == 0 && rename(link_tmp, link) == 0;
	const int err = errno;
	ST_CHECK(ok,
		 err == ENOSPC || err == EDQUOT ? "free space (or inodes) on the run directory's file system"
						: "check the run directory's permissions",
		 "cannot update %s: %s", link, strerror(err));
	return fs_fsync_dir(out);
}

int ckpt_mark_resumed(const struct st_trainer *tr)
{
	/* resolved, so that step-N/, step-N/. and links name the same place */
	char real_ckpt[PATH_MAX], real_out[PATH_MAX], link[4200], target[PATH_MAX];
	if (!realpath(tr->ckpt_loaded, real_ckpt) || !realpath(tr->o.out, real_out))
		return ST_OK;
	char *slash = strrchr(real_ckpt, '/');
	const char *name = slash + 1;
	long s;
	*slash = '\0';
	if (!fs_step_name(name, &s) || strcmp(*real_ckpt ? real_ckpt : "/", real_out) != 0)
		return ST_OK; /* a checkpoint of another run directory */
	snprintf(link, sizeof link, "%s/latest", tr->o.out);
	const ssize_t len = readlink(link, target, sizeof target - 1);
	if (len > 0 && (size_t)len == strlen(name) && !memcmp(target, name, (size_t)len))
		return ST_OK;
	return point_latest(tr->o.out, name);
}

long ckpt_newest(const char *out, char *name, size_t n)
{
	DIR *d = opendir(out);
	if (!d)
		return -1;
	long best = -1, s;
	struct dirent *e;
	char p[4200];
	while ((e = readdir(d))) {
		snprintf(p, sizeof p, "%s/%s/trainer.json", out, e->d_name);
		if (fs_step_name(e->d_name, &s) && s > best && fs_exists(p)) {
			best = s;
			snprintf(name, n, "%s", e->d_name);
		}
	}
	closedir(d);
	return best;
}

/* The capture thread: weights, optimizer state, then the directory is
 * renamed into place and `latest` moved. */
static int write_checkpoint_dir(struct st_trainer *tr)
{
	struct st_ckpt_async *c = &tr->ck;
	const char *out = tr->o.out;
	char final[4096], path[4200], old[4096];
	snprintf(final, sizeof final, "%s/%s", out, c->name);
	const char *slow = getenv("STRATA_FAULT_SLOW_CKPT"); /* test hook: a slow disk */
	if (slow)
		usleep((useconds_t)atol(slow) * 1000);
	ST_TRY(save_model(tr, c->tmp));
	/* Fault injection for the crash-safety test: die mid-save. */
	if (getenv("STRATA_FAULT_KILL_IN_SAVE"))
		raise(SIGKILL);
	snprintf(path, sizeof path, "%s/optimizer.safetensors", c->tmp);
	ST_TRY(save_optimizer(tr, path));
	mark_captured(c, &c->s_done, tr->s.model.n_units); /* also units without state */
	ST_TRY(copy_tokenizer_files(tr, c->tmp));
	ST_TRY(fs_fsync_dir(c->tmp));

	old[0] = '\0';
	if (fs_exists(final)) { /* re-saving a step: keep the old one until the new one is in */
		/* test hook STRATA_FAULT_NO_EXCHANGE: a file system without the exchange */
		if (!getenv("STRATA_FAULT_NO_EXCHANGE") &&
		    renameat2(AT_FDCWD, c->tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
			snprintf(old, sizeof old, "%s", c->tmp); /* the old one, now */
		} else {
			snprintf(old, sizeof old, "%s/.old-%s.%d", out, c->name, (int)getpid());
			ST_CHECK(rename(final, old) == 0, "check the run directory's permissions",
				 "cannot move %s aside: %s", final, strerror(errno));
		}
	}
	if (strcmp(old, c->tmp) != 0 && rename(c->tmp, final) != 0) {
		const int err = errno;
		if (*old && rename(old, final) != 0) /* put the old one back */
			st_log_warn("%s stays at %s (cannot move it back: %s)", final, old,
				    strerror(errno));
		ST_ERROR("check the run directory's permissions and free space",
			 "cannot rename %s to %s: %s", c->tmp, final, strerror(err));
		return ST_FAIL;
	}
	c->in_place = 1;
	ST_TRY(fs_fsync_dir(out));
	if (*old)
		fs_rmtree(old);

	ST_TRY(point_latest(out, c->name));
	prune(out, tr->o.keep_ckpts, c->step);
	return ST_OK;
}

/* A save that failed, at any point: nothing of its temp directory is kept,
 * and the error names the checkpoint the run keeps. */
static int save_failed(struct st_trainer *tr)
{
	struct st_ckpt_async *c = &tr->ck;
	if (c->in_place) { /* whole and in place: only what follows the rename failed */
		ST_ERROR("free space or fix the permissions there; the checkpoint itself is whole",
			 "checkpoint %s/%s is saved, but `latest` was not moved to it: `strata train "
			 "--resume %s/%s` goes on from it",
			 tr->o.out, c->name, tr->o.out, c->name);
		return ST_FAIL;
	}
	if (fs_exists(c->tmp)) /* not renamed into place */
		fs_rmtree(c->tmp);
	char link[4200], kept[sizeof tr->ckpt_loaded];
	snprintf(link, sizeof link, "%s/latest", tr->o.out);
	ssize_t len = readlink(link, kept, sizeof kept - 1);
	kept[len > 0 ? len : 0] = '\0';
	/* a resume into a fresh --out has no latest there, but its checkpoint */
	const int resumed = len <= 0 && *tr->ckpt_loaded;
	if (resumed)
		snprintf(kept, sizeof kept, "%s", tr->ckpt_loaded); /* absolute: whole */
	const char *keeps = len > 0    ? "the run keeps latest -> "
			    : resumed ? "nothing saved since the checkpoint it resumed from, "
				      : "the run has no earlier checkpoint";
	if (c->nonfinite)
		ST_ERROR(len > 0 || resumed ? "an update overflowed: resume from a checkpoint before "
					      "it with a lower --lr"
					    : "an update overflowed: start again with a lower --lr",
			 "checkpoint %s/%s refused: the weights or optimizer state went non-finite "
			 "at or before step %ld; %s%s",
			 tr->o.out, c->name, c->step, keeps, kept);
	else
		ST_ERROR(NULL, "checkpoint %s/%s not written; %s%s", tr->o.out, c->name, keeps, kept);
	return ST_FAIL;
}

static int write_checkpoint(struct st_trainer *tr)
{
	tr->ck.nonfinite = tr->ck.in_place = 0;
	return write_checkpoint_dir(tr) == ST_OK ? ST_OK : save_failed(tr);
}

static void *capture_main(void *arg)
{
	struct st_trainer *tr = arg;
	struct st_ckpt_async *c = &tr->ck;
	store_thread_role(1);
	int rc = write_checkpoint(tr);
	const double t1 = now_s();
	pthread_mutex_lock(&c->mu);
	c->rc = rc;
	/* a failed capture must not hold the updates back forever */
	c->w_done = c->s_done = tr->s.model.n_units;
	c->waited_s = c->wait_s;
	c->written_s = t1 - c->t0;
	c->finished = 1;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	trace_span(tr->trace.f ? &tr->trace : NULL, ST_TRACK_CHECKPOINT, c->t0, t1, "checkpoint %s",
		   c->name);
	return NULL;
}

/* "saved checkpoint ...", said by the training thread once the capture
 * thread is done: said from that thread, it landed inside the progress
 * bar's line. Once per checkpoint. */
static void say_saved(struct st_trainer *tr)
{
	struct st_ckpt_async *c = &tr->ck;
	pthread_mutex_lock(&c->mu);
	const int say = c->finished && c->rc == ST_OK;
	c->finished = 0;
	const double waited = c->waited_s, written = c->written_s;
	pthread_mutex_unlock(&c->mu);
	if (!say)
		return;
	progress_pause(&tr->pg);
	st_log_info("saved checkpoint %s/%s (training paused %.3f s, updates waited %.3f s for it, "
		    "written in %.2f s)",
		    tr->o.out, c->name, c->pause_s, waited, written);
}

void ckpt_wait_unit(void *ckpt_async, int unit)
{
	struct st_ckpt_async *c = ckpt_async;
	pthread_mutex_lock(&c->mu);
	if (c->running && (c->w_done <= unit || c->s_done <= unit)) {
		const double t0 = now_s();
		while (c->w_done <= unit || c->s_done <= unit)
			pthread_cond_wait(&c->cv, &c->mu);
		c->wait_s += now_s() - t0;
	}
	pthread_mutex_unlock(&c->mu);
}

int ckpt_finish(struct st_trainer *tr)
{
	struct st_ckpt_async *c = &tr->ck;
	if (!c->running)
		return ST_OK;
	pthread_join(c->thread, NULL);
	pthread_mutex_lock(&c->mu); /* ckpt_wait_unit reads it on the updater's thread */
	c->running = 0;
	pthread_mutex_unlock(&c->mu);
	say_saved(tr);
	return c->rc;
}

int ckpt_poll(struct st_trainer *tr)
{
	say_saved(tr);
	pthread_mutex_lock(&tr->ck.mu);
	int rc = tr->ck.rc;
	pthread_mutex_unlock(&tr->ck.mu);
	return rc;
}

int ckpt_begin(struct st_trainer *tr)
{
	struct st_ckpt_async *c = &tr->ck;
	ST_TRY(ckpt_finish(tr)); /* one at a time */
	const double t0 = now_s();
	snprintf(c->name, sizeof c->name, "step-%06ld", tr->step);
	snprintf(c->tmp, sizeof c->tmp, "%s/.tmp-%s.%d", tr->o.out, c->name, (int)getpid());
	c->step = tr->step;
	ckpt_new_id(c->id);
	c->nonfinite = c->in_place = 0;
	char path[4200];
	snprintf(path, sizeof path, "%s/trainer.json", c->tmp);
	if ((fs_exists(c->tmp) && fs_rmtree(c->tmp) != ST_OK) || fs_mkdir_p(c->tmp) != ST_OK ||
	    save_trainer_json(tr, path) != ST_OK)
		return save_failed(tr);
	tr->prev_ckpt_step = tr->step; /* the next one's predecessor */
	memcpy(tr->prev_ckpt_id, c->id, sizeof c->id);
	c->updates = tr->updates;
	c->t0 = t0;
	c->pause_s = now_s() - t0;
	pthread_mutex_lock(&c->mu); /* what ckpt_wait_unit reads on the updater's thread */
	c->w_done = c->s_done = 0;
	c->finished = 0;
	c->rc = ST_OK;
	c->wait_s = 0;
	c->running = 1;
	pthread_mutex_unlock(&c->mu);
	if (pthread_create(&c->thread, NULL, capture_main, tr) != 0) {
		pthread_mutex_lock(&c->mu);
		c->running = 0;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
		ST_ERROR(NULL, "cannot start the checkpoint thread");
		return ST_FAIL;
	}
	return ST_OK;
}

int ckpt_save(struct st_trainer *tr)
{
	ST_TRY(ckpt_begin(tr));
	return ckpt_finish(tr);
}
