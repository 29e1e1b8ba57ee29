/* Hugging Face LLaMA weights (model.safetensors) to and from the W slabs. */
#ifndef ST_HF_H
#define ST_HF_H

#include "model/llama.h"

/* Load every parameter by HF name into unit_w[unit] + offset; F32/F16/BF16
 * accepted; a missing tensor, a wrong shape or dtype, or an extra tensor that
 * the config does not explain is an error naming the tensor. */
int model_load_weights(const struct st_model *m, float *const *unit_w, const char *path);
/* Write every parameter as F32 under its HF name (fsynced). */
int model_save_weights(const struct st_model *m, const float *const *unit_w, const char *path);

/* The same, a unit at a time, for weights that are not all in memory (the
 * store's staged slabs): the loader fills unit `unit`'s slab w from an open
 * file; model_check_extra rejects tensors the config does not explain; the
 * saver asks get(ctx, unit) for a unit's weights and calls put(ctx, unit)
 * when it is done with them. */
struct st_safetensors;
int model_load_unit(const struct st_model *m, const struct st_safetensors *sf, int unit, float *w);
int model_check_extra(const struct st_model *m, const struct st_safetensors *sf);
int model_save_weights_from(const struct st_model *m, const char *path,
			    const float *(*get)(void *ctx, int unit),
			    void (*put)(void *ctx, int unit), void *ctx);

#endif
