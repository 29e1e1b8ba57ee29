/* Forward-only sessions within memory budgets; see forward.h. */
#include <stdlib.h>
#include <string.h>

#include "engine/place.h"
#include "model/config.h"
#include "store/io.h"
#include "trainer/forward.h"
#include "trainer/offdirs.h"
#include "trainer/tiers.h"
#include "util/check.h"

/* The staging pool streams the next units' weights while one computes. */
#define FORWARD_PREFETCH 2

void forward_mem_defaults(struct st_forward_mem *mem)
{
	memset(mem, 0, sizeof *mem);
	snprintf(mem->device_mem, sizeof mem->device_mem, "auto");
	snprintf(mem->host_mem, sizeof mem->host_mem, "auto");
}

/* What runs the forward: an executor for micro-batches of b x t with the
 * activation policy act, or (t_max > 0) a decoder with a t_max-position
 * key/value cache. */
struct fwd_shape {
	int b, t;
	const unsigned char *act;
	int t_max;
};

static int shape_alloc(struct st_session *s, const struct fwd_shape *sh)
{
	if (sh->t_max)
		return session_decoder(s, sh->t_max);
	return session_exec_policy(s, sh->b, sh->t, sh->act);
}

/* Weights and activations on the device tier, with nothing to stream. */
static int place_all(struct st_session *s, const struct fwd_shape *sh)
{
	ST_TRY(session_alloc(s, NULL, ST_GRADS_NONE));
	return shape_alloc(s, sh);
}

/* Where the budgets do not hold them: placed, the store started on the
 * offload directories. */
static int place_budgeted(struct st_session *s, const struct st_forward_mem *mem,
			  const struct fwd_shape *sh, size_t act_bytes, const size_t budgets[])
{
	const struct st_model *m = &s->model;
	const int n = m->n_units;
	size_t *wb = st_calloc((size_t)n, sizeof *wb);
	char dirbuf[ST_PATH];
	const char *dirs[64];
	int n_dirs = 0;
	if (!wb)
		return ST_FAIL;
	for (int u = 0; u < n; u++)
		wb[u] = m->units[u].numel * sizeof(float);
	snprintf(dirbuf, sizeof dirbuf, "%s", mem->offload_dir);
	int rc = ST_OK;
	for (char *save = NULL, *d = strtok_r(dirbuf, ",", &save); d && rc == ST_OK;
	     d = strtok_r(NULL, ",", &save)) {
		if (n_dirs == 64) {
			ST_USAGE_ERROR("give at most 64 --offload-dir directories",
				       "too many offload directories");
			rc = ST_FAIL;
		} else
			dirs[n_dirs++] = d;
	}
	if (rc == ST_OK && *mem->offload_dir && !n_dirs) { /* ",": as train refuses it */
		ST_USAGE_ERROR("give --offload-dir DIR (repeated, or DIR1,DIR2, one per SSD)",
			       "--offload-dir '%s' names no directory", mem->offload_dir);
		rc = ST_FAIL;
	}
	if (rc == ST_OK)
		rc = offdirs_check_exist(dirs, n_dirs, "");
	struct st_place_opts po = {.prefetch = FORWARD_PREFETCH, .n_dirs = n_dirs,
				   .io_block = 1u << 20};
	memcpy(po.budget, budgets, sizeof po.budget);
	if (sh->t_max) {
		po.act_what = "key/value cache and scratch of generation";
		po.act_options = "--context or --tokens"; /* the cache holds what the text needs */
	}
	for (int k = 0; k < ST_SLAB__COUNT; k++)
		po.force[k] = -1;
	struct st_place pl = {0};
	if (rc == ST_OK)
		rc = place_make(&pl, n, wb, NULL, NULL, act_bytes, &po);
	const struct offdirs_need room = {.disk = pl.bytes[ST_TIER_DISK], .io_block = po.io_block,
					  .out = ""};
	if (rc == ST_OK)
		rc = offdirs_check_room(dirs, n_dirs, &room);
	for (int k = 0; rc == ST_OK && k < ST_TIER__COUNT; k++)
		s->store.tiers[k].budget = budgets[k];
	if (rc == ST_OK)
		rc = session_alloc(s, &pl, ST_GRADS_NONE);
	if (rc == ST_OK)
		rc = shape_alloc(s, sh);
	struct st_offload_cfg oc = {.dirs = dirs, .n_dirs = n_dirs, .io_block = po.io_block,
				    .io_depth = 16};
	memcpy(oc.pool_slots, pl.pool_slots, sizeof oc.pool_slots);
	if (rc == ST_OK)
		rc = store_start(&s->store, &oc);
	if (rc == ST_OK && pl.offloaded) {
		double w[ST_TIER__COUNT] = {0};
		for (int u = 0; u < n; u++)
			w[place_home(&pl, u, ST_SLAB_W)] += (double)wb[u];
		char b1[32], b2[32], b3[32];
		st_log_info("weights: %s on the device, %s on the host, %s on disk, streamed through "
			    "%d staging buffers",
			    fmt_bytes(b1, sizeof b1, w[ST_TIER_DEVICE]),
			    fmt_bytes(b2, sizeof b2, w[ST_TIER_HOST]),
			    fmt_bytes(b3, sizeof b3, w[ST_TIER_DISK]), pl.pool_slots[ST_SLAB_W]);
	}
	s->exec.prefetch = FORWARD_PREFETCH;
	s->dec.prefetch = FORWARD_PREFETCH;
	place_free(&pl);
	free(wb);
	return rc;
}

int forward_build(struct st_session *s, const struct st_ops *ops, const char *dir)
{
	char path[4200];
	struct st_config cfg;
	memset(s, 0, sizeof *s);
	snprintf(path, sizeof path, "%s/config.json", dir);
	ST_TRY(config_load(&cfg, path));
	ST_TRY(session_build(s, ops, &cfg, NULL));
	return session_check_weights(s, dir);
}

/* Place for sh, whose activations take act_bytes, and load the weights. */
static int place(struct st_session *s, const char *dir, const struct st_forward_mem *mem,
		 const struct fwd_shape *sh, size_t act_bytes)
{
	const struct st_model *m = &s->model;
	size_t need = act_bytes;
	for (int u = 0; u < m->n_units; u++)
		need += m->units[u].numel * sizeof(float);
	size_t budgets[ST_TIER__COUNT] = {0};
	ST_TRY(tiers_budgets(mem->device_mem, mem->host_mem, need, budgets));
	if (!budgets[ST_TIER_DEVICE] && !budgets[ST_TIER_HOST] && !*mem->offload_dir)
		ST_TRY(place_all(s, sh));
	else
		ST_TRY(place_budgeted(s, mem, sh, act_bytes, budgets));
	return session_load_weights(s, dir);
}

int forward_place(struct st_session *s, const char *dir, const struct st_forward_mem *mem, int b,
		  int t)
{
	const struct st_model *m = &s->model;
	const int L = m->cfg.n_layers;
	unsigned char *act = st_calloc((size_t)L + 1, 1);
	if (!act)
		return ST_FAIL;
	for (int l = 0; l < L; l++)
		act[l] = ST_ACT_RECOMPUTE; /* no backward: only each layer's input is kept */
	/* the inputs, one shared block, the head's tensors, and the executor's
	 * sink for a recomputed layer's output (exec_init; as the planner
	 * counts it) */
	const size_t act_bytes =
		(acts_total_floats(m, b, t, L) + (L ? acts_input_floats(m, b, t) : 0)) * sizeof(float);
	const struct fwd_shape sh = {.b = b, .t = t, .act = act};
	const int rc = place(s, dir, mem, &sh, act_bytes);
	free(act);
	return rc;
}

int forward_place_decoder(struct st_session *s, const char *dir, const struct st_forward_mem *mem,
			  int t_max)
{
	const struct fwd_shape sh = {.t_max = t_max};
	return place(s, dir, mem, &sh, decoder_bytes(&s->model, t_max));
}
