/* Sessions; see session.h. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/session.h"
#include "model/hf.h"
#include "util/check.h"

int session_backend(const struct st_ops **ops, const char *device, int threads)
{
	if (threads > 0)
		omp_set_num_threads(threads);
	const struct st_ops *cuda = NULL;
	if (strcmp(device, "cpu") != 0)
		cuda = ops_cuda();
	if (!strcmp(device, "cuda")) {
		ST_CHECK(cuda, "use --device cpu; the CUDA backend needs a GPU and a CUDA build",
			 "--device cuda: no usable CUDA backend in this build or no GPU found");
		*ops = cuda;
		return ST_OK;
	}
	*ops = cuda ? cuda : ops_cpu();
	return ST_OK;
}

int session_create(struct st_session *s, const struct st_ops *ops, const struct st_config *cfg,
		   int with_grads)
{
	memset(s, 0, sizeof *s);
	s->ops = ops;
	ST_TRY(model_build(&s->model, cfg));
	const struct st_model *m = &s->model;
	ST_TRY(store_init(&s->store, m->n_units, NULL));
	s->w = st_calloc((size_t)m->n_units, sizeof *s->w);
	if (!s->w)
		return ST_FAIL;
	size_t layer_max = 0; /* the shared layer gradient holds the largest layer */
	for (int u = 0; u < m->n_units; u++)
		if (m->units[u].kind == ST_UNIT_LAYER && m->units[u].numel > layer_max)
			layer_max = m->units[u].numel;
	int first_layer = -1;
	for (int u = 0; u < m->n_units; u++) {
		size_t bytes = m->units[u].numel * sizeof(float);
		ST_TRY(store_alloc(&s->store, u, ST_SLAB_W, ST_TIER_DEVICE, bytes));
		/* fp32 compute: the master weights are the compute weights */
		store_alias(&s->store, u, ST_SLAB_M, ST_SLAB_W);
		if (with_grads == ST_GRADS_SHARED_LAYERS && m->units[u].kind == ST_UNIT_LAYER) {
			if (first_layer < 0) {
				ST_TRY(store_alloc(&s->store, u, ST_SLAB_G, ST_TIER_DEVICE,
						   layer_max * sizeof(float)));
				first_layer = u;
			} else
				store_share(&s->store, u, ST_SLAB_G, first_layer);
		} else if (with_grads)
			ST_TRY(store_alloc(&s->store, u, ST_SLAB_G, ST_TIER_DEVICE, bytes));
		s->w[u] = store_acquire(&s->store, u, ST_SLAB_W);
	}
	return ST_OK;
}

int session_open(struct st_session *s, const struct st_ops *ops, const char *dir, int with_grads)
{
	char path[4096];
	struct st_config cfg;
	snprintf(path, sizeof path, "%s/config.json", dir);
	ST_TRY(config_load(&cfg, path));
	ST_TRY(session_create(s, ops, &cfg, with_grads));
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	return model_load_weights(&s->model, s->w, path);
}

void session_init_random(struct st_session *s, unsigned long seed)
{
	for (int u = 0; u < s->model.n_units; u++)
		model_init_unit(&s->model, u, s->w[u], seed);
}

int session_exec(struct st_session *s, int b, int t)
{
	if (s->exec_ready) {
		ST_CHECK(s->exec.b == b && s->exec.t == t, NULL,
			 "internal: executor shape changed (%dx%d -> %dx%d)", s->exec.b, s->exec.t, b, t);
		return ST_OK;
	}
	ST_TRY(exec_init(&s->exec, s->ops, &s->model, &s->store, b, t));
	s->exec_ready = 1;
	return ST_OK;
}

int session_save_model(const struct st_session *s, const char *dir)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/config.json", dir);
	ST_TRY(config_save(&s->model.cfg, path));
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	return model_save_weights(&s->model, (const float *const *)s->w, path);
}

void session_close(struct st_session *s)
{
	if (s->exec_ready)
		exec_free(&s->exec);
	store_free(&s->store);
	model_free(&s->model);
	free(s->w);
	memset(s, 0, sizeof *s);
}
