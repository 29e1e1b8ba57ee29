/* Checkpoints, written atomically; see trainer.h.
 *
 * Save: everything goes into out/.tmp-step-NNNNNN.PID, each file fsynced as it
 * is written, the directory fsynced, then renamed to out/step-NNNNNN and the
 * run directory fsynced; out/latest is a symlink replaced by rename. A process
 * killed at any point leaves the earlier checkpoints and `latest` untouched
 * (a stale .tmp-* directory is removed by the next save). */
#include <cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/fsutil.h"
#include "io/safetensors.h"
#include "trainer/trainer.h"
#include "util/check.h"

#define CKPT_FORMAT "strata-checkpoint-1"

/* State tensors come from the store a unit at a time (staged state too). */
struct state_source {
	struct st_trainer *tr;
	int *unit;    /* per tensor */
	size_t *off;  /* per tensor, in its unit's S slab */
};

static const void *state_get(void *ctx, int i)
{
	struct state_source *ss = ctx;
	return (const char *)store_acquire_as(&ss->tr->s.store, ss->unit[i], ST_SLAB_S,
					      ST_ACCESS_READ) + ss->off[i];
}

static void state_put(void *ctx, int i)
{
	struct state_source *ss = ctx;
	store_release(&ss->tr->s.store, ss->unit[i], ST_SLAB_S, 0);
}

static int save_optimizer(struct st_trainer *tr, const char *path)
{
	const struct st_model *m = &tr->s.model;
	const int cap = m->n_params * ST_STATE_TENSORS_MAX;
	struct st_tensor_out *t = st_calloc((size_t)cap, sizeof *t);
	char (*names)[192] = st_calloc((size_t)cap, sizeof *names);
	struct state_source ss = {tr, st_calloc((size_t)cap, sizeof(int)),
				  st_calloc((size_t)cap, sizeof(size_t))};
	if (!t || !names || !ss.unit || !ss.off) {
		free(t);
		free(names);
		free(ss.unit);
		free(ss.off);
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
			t[n].shape[0] = st[j].shape[0];
			t[n].shape[1] = st[j].shape[1];
		}
	}
	char updates[32], block[32];
	snprintf(updates, sizeof updates, "%ld", tr->updates);
	snprintf(block, sizeof block, "%d", tr->opt.cfg.quant_block);
	const char *meta[] = {"optimizer", optim_kind_name(tr->opt.cfg.kind), "updates", updates,
			      "quant_block", block};
	struct st_tensor_source src = {state_get, state_put, &ss};
	int rc = safetensors_write_from(path, t, n, meta, 3, &src);
	free(t);
	free(names);
	free(ss.unit);
	free(ss.off);
	return rc == ST_OK ? store_ok(&tr->s.store) : rc;
}

static int save_trainer_json(const struct st_trainer *tr, const char *path)
{
	char *opts = train_opts_to_json(&tr->o);
	cJSON *r = cJSON_CreateObject();
	cJSON_AddStringToObject(r, "format", CKPT_FORMAT);
	cJSON_AddNumberToObject(r, "step", (double)tr->step);
	cJSON_AddNumberToObject(r, "updates", (double)tr->updates);
	cJSON_AddNumberToObject(r, "skipped", (double)tr->skipped);
	cJSON_AddNumberToObject(r, "total_steps", (double)tr->total_steps);
	cJSON_AddNumberToObject(r, "tokens_seen", tr->tokens_seen);
	cJSON_AddNumberToObject(r, "last_loss", tr->last_loss);
	if (isfinite(tr->last_val_loss))
		cJSON_AddNumberToObject(r, "last_val_loss", tr->last_val_loss);
	cJSON_AddItemToObject(r, "options", opts ? cJSON_Parse(opts) : cJSON_CreateNull());
	free(opts);
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

static int is_step_dir(const char *name, long *step)
{
	char *end;
	if (strncmp(name, "step-", 5) != 0)
		return 0;
	*step = strtol(name + 5, &end, 10);
	return *end == '\0' && end != name + 5;
}

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

/* Remove the oldest step directories beyond keep, and stale temp dirs. */
static void prune(const char *out, int keep, long current)
{
	DIR *d = opendir(out);
	if (!d)
		return;
	long steps[4096];
	int n = 0;
	struct dirent *e;
	char path[4096];
	while ((e = readdir(d))) {
		long s;
		if (is_step_dir(e->d_name, &s) && n < 4096)
			steps[n++] = s;
		else if (!strncmp(e->d_name, ".tmp-step-", 10) || !strncmp(e->d_name, ".old-step-", 10)) {
			snprintf(path, sizeof path, "%s/%s", out, e->d_name);
			fs_rmtree(path);
		}
	}
	closedir(d);
	if (keep <= 0 || n <= keep)
		return;
	qsort(steps, (size_t)n, sizeof steps[0], cmp_long);
	for (int i = 0; i < n - keep; i++) {
		if (steps[i] == current)
			continue;
		snprintf(path, sizeof path, "%s/step-%06ld", out, steps[i]);
		fs_rmtree(path);
	}
}

int ckpt_save(struct st_trainer *tr)
{
	const char *out = tr->o.out;
	char name[64], tmp[4096], final[4096], path[4200], old[4096];
	snprintf(name, sizeof name, "step-%06ld", tr->step);
	snprintf(tmp, sizeof tmp, "%s/.tmp-%s.%d", out, name, (int)getpid());
	snprintf(final, sizeof final, "%s/%s", out, name);
	if (fs_exists(tmp))
		ST_TRY(fs_rmtree(tmp));
	ST_TRY(fs_mkdir_p(tmp));

	ST_TRY(session_save_model(&tr->s, tmp));
	/* Fault injection for the crash-safety test: die mid-save. */
	if (getenv("STRATA_FAULT_KILL_IN_SAVE"))
		raise(SIGKILL);
	snprintf(path, sizeof path, "%s/optimizer.safetensors", tmp);
	ST_TRY(save_optimizer(tr, path));
	snprintf(path, sizeof path, "%s/trainer.json", tmp);
	ST_TRY(save_trainer_json(tr, path));
	ST_TRY(fs_fsync_dir(tmp));

	if (fs_exists(final)) { /* re-saving a step: keep the old one until the new one is in */
		snprintf(old, sizeof old, "%s/.old-%s.%d", out, name, (int)getpid());
		ST_CHECK(rename(final, old) == 0, "check the run directory's permissions",
			 "cannot move %s aside: %s", final, strerror(errno));
	} else {
		old[0] = '\0';
	}
	ST_CHECK(rename(tmp, final) == 0, "check the run directory's permissions and free space",
		 "cannot rename %s to %s: %s", tmp, final, strerror(errno));
	ST_TRY(fs_fsync_dir(out));
	if (*old)
		fs_rmtree(old);

	char link_tmp[4096], link[4096];
	snprintf(link_tmp, sizeof link_tmp, "%s/.latest.%d", out, (int)getpid());
	snprintf(link, sizeof link, "%s/latest", out);
	unlink(link_tmp);
	ST_CHECK(symlink(name, link_tmp) == 0 && rename(link_tmp, link) == 0,
		 "check the run directory's permissions", "cannot update %s: %s", link,
		 strerror(errno));
	ST_TRY(fs_fsync_dir(out));
	prune(out, tr->o.keep_ckpts, tr->step);
	st_log_info("saved checkpoint %s", final);
	return ST_OK;
}

int ckpt_resolve(char *out, size_t n, const char *path)
{
	char p[4200];
	snprintf(p, sizeof p, "%s/trainer.json", path);
	if (fs_exists(p)) {
		snprintf(out, n, "%s", path);
		return ST_OK;
	}
	snprintf(p, sizeof p, "%s/latest", path);
	char target[PATH_MAX];
	ssize_t len = readlink(p, target, sizeof target - 1);
	ST_CHECK(len > 0, "give a checkpoint directory (run/step-NNNNNN) or a run directory",
		 "no checkpoint at %s (neither trainer.json nor latest found)", path);
	target[len] = '\0';
	snprintf(out, n, "%s/%s", path, target);
	snprintf(p, sizeof p, "%s/trainer.json", out);
	ST_CHECK(fs_exists(p), "the checkpoint is incomplete; pick an earlier step directory",
		 "%s has no trainer.json", out);
	return ST_OK;
}

static int read_json(const char *path, cJSON **root)
{
	char *text = NULL;
	size_t len;
	ST_TRY(fs_read_file(path, &text, &len));
	*root = cJSON_ParseWithLength(text, len);
	free(text);
	ST_CHECK(*root && cJSON_IsObject(*root), "the checkpoint is damaged; use an earlier one",
		 "%s: not valid JSON", path);
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
	ST_TRY(read_json(path, &root));
	int rc = train_opts_from_cjson(o, cJSON_GetObjectItemCaseSensitive(root, "options"), path);
	cJSON_Delete(root);
	return rc;
}

int ckpt_load_state(struct st_trainer *tr, const char *ckpt_dir)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/trainer.json", ckpt_dir);
	cJSON *root;
	ST_TRY(read_json(path, &root));
	const cJSON *step = cJSON_GetObjectItemCaseSensitive(root, "step");
	const cJSON *upd = cJSON_GetObjectItemCaseSensitive(root, "updates");
	const cJSON *skip = cJSON_GetObjectItemCaseSensitive(root, "skipped");
	const cJSON *toks = cJSON_GetObjectItemCaseSensitive(root, "tokens_seen");
	const cJSON *last = cJSON_GetObjectItemCaseSensitive(root, "last_loss");
	int ok = cJSON_IsNumber(step) && cJSON_IsNumber(toks) && cJSON_IsNumber(upd) &&
		 cJSON_IsNumber(skip);
	if (ok) {
		tr->step = (long)step->valuedouble;
		tr->updates = (long)upd->valuedouble;
		tr->skipped = (long)skip->valuedouble;
		tr->tokens_seen = toks->valuedouble;
		tr->last_loss = cJSON_IsNumber(last) ? last->valuedouble : NAN;
	}
	cJSON_Delete(root);
	ST_CHECK(ok, "the checkpoint is damaged; use an earlier one", "%s: missing step counts", path);

	snprintf(path, sizeof path, "%s/optimizer.safetensors", ckpt_dir);
	struct st_safetensors sf;
	ST_TRY(safetensors_open(&sf, path));
	const char *kind = safetensors_meta(&sf, "optimizer");
	const char *block = safetensors_meta(&sf, "quant_block");
	int rc = ST_OK;
	if (!kind || strcmp(kind, optim_kind_name(tr->opt.cfg.kind)) != 0) {
		ST_ERROR("resume with the optimizer the run was started with",
			 "%s holds %s state, but the run asks for --optimizer %s", path,
			 kind ? kind : "unknown", optim_kind_name(tr->opt.cfg.kind));
		rc = ST_FAIL;
	} else if (!block || atoi(block) != tr->opt.cfg.quant_block) {
		ST_ERROR("resume with the --quant-block the run was started with",
			 "%s was written with quantization block %s, the run asks for %d", path,
			 block ? block : "unknown", tr->opt.cfg.quant_block);
		rc = ST_FAIL;
	}
	const struct st_model *m = &tr->s.model;
	for (int u = 0; u < m->n_units && rc == ST_OK; u++) {
		if (!tr->opt.unit_bytes[u])
			continue;
		char *state = store_acquire(&tr->s.store, u, ST_SLAB_S);
		const struct st_unit *un = &m->units[u];
		for (int i = un->first_param; i < un->first_param + un->n_params && rc == ST_OK; i++) {
			const struct st_param *p = &m->params[i];
			struct st_state_tensor st[ST_STATE_TENSORS_MAX];
			int k = optim_state_tensors(&tr->opt, i, st);
			for (int j = 0; j < k && rc == ST_OK; j++) {
				char name[200];
				snprintf(name, sizeof name, "%.95s.%.31s", p->name, st[j].suffix);
				rc = safetensors_load_raw(&sf, name, st[j].dtype, st[j].ndim,
							  st[j].shape, state + st[j].off, st[j].bytes);
			}
		}
		store_release(&tr->s.store, u, ST_SLAB_S, 1);
	}
	safetensors_close(&sf);
	return rc == ST_OK ? store_ok(&tr->s.store) : rc;
}
