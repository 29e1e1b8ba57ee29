/* Hugging Face LLaMA weights: model.safetensors in and out, with HF parameter
 * names and (out,in) layout, straight into / out of the units' W slabs. */
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "model/hf.h"
#include "util/check.h"

int model_load_unit(const struct st_model *m, const struct st_safetensors *sf, int unit, float *w)
{
	const struct st_unit *u = &m->units[unit];
	for (int i = u->first_param; i < u->first_param + u->n_params; i++) {
		const struct st_param *p = &m->params[i];
		ST_TRY(safetensors_load_f32(sf, p->name, p->ndim, p->shape, w + p->offset));
	}
	return ST_OK;
}

int model_check_extra(const struct st_model *m, const struct st_safetensors *sf)
{
	/* Tensors the model does not use: a tied model may still carry lm_head;
	 * anything else means the file and config.json disagree. */
	for (int i = 0; i < sf->n; i++) {
		const char *name = sf->tensors[i].name;
		if (model_find_param(m, name) || (m->cfg.tied && !strcmp(name, "lm_head.weight")) ||
		    strstr(name, "rotary_emb.inv_freq"))
			continue;
		ST_ERROR("check that config.json belongs to these weights",
			 "%s: tensor '%s' is not part of the configured model", sf->path, name);
		return ST_FAIL;
	}
	return ST_OK;
}

int model_load_weights(const struct st_model *m, float *const *unit_w, const char *path)
{
	struct st_safetensors sf;
	ST_TRY(safetensors_open(&sf, path));
	int rc = ST_OK;
	for (int u = 0; u < m->n_units && rc == ST_OK; u++)
		rc = model_load_unit(m, &sf, u, unit_w[u]);
	if (rc == ST_OK)
		rc = model_check_extra(m, &sf);
	safetensors_close(&sf);
	return rc;
}

struct unit_source {
	const struct st_model *m;
	const float *(*get)(void *ctx, int unit);
	void (*put)(void *ctx, int unit);
	void *ctx;
};

static const void *param_get(void *ctx, int i)
{
	const struct unit_source *us = ctx;
	const struct st_param *p = &us->m->params[i];
	return us->get(us->ctx, p->unit) + p->offset;
}

static void param_put(void *ctx, int i)
{
	const struct unit_source *us = ctx;
	us->put(us->ctx, us->m->params[i].unit);
}

int model_save_weights_from(const struct st_model *m, const char *path,
			    const float *(*get)(void *ctx, int unit),
			    void (*put)(void *ctx, int unit), void *ctx)
{
	struct st_tensor_out *t = st_calloc((size_t)m->n_params, sizeof *t);
	if (!t)
		return ST_FAIL;
	for (int i = 0; i < m->n_params; i++) {
		const struct st_param *p = &m->params[i];
		t[i] = (struct st_tensor_out){.name = p->name, .dtype = ST_DT_F32, .ndim = p->ndim};
		t[i].shape[0] = p->shape[0];
		t[i].shape[1] = p->shape[1];
	}
	struct unit_source us = {m, get, put, ctx};
	struct st_tensor_source src = {param_get, param_put, &us};
	const char *meta[] = {"format", "pt"};
	int rc = safetensors_write_from(path, t, m->n_params, meta, 1, &src);
	free(t);
	return rc;
}

static const float *array_get(void *ctx, int unit) { return ((const float *const *)ctx)[unit]; }
static void array_put(void *ctx, int unit) { (void)ctx, (void)unit; }

int model_save_weights(const struct st_model *m, const float *const *unit_w, const char *path)
{
	return model_save_weights_from(m, path, array_get, array_put, (void *)unit_w);
}
