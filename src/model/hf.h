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

#endif
