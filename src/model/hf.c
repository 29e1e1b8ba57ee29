/* Hugging Face LLaMA weights: model.safetensors in and out, with HF parameter
 * names and (out,in) layout, straight into / out of the units' W slabs. */
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "model/hf.h"
#include "util/check.h"

int model_load_weights(const struct st_model *m, float *const *unit_w, const char *path)
{
	struct st_safetensors sf;
	ST_TRY(safetensors_open(&sf, path));
	int rc = ST_OK;
	for (int i = 0; i < m->n_params && rc == ST_OK; i++) {
		const struct st_param *p = &m->params[i];
		rc = safetensors_load_f32(&sf, p->name, p->ndim, p->shape, unit_w[p->unit] + p->offset);
	}
	/* Tensors the model does not use: a tied model may still carry lm_head;
	 * anything else means the file and config.json disagree. */
	for (int i = 0; i < sf.n && rc == ST_OK; i++) {
		const char *name = sf.tensors[i].name;
		if (model_find_param(m, name) || (m->cfg.tied && !strcmp(name, "lm_head.weight")) ||
		    strstr(name, "rotary_emb.inv_freq"))
			continue;
		ST_ERROR("check that config.json belongs to these weights",
			 "%s: tensor '%s' is not part of the configured model", path, name);
		rc = ST_FAIL;
	}
	safetensors_close(&sf);
	return rc;
}

int model_save_weights(const struct st_model *m, const float *const *unit_w, const char *path)
{
	struct st_tensor_out *t = st_calloc((size_t)m->n_params, sizeof *t);
	if (!t)
		return ST_FAIL;
	for (int i = 0; i < m->n_params; i++) {
		const struct st_param *p = &m->params[i];
		t[i] = (struct st_tensor_out){.name = p->name, .dtype = ST_DT_F32, .ndim = p->ndim,
					      .data = unit_w[p->unit] + p->offset};
		t[i].shape[0] = p->shape[0];
		t[i].shape[1] = p->shape[1];
	}
	const char *meta[] = {"format", "pt"};
	int rc = safetensors_write(path, t, m->n_params, meta, 1);
	free(t);
	return rc;
}
