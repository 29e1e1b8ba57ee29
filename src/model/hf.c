/* Hugging Face LLaMA weights: model.safetensors (or its shards) in and out,
 * with HF parameter names and (out,in) layout, straight into / out of the
 * units' W slabs. */
#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/fsutil.h"
#include "io/safetensors.h"
#include "model/hf.h"
#include "util/check.h"
#include "util/finite.h"

#define INDEX_NAME "model.safetensors.index.json"

void weights_close(struct st_weight_files *w)
{
	for (int i = 0; w->sf && i < w->n; i++)
		safetensors_close(&w->sf[i]);
	free(w->sf);
	cJSON_Delete(w->index);
	w->sf = NULL;
	w->index = NULL;
	w->n = 0;
}

/* A link at path whose target is not there (what an interrupted Hugging
 * Face cache download leaves): an error naming it, where it read as no file
 * ("neither model.safetensors nor ..."). */
static int check_link(const char *path)
{
	struct stat st;
	char target[1024];
	if (lstat(path, &st) != 0 || !S_ISLNK(st.st_mode) || fs_exists(path))
		return ST_OK;
	const ssize_t n = readlink(path, target, sizeof target - 1);
	target[n > 0 ? n : 0] = '\0';
	ST_ERROR("download the file again (an interrupted download leaves such links), or point the link "
		 "at it",
		 "%s is a link to %s, which does not exist", path, n > 0 ? target : "(unreadable)");
	return ST_FAIL;
}

/* The shard files an index names, each once, in order of first mention. */
static int open_index(struct st_weight_files *w, const char *dir, const char *index)
{
	cJSON *root;
	ST_TRY(fs_read_json(index, &root, "the index must be {\"weight_map\": {tensor: file, ...}}"));
	const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
	if (!cJSON_IsObject(map) || !cJSON_GetArraySize(map)) {
		cJSON_Delete(root);
		ST_ERROR("the index must be {\"weight_map\": {tensor: file, ...}}",
			 "%s: not a safetensors index (no weight_map)", index);
		return ST_FAIL;
	}
	const int cap = cJSON_GetArraySize(map);
	char **files = st_calloc((size_t)cap, sizeof *files);
	w->sf = st_calloc((size_t)cap, sizeof *w->sf);
	int rc = files && w->sf ? ST_OK : ST_FAIL;
	const cJSON *it;
	cJSON_ArrayForEach(it, map)
	{
		if (rc != ST_OK)
			break;
		if (!cJSON_IsString(it) || strchr(it->valuestring, '/')) {
			ST_ERROR("the index must map tensor names to files in the same directory",
				 "%s: bad entry for '%s'", index, it->string);
			rc = ST_FAIL;
			break;
		}
		int seen = 0;
		for (int i = 0; i < w->n && !seen; i++)
			seen = !strcmp(files[i], it->valuestring);
		if (seen)
			continue;
		files[w->n] = it->valuestring;
		char path[2200];
		snprintf(path, sizeof path, "%s/%s", dir, it->valuestring);
		rc = check_link(path);
		if (rc == ST_OK)
			rc = safetensors_open(&w->sf[w->n], path);
		if (rc == ST_OK)
			w->n++;
	}
	free(files);
	w->index = root; /* for model_check_files' look at it (stale_index) */
	return rc;
}

/* The first PyTorch weight file of a Hugging Face directory
 * (pytorch_model.bin, its shards pytorch_model-0000k-of-0000n.bin or their
 * index) into name, or 0: named when there are no safetensors, since a
 * checkpoint saved before transformers 4.35 (or with safe_serialization
 * off) holds only those. Other .bin files (training_args.bin, strata's
 * token shards) are not weights. */
static int pytorch_weights(const char *dir, char *name, size_t n)
{
	DIR *d = opendir(dir);
	int found = 0;
	for (struct dirent *e; d && !found && (e = readdir(d));) {
		const size_t len = strlen(e->d_name);
		found = !strncmp(e->d_name, "pytorch_model", 13) &&
			((len > 4 && !strcmp(e->d_name + len - 4, ".bin")) ||
			 (len > 15 && !strcmp(e->d_name + len - 15, ".bin.index.json")));
		if (found)
			snprintf(name, n, "%s", e->d_name);
	}
	if (d)
		closedir(d);
	return found;
}

int weights_present(const char *dir)
{
	char path[2200], bin[256];
	struct stat st;
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	/* a link to nothing too, for weights_open to name (plan said "holds no
	 * weights" and planned from config.json alone) */
	if (fs_exists(path) || lstat(path, &st) == 0)
		return 1;
	snprintf(path, sizeof path, "%s/" INDEX_NAME, dir);
	return fs_exists(path) || pytorch_weights(dir, bin, sizeof bin);
}

int weights_open(struct st_weight_files *w, const char *dir)
{
	memset(w, 0, sizeof *w);
	snprintf(w->dir, sizeof w->dir, "%s", dir);
	char path[2200];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	if (fs_exists(path)) {
		w->sf = st_calloc(1, sizeof *w->sf);
		if (!w->sf)
			return ST_FAIL;
		ST_TRY(safetensors_open(&w->sf[0], path));
		w->n = 1;
		return ST_OK;
	}
	ST_TRY(check_link(path));
	snprintf(path, sizeof path, "%s/" INDEX_NAME, dir);
	ST_TRY(check_link(path));
	char bin[256];
	ST_CHECK(fs_exists(path) || !pytorch_weights(dir, bin, sizeof bin),
		 "convert them to safetensors first, e.g. in Python with transformers: "
		 "AutoModelForCausalLM.from_pretrained(DIR).save_pretrained(OUT) (transformers before "
		 "4.35 also needs safe_serialization=True)",
		 "%s holds PyTorch weights (%s), which strata does not read: it reads model.safetensors "
		 "or the shards " INDEX_NAME " names",
		 dir, bin);
	ST_CHECK(fs_exists(path), "give a Hugging Face model directory (or create one with strata init)",
		 "%s has neither model.safetensors nor " INDEX_NAME, dir);
	if (open_index(w, dir, path) != ST_OK) {
		weights_close(w);
		return ST_FAIL;
	}
	return ST_OK;
}

static int find_file(const struct st_weight_files *wf, const char *name)
{
	int f = 0;
	while (f < wf->n && !safetensors_find(&wf->sf[f], name))
		f++;
	return f;
}

/* The file of wf holding parameter p (*f) and the tensor's name there
 * (*name), or an error naming it missing. A tied model's files that hold
 * lm_head.weight and no embedding (a writer that kept the head's name for
 * the shared matrix) give the embedding from lm_head.weight, as
 * transformers ties them (it was named missing). */
static int file_of(const struct st_model *m, const struct st_weight_files *wf, const struct st_param *p,
		   int *f, const char **name)
{
	*name = p->name;
	*f = find_file(wf, p->name);
	if (*f == wf->n && m->cfg.tied && p->role == ST_ROLE_EMBED && find_file(wf, "lm_head.weight") < wf->n) {
		*name = "lm_head.weight";
		*f = find_file(wf, *name);
	}
	ST_CHECK(*f < wf->n, "check that config.json belongs to these weights",
		 "%s: tensor '%s' is missing from the model's weight files", wf->dir, p->name);
	/* in one file only: which copy counts would be a guess */
	for (int g = *f + 1; g < wf->n; g++)
		ST_CHECK(!safetensors_find(&wf->sf[g], *name), "remove the extra copy (re-export the model)",
			 "%s: tensor '%s' is in two weight files, %s and %s", wf->dir, *name,
			 wf->sf[*f].path, wf->sf[g].path);
	return ST_OK;
}

/* An index that disagrees with its shards is stale, said once (the first
 * disagreement): like transformers, which takes the index's list of files
 * and every tensor in them, strata looks each tensor up in the files
 * themselves, so where it is does not depend on the index; a tensor in two
 * files is refused (file_of). A tied model's index may list an lm_head.weight
 * that no file holds (some writers add it): not stale. */
static void stale_index(const struct st_model *m, const struct st_weight_files *wf)
{
	const cJSON *map = cJSON_GetObjectItemCaseSensitive(wf->index, "weight_map"), *it;
	cJSON_ArrayForEach(it, map)
	{
		char path[2200];
		snprintf(path, sizeof path, "%s/%s", wf->dir, it->valuestring);
		int f = 0;
		while (f < wf->n && strcmp(wf->sf[f].path, path) != 0)
			f++;
		if (f < wf->n && !safetensors_find(&wf->sf[f], it->string) &&
		    !(m->cfg.tied && !strcmp(it->string, "lm_head.weight"))) {
			st_log_warn("%s/" INDEX_NAME ": the index puts tensor '%s' in %s, which does "
				    "not hold it (a stale index: tensors are looked up in the files "
				    "themselves)",
				    wf->dir, it->string, it->valuestring);
			return;
		}
	}
	for (int f = 0; f < wf->n; f++)
		for (int t = 0; t < wf->sf[f].n; t++) {
			const char *name = wf->sf[f].tensors[t].name, *file = strrchr(wf->sf[f].path, '/');
			file = file ? file + 1 : wf->sf[f].path;
			const cJSON *e = cJSON_GetObjectItemCaseSensitive(map, name);
			if (!cJSON_IsString(e) || strcmp(e->valuestring, file) != 0) {
				st_log_warn("%s/" INDEX_NAME ": %s holds tensor '%s', which the index %s (a "
					    "stale index: tensors are looked up in the files themselves)",
					    wf->dir, file, name,
					    cJSON_IsString(e) ? "puts in another file" : "does not list");
				return;
			}
		}
}

int model_check_files(const struct st_model *m, const struct st_weight_files *wf)
{
	if (wf->index)
		stale_index(m, wf);
	for (int i = 0; i < m->n_params; i++) {
		const struct st_param *p = &m->params[i];
		int f;
		const char *name;
		ST_TRY(file_of(m, wf, p, &f, &name));
		ST_TRY(safetensors_check_f32(&wf->sf[f], name, p->ndim, p->shape));
	}
	return model_check_extra(m, wf);
}

int model_load_unit(const struct st_model *m, const struct st_weight_files *wf, int unit, float *w)
{
	const struct st_unit *u = &m->units[unit];
	for (int i = u->first_param; i < u->first_param + u->n_params; i++) {
		const struct st_param *p = &m->params[i];
		int f;
		const char *name;
		ST_TRY(file_of(m, wf, p, &f, &name));
		ST_TRY(safetensors_load_f32(&wf->sf[f], name, p->ndim, p->shape, w + p->offset));
		/* an inf or NaN weight would only make every step skip */
		const long bad = st_first_nonfinite(w + p->offset, p->numel);
		ST_CHECK(bad < 0, "the weights are damaged or diverged: use an earlier checkpoint",
			 "%s: tensor '%s' holds %g at element %ld", wf->sf[f].path, name,
			 (double)w[p->offset + (size_t)bad], bad);
	}
	return ST_OK;
}

/* A tied model's file that also holds lm_head.weight: the same bytes as the
 * embedding (a writer that saved both), or a model transformers would not
 * tie ("both are present with different values") while strata would train
 * the embedding alone. Compared on the mapped bytes, in the file's dtype. */
static int check_tied_head(const struct st_weight_files *wf, int f, const struct st_tensor_info *head)
{
	for (int g = 0; g < wf->n; g++) {
		const struct st_tensor_info *emb = safetensors_find(&wf->sf[g], "model.embed_tokens.weight");
		if (!emb)
			continue;
		const char *a = (const char *)wf->sf[f].map + wf->sf[f].data_start + head->begin;
		const char *b = (const char *)wf->sf[g].map + wf->sf[g].data_start + emb->begin;
		const int same = head->dtype == emb->dtype && head->end - head->begin == emb->end - emb->begin &&
				 memcmp(a, b, (size_t)(head->end - head->begin)) == 0;
		ST_CHECK(same, "set \"tie_word_embeddings\": false in config.json to train both, or drop "
				"lm_head.weight from the file",
			 "config.json ties the output to the embedding (tie_word_embeddings), but %s holds "
			 "an lm_head.weight that is not the embedding's copy; transformers would not tie them",
			 wf->sf[f].path);
		return ST_OK;
	}
	return ST_OK; /* no embedding: named missing elsewhere */
}

int model_check_extra(const struct st_model *m, const struct st_weight_files *wf)
{
	/* Tensors the model does not use: a tied model may still carry lm_head
	 * (the embedding's copy); anything else means the files and config.json
	 * disagree. */
	for (int f = 0; f < wf->n; f++)
		for (int i = 0; i < wf->sf[f].n; i++) {
			const char *name = wf->sf[f].tensors[i].name;
			if (m->cfg.tied && !strcmp(name, "lm_head.weight")) {
				ST_TRY(check_tied_head(wf, f, &wf->sf[f].tensors[i]));
				continue;
			}
			if (model_find_param(m, name) || strstr(name, "rotary_emb.inv_freq"))
				continue;
			ST_ERROR("check that config.json belongs to these weights",
				 "%s: tensor '%s' is not part of the configured model", wf->sf[f].path, name);
			return ST_FAIL;
		}
	return ST_OK;
}

int model_load_weights(const struct st_model *m, float *const *unit_w, const char *path)
{
	struct st_weight_files wf = {0};
	wf.sf = st_calloc(1, sizeof *wf.sf);
	if (!wf.sf)
		return ST_FAIL;
	snprintf(wf.dir, sizeof wf.dir, "%s", path);
	int rc = safetensors_open(&wf.sf[0], path);
	if (rc == ST_OK)
		wf.n = 1;
	for (int u = 0; u < m->n_units && rc == ST_OK; u++)
		rc = model_load_unit(m, &wf, u, unit_w[u]);
	if (rc == ST_OK)
		rc = model_check_extra(m, &wf);
	weights_close(&wf);
	return rc;
}

/* One file's tensors: params [first, first + n), fetched a unit at a time. */
struct unit_source {
	const struct st_model *m;
	int first;
	const float *(*get)(void *ctx, int unit);
	void (*put)(void *ctx, int unit);
	void *ctx;
};

static const void *param_get(void *ctx, int i)
{
	const struct unit_source *us = ctx;
	const struct st_param *p = &us->m->params[us->first + i];
	return us->get(us->ctx, p->unit) + p->offset;
}

static void param_put(void *ctx, int i)
{
	const struct unit_source *us = ctx;
	us->put(us->ctx, us->m->params[us->first + i].unit);
}

static int save_file(const struct st_model *m, const char *path, int first, int n,
		     const float *(*get)(void *ctx, int unit), void (*put)(void *ctx, int unit),
		     void *ctx, const char *step)
{
	struct st_tensor_out *t = st_calloc((size_t)(n > 0 ? n : 1), sizeof *t);
	if (!t)
		return ST_FAIL;
	for (int i = 0; i < n; i++) {
		const struct st_param *p = &m->params[first + i];
		t[i] = (struct st_tensor_out){.name = p->name, .dtype = ST_DT_F32, .ndim = p->ndim};
		t[i].shape[0] = p->shape[0];
		t[i].shape[1] = p->shape[1];
	}
	struct unit_source us = {m, first, get, put, ctx};
	struct st_tensor_source src = {param_get, param_put, &us};
	const char *meta[] = {"format", "pt", ST_STEP_META, step};
	int rc = safetensors_write_from(path, t, n, meta, step ? 2 : 1, &src);
	free(t);
	return rc;
}

int model_save_weights_dir(const struct st_model *m, const char *dir, size_t max_shard,
			   const float *(*get)(void *ctx, int unit),
			   void (*put)(void *ctx, int unit), void *ctx, const char *step)
{
	char path[2200], index[2200];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	snprintf(index, sizeof index, "%s/" INDEX_NAME, dir);
	/* shards: consecutive parameters, each shard at most max_shard bytes */
	int *shard_of = st_calloc((size_t)m->n_params, sizeof *shard_of);
	if (!shard_of)
		return ST_FAIL;
	int n_shards = 1;
	size_t in_shard = 0, total = 0;
	for (int i = 0; i < m->n_params; i++) {
		size_t b = m->params[i].numel * sizeof(float);
		if (max_shard && in_shard && in_shard + b > max_shard) {
			n_shards++;
			in_shard = 0;
		}
		in_shard += b;
		total += b;
		shard_of[i] = n_shards - 1;
	}
	int rc = ST_OK;
	if (n_shards == 1) {
		rc = save_file(m, path, 0, m->n_params, get, put, ctx, step);
		if (rc == ST_OK)
			unlink(index); /* a stale sharded layout must not shadow it */
		free(shard_of);
		return rc;
	}
	cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "metadata");
	cJSON_AddNumberToObject(meta, "total_size", (double)total);
	cJSON *map = cJSON_AddObjectToObject(root, "weight_map");
	for (int s = 0, i = 0; s < n_shards && rc == ST_OK; s++) {
		int first = i;
		while (i < m->n_params && shard_of[i] == s)
			i++;
		char name[64];
		snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
		snprintf(path, sizeof path, "%s/%s", dir, name);
		rc = save_file(m, path, first, i - first, get, put, ctx, step);
		for (int k = first; k < i; k++)
			cJSON_AddStringToObject(map, m->params[k].name, name);
	}
	char *text = rc == ST_OK ? cJSON_Print(root) : NULL;
	if (rc == ST_OK && !text)
		rc = ST_FAIL;
	if (rc == ST_OK)
		rc = fs_write_file_atomic(index, text, strlen(text));
	if (rc == ST_OK) { /* the single-file layout would shadow the index */
		snprintf(path, sizeof path, "%s/model.safetensors", dir);
		unlink(path);
	}
	free(text);
	cJSON_Delete(root);
	free(shard_of);
	return rc;
}

int model_dir_holds_model(const char *dir)
{
	static const char *marks[] = {"config.json", "model.safetensors", INDEX_NAME};
	char path[4200];
	for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, marks[i]);
		if (fs_exists(path))
			return 1;
	}
	return 0;
}

/* Remove the model in dir: config.json first, so that from then on dir is
 * no model, then model.safetensors, the .safetensors files the index names,
 * and the index. Other files (a tokenizer.json, a README) stay. */
static int model_dir_clear(const char *dir)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/config.json", dir);
	ST_TRY(fs_unlink(path)); /* first: from here on dir is not a model */
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	ST_TRY(fs_unlink(path));
	char index[4200];
	snprintf(index, sizeof index, "%s/" INDEX_NAME, dir);
	if (!fs_exists(index))
		return ST_OK;
	/* the .safetensors files in dir that the index names (each once or
	 * more), then the index; an index that does not parse is removed alone */
	char *text;
	size_t len;
	ST_TRY(fs_read_file(index, &text, &len));
	cJSON *root = cJSON_ParseWithLength(text, len);
	free(text);
	const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map"), *it;
	int rc = ST_OK;
	cJSON_ArrayForEach(it, map)
	{
		if (rc != ST_OK)
			break;
		const size_t n = cJSON_IsString(it) ? strlen(it->valuestring) : 0;
		if (n <= 12 || strchr(it->valuestring, '/') ||
		    strcmp(it->valuestring + n - 12, ".safetensors"))
			continue; /* only weight files are removed */
		snprintf(path, sizeof path, "%s/%s", dir, it->valuestring);
		rc = fs_unlink(path);
	}
	cJSON_Delete(root);
	return rc == ST_OK ? fs_unlink(index) : rc;
}

int model_dir_stage(const char *dir, int force, struct model_stage *st)
{
	st->lock_fd = -1;
	st->locked = st->busy = st->n_made = 0;
	st->tmp[0] = '\0';
	snprintf(st->dir, sizeof st->dir, "%s", dir);
	if (fs_mkdir_p_made(dir, st->made, ST_MADE_MAX, &st->n_made) != ST_OK) {
		fs_rmdir_made(dir, st->made, st->n_made); /* the levels made before it failed */
		return ST_FAIL;
	}
	/* a model written into a run would shadow its checkpoints for eval and
	 * sample, and a resume refuses the directory; into a checkpoint, it
	 * would leave the old optimizer state beside new weights (checked on
	 * the directory as made: "x/../run" is the run) */
	const char *marker = fs_run_marker(dir);
	if (marker) {
		ST_ERROR("choose another --out (a run or checkpoint is itself a --model for train, "
			 "eval and sample)",
			 "%s is a training run or checkpoint (it holds %s): a model is not written "
			 "into one",
			 dir, marker);
		model_dir_unstage(st);
		return ST_FAIL;
	}
	if (!force && model_dir_holds_model(dir)) { /* the callers' early check, on the real path */
		ST_ERROR("pass --force to overwrite it, or choose another --out",
			 "%s already holds a model", dir);
		model_dir_unstage(st);
		return ST_FAIL;
	}
	/* one writer per model directory, from staging to the last move */
	char lock[4300];
	snprintf(lock, sizeof lock, "%s/.strata-write.lock", dir);
	st->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (st->lock_fd < 0) {
		ST_ERROR("check the directory's permissions", "cannot open %s: %s", lock,
			 strerror(errno));
		model_dir_unstage(st);
		return ST_FAIL;
	}
	st->locked = flock(st->lock_fd, LOCK_EX | LOCK_NB) == 0;
	if (!st->locked) {
		const int err = errno;
		st->busy = err == EWOULDBLOCK;
		if (err == EWOULDBLOCK) {
			model_dir_unstage(st);
			ST_ERROR("wait for it to finish", "%s is being written by another strata init or "
				 "import", dir);
			return ST_FAIL;
		}
		st_log_warn("%s: cannot lock (%s): a second init or import into it at the same time "
			    "would not be refused", dir, strerror(err));
	}
	/* under the lock, any staging directory is one a writer left */
	DIR *d = opendir(dir);
	if (d) {
		struct dirent *e;
		char path[4300];
		while ((e = readdir(d))) {
			if (strncmp(e->d_name, ".strata-new.", 12) != 0)
				continue;
			snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
			st_log_warn("removing %s, left by an init or import that did not finish", path);
			fs_rmtree(path);
		}
		closedir(d);
	}
	snprintf(st->tmp, sizeof st->tmp, "%s/.strata-new.XXXXXX", dir);
	if (!mkdtemp(st->tmp)) {
		ST_ERROR("check the directory's permissions and free space",
			 "cannot create a staging directory in %s: %s", dir, strerror(errno));
		st->tmp[0] = '\0';
		model_dir_unstage(st);
		return ST_FAIL;
	}
	return ST_OK;
}

void model_dir_unstage(struct model_stage *st)
{
	if (st->tmp[0])
		fs_rmtree(st->tmp);
	st->tmp[0] = '\0';
	char lock[4300];
	snprintf(lock, sizeof lock, "%s/.strata-write.lock", st->dir);
	/* A model directory this command made goes again, and with it the lock
	 * file, unlinked before it is closed: unless another writer holds it
	 * (busy), or the directory was there before (its lock file stays, as
	 * after any write). A writer that opened the file just before the
	 * unlink locks a file no longer in the directory; its staging
	 * directory then keeps the directory from being removed here. */
	size_t plen = strlen(st->dir);
	while (plen > 1 && st->dir[plen - 1] == '/')
		plen--;
	const int made_dir = st->n_made && st->made[st->n_made - 1] >= plen;
	if (made_dir && !st->busy)
		unlink(lock);
	if (st->lock_fd >= 0)
		close(st->lock_fd);
	st->lock_fd = -1;
	st->locked = 0;
	fs_rmdir_made(st->dir, st->made, st->n_made);
	st->n_made = 0;
}

int model_dir_commit(const char *dir, struct model_stage *st)
{
	const char *tmp = st->tmp;
	/* every file can go in: nothing in its way that a rename cannot replace
	 * (a directory of the same name); checked before the old model goes */
	DIR *d = opendir(tmp);
	int rc = d ? ST_OK : ST_FAIL;
	if (!d)
		ST_ERROR("check the directory's permissions", "cannot read %s: %s", tmp, strerror(errno));
	struct dirent *e;
	char from[4600], to[4600];
	while (d && rc == ST_OK && (e = readdir(d))) {
		struct stat lst;
		snprintf(to, sizeof to, "%s/%s", dir, e->d_name);
		if (e->d_name[0] != '.' && lstat(to, &lst) == 0 && S_ISDIR(lst.st_mode)) {
			ST_ERROR("move it away, then run again", "%s is a directory, in the way of the "
				 "model's file of that name; the model there is unchanged", to);
			rc = ST_FAIL;
		}
	}
	if (d)
		closedir(d);
	if (rc != ST_OK) {
		model_dir_unstage(st);
		return rc;
	}
	rc = model_dir_clear(dir);
	if (rc != ST_OK) { /* the old model may be half gone: keep the new one */
		ST_ERROR("fix what stopped the removal and move the new model in by hand (the next "
			 "init or import into the directory removes it)",
			 "%s: the old model could not be removed; the new one is in %s", dir, tmp);
		close(st->lock_fd);
		st->lock_fd = -1;
		return rc;
	}
	/* the shards and other files, then the index, then config.json: a move
	 * that fails leaves no config.json, so dir is no model; the files not
	 * moved stay in tmp, named */
	for (int pass = 0; pass < 3 && rc == ST_OK; pass++) {
		d = opendir(tmp);
		if (!d) {
			ST_ERROR("check the directory's permissions", "cannot read %s: %s", tmp,
				 strerror(errno));
			rc = ST_FAIL;
			break;
		}
		while (rc == ST_OK && (e = readdir(d))) {
			const int last = !strcmp(e->d_name, INDEX_NAME) ? 1
					 : !strcmp(e->d_name, "config.json") ? 2
									      : 0;
			if (e->d_name[0] == '.' || last != pass)
				continue;
			snprintf(from, sizeof from, "%s/%s", tmp, e->d_name);
			snprintf(to, sizeof to, "%s/%s", dir, e->d_name);
			if (rename(from, to) != 0) {
				ST_ERROR("move the rest of the new model from there by hand, or run again "
					 "(which removes it)",
					 "cannot move %s to %s: %s (%s holds no complete model now; the "
					 "files not moved are in %s)",
					 from, to, strerror(errno), dir, tmp);
				rc = ST_FAIL;
			}
		}
		closedir(d);
	}
	if (rc == ST_OK)
		rc = fs_fsync_dir(dir);
	if (rc == ST_OK && rmdir(tmp) != 0)
		st_log_warn("%s was not removed (%s): check what it holds", tmp, strerror(errno));
	if (st->lock_fd >= 0)
		close(st->lock_fd);
	st->lock_fd = -1;
	return rc;
}

static const float *array_get(void *ctx, int unit) { return ((const float *const *)ctx)[unit]; }
static void array_put(void *ctx, int unit) { (void)ctx, (void)unit; }

int model_save_weights(const struct st_model *m, const float *const *unit_w, const char *path)
{
	return save_file(m, path, 0, m->n_params, array_get, array_put, (void *)unit_w, NULL);
}
