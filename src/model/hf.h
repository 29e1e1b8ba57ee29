/* Hugging Face LLaMA weights (model.safetensors) to and from the W slabs. */
#ifndef ST_HF_H
#define ST_HF_H

#include "io/fsutil.h" /* ST_MADE_MAX */
#include "model/llama.h"

/* Load every parameter by HF name into unit_w[unit] + offset; F32/F16/BF16
 * accepted; a missing tensor, a wrong shape or dtype, or an extra tensor that
 * the config does not explain is an error naming the tensor. */
int model_load_weights(const struct st_model *m, float *const *unit_w, const char *path);
/* Write every parameter as F32 under its HF name (fsynced). */
int model_save_weights(const struct st_model *m, const float *const *unit_w, const char *path);

/* A model directory's weight files: model.safetensors, or the shards that
 * model.safetensors.index.json maps tensor names to (as Hugging Face writes
 * models above its shard size). */
struct st_safetensors;
struct cJSON;
struct st_weight_files {
	int n;
	struct st_safetensors *sf;
	char dir[1024];
	struct cJSON *index; /* the parsed index of a sharded model, else NULL */
};
int weights_open(struct st_weight_files *w, const char *dir);
/* Whether dir holds weight files of any kind weights_open would look at
 * (safetensors, their index, or PyTorch's, which it names and refuses). */
int weights_present(const char *dir);
void weights_close(struct st_weight_files *w);

/* The same, a unit at a time, for weights that are not all in memory (the
 * store's staged slabs): the loader fills unit `unit`'s slab w; a tensor in
 * no file is an error naming it; model_check_extra rejects tensors the config
 * does not explain. */
int model_load_unit(const struct st_model *m, const struct st_weight_files *wf, int unit, float *w);
int model_check_extra(const struct st_model *m, const struct st_weight_files *wf);
/* Every parameter present with its shape and a float dtype, and nothing the
 * config does not explain, from the files' headers alone: run before the
 * model's memory is allocated, so that a config.json that disagrees with its
 * weights (a vocab_size of 67M over a 258-row embedding) fails at once. */
int model_check_files(const struct st_model *m, const struct st_weight_files *wf);

/* Write the weights into dir: one model.safetensors, or, when they pass
 * max_shard bytes (0: never), model-0000k-of-0000n.safetensors shards of at
 * most max_shard bytes each (a larger tensor alone) and
 * model.safetensors.index.json, as Hugging Face's save_pretrained does; the
 * other layout's files are removed. get(ctx, unit) gives a unit's weights,
 * readable until put(ctx, unit). step (NULL: none): a checkpoint's step,
 * written into every file's metadata as ST_STEP_META, so that a file from
 * another step is found out on resume. */
#define ST_DEFAULT_SHARD_BYTES 5000000000ull /* Hugging Face's "5GB" */
#define ST_STEP_META "strata_step"
int model_save_weights_dir(const struct st_model *m, const char *dir, size_t max_shard,
			   const float *(*get)(void *ctx, int unit),
			   void (*put)(void *ctx, int unit), void *ctx, const char *step);

/* Whether dir holds a model's config.json, model.safetensors or index. */
int model_dir_holds_model(const char *dir);
/* A model replaced in place (init and import with --force) is written whole
 * first into a staging directory inside dir, st->tmp =
 * DIR/.strata-new.XXXXXX, while st->lock_fd holds an exclusive flock on
 * DIR/.strata-write.lock until the commit (a second writer is refused), so
 * any other staging directory found there is a dead writer's and is removed.
 * A write that fails there leaves dir's model as it was: the caller drops
 * the staging directory and the lock with model_dir_unstage, which also
 * removes the directories staging made for dir. Refused before anything is
 * staged: a dir that is a training run or checkpoint (fs_run_marker), and
 * one already holding a model without force (both on the path as made:
 * "x/../run" is the run). */
struct model_stage {
	char tmp[4200];
	char dir[4200];           /* the model directory */
	size_t made[ST_MADE_MAX]; /* the directories staging made for it (fs_mkdir_p_made), */
	int n_made;               /* removed again when it fails (the first ST_MADE_MAX) */
	int lock_fd, locked, busy; /* busy: another writer holds the lock */
};
int model_dir_stage(const char *dir, int force, struct model_stage *st);
void model_dir_unstage(struct model_stage *st);
/* Then, once nothing in dir is in the way of a file (a directory of its
 * name: refused, the old model unchanged, the staging directory dropped),
 * the old model goes: config.json first (from then on dir is no model),
 * model.safetensors, the .safetensors files its index names and the index;
 * other files (a README) stay. The new files are renamed in, the index and
 * config.json last, so a kill part-way leaves no config.json, never new
 * weights under the old config.json or old shards beside new ones. On a
 * failed move the files not moved stay in the staging directory, named in
 * the error. */
int model_dir_commit(const char *dir, struct model_stage *st);

/* Import a llama-architecture GGUF file (tensors of the types ggml_quant.h
 * reads, dequantized; q/k rows un-permuted) as a Hugging Face directory:
 * config.json, the weights (sharded above shard_bytes), and tokenizer.json
 * from tokenizer.ggml.* when it is byte-level BPE with a pre-tokenizer
 * strata rebuilds (else none, warned). cfg_out (may be NULL)
 * gets the model's configuration. */
int gguf_import(const char *gguf_path, const char *dir, size_t shard_bytes, struct st_config *cfg_out);

#endif
