/* The executor: a micro-batch's training pass, and evaluation's grouped
 * forward; see exec.h. */
#include <stdlib.h>
#include <string.h>

#include "engine/exec.h"
#include "engine/memavail.h"
#include "util/check.h"

static int is_swapped(unsigned char p) { return p == ST_ACT_HOST || p == ST_ACT_DISK; }

int exec_init(struct st_exec *ex, const struct st_ops *ops, const struct st_model *m,
	      struct st_store *s, int b, int t, const unsigned char *act)
{
	memset(ex, 0, sizeof *ex);
	ex->ops = ops;
	ex->model = m;
	ex->store = s;
	ex->b = b;
	ex->t = t;
	const int L = m->cfg.n_layers, head = model_head_unit(m);
	ex->act = st_calloc((size_t)L, 1);
	float **blocks = st_calloc((size_t)L, sizeof *blocks);
	if (!ex->act || !blocks) {
		free(blocks);
		return ST_FAIL;
	}
	int rc = ST_OK;
	for (int l = 0; l < L; l++) {
		ex->act[l] = act ? act[l] : ST_ACT_KEEP;
		if (ex->act[l] >= ST_ACT__COUNT) {
			ST_ERROR(NULL, "internal: activation policy %d", ex->act[l]);
			rc = ST_FAIL;
		}
		ex->n_recompute += ex->act[l] == ST_ACT_RECOMPUTE;
	}
	for (int l = 0; l < L && rc == ST_OK; l++) {
		const unsigned char p = ex->act[l];
		const size_t floats = p == ST_ACT_RECOMPUTE ? acts_input_floats(m, b, t) : acts_layer_floats(m, b, t);
		const enum st_tier home = p == ST_ACT_HOST ? ST_TIER_HOST : p == ST_ACT_DISK ? ST_TIER_DISK
											 : ST_TIER_DEVICE;
		rc = store_alloc(s, 1 + l, ST_SLAB_A, home, floats * sizeof(float));
		if (rc == ST_OK && !is_swapped(p))
			blocks[l] = store_acquire(s, 1 + l, ST_SLAB_A);
	}
	/* the head's A slab: its tensors and the backward scratch, then the
	 * recomputed layers' shared block and the recompute sink */
	const size_t rest = acts_rest_floats(m, b, t), layer = acts_layer_floats(m, b, t);
	const size_t in = acts_input_floats(m, b, t);
	if (rc == ST_OK)
		rc = store_alloc(s, head, ST_SLAB_A, ST_TIER_DEVICE,
				 (rest + (ex->n_recompute ? layer + in : 0)) * sizeof(float));
	if (rc == ST_OK) {
		float *hb = store_acquire(s, head, ST_SLAB_A);
		ex->sink = ex->n_recompute ? hb + rest + layer : NULL;
		unsigned char *rmask = st_calloc((size_t)L, 1);
		for (int l = 0; rmask && l < L; l++)
			rmask[l] = ex->act[l] == ST_ACT_RECOMPUTE;
		rc = rmask ? acts_bind_mask(&ex->acts, m, b, t, blocks, hb, rmask, hb + rest) : ST_FAIL;
		free(rmask);
	}
	free(blocks);
	return rc;
}

void exec_free(struct st_exec *ex)
{
	acts_unbind(&ex->acts);
	free(ex->act);
	memset(ex, 0, sizeof *ex);
}

/* A swapped layer's activations: a staging slot for its forward (its
 * previous unit writes its input there), handed back dirty after it, so it
 * is written out behind the compute; or dropped unwritten when no backward
 * follows. */
static void act_open(struct st_exec *ex, int l)
{
	if (l >= ex->model->cfg.n_layers || !is_swapped(ex->act[l]))
		return;
	acts_point_layer(&ex->acts, ex->model, l, store_acquire(ex->store, 1 + l, ST_SLAB_A), NULL);
}

static void act_close_forward(struct st_exec *ex, int l, int backward)
{
	if (!is_swapped(ex->act[l]))
		return;
	if (backward)
		store_release(ex->store, 1 + l, ST_SLAB_A, 1);
	else /* evaluation: nothing written out (it wrote every zero-filled slot) */
		store_release_discard(ex->store, 1 + l, ST_SLAB_A);
}

static void unit_done(struct st_exec *ex, int unit)
{
	if (ex->on_unit_grad)
		ex->on_unit_grad(ex->on_unit_grad_ctx, unit);
}

/* Prefetch W (and G in backward) of the next units in the pass's direction. */
static void prefetch_next(struct st_exec *ex, int unit, int dir, int grads)
{
	for (int i = 1; i <= ex->prefetch; i++) {
		int u = unit + dir * i;
		if (u < 0 || u >= ex->model->n_units)
			break;
		store_prefetch(ex->store, u, ST_SLAB_W);
		if (grads)
			store_prefetch(ex->store, u, ST_SLAB_G);
		if (dir < 0 && u >= 1 && u <= ex->model->cfg.n_layers && is_swapped(ex->act[u - 1]))
			store_prefetch(ex->store, u, ST_SLAB_A);
	}
}

static const float *acquire_w(struct st_exec *ex, int unit)
{
	if (ex->before_unit)
		ex->before_unit(ex->before_unit_ctx, unit);
	return store_acquire_as(ex->store, unit, ST_SLAB_W, ST_ACCESS_READ);
}

/* Release a unit's gradient after its backward, taking its norm first when
 * asked (the last micro-batch of a step). */
static void release_g(struct st_exec *ex, int unit, const float *g)
{
	if (ex->grad_sumsq)
		ex->grad_sumsq[unit] = ex->ops->sumsq(g, ex->model->units[unit].numel);
	store_release(ex->store, unit, ST_SLAB_G, 1);
}

double exec_micro_step(struct st_exec *ex, const int32_t *tokens, const int32_t *targets,
		       float loss_scale, long *n_targets)
{
	const struct st_ops *ops = ex->ops;
	const struct st_model *m = ex->model;
	struct st_store *s = ex->store;
	struct st_acts *a = &ex->acts;
	const int L = m->cfg.n_layers, head = model_head_unit(m);
	const int backward = loss_scale > 0;

	/* forward */
	prefetch_next(ex, -1, 1, 0);
	const float *wte = acquire_w(ex, 0);
	prefetch_next(ex, 0, 1, 0);
	act_open(ex, 0);
	double t0 = trace_now();
	llama_embed_forward(ops, m, a, wte, tokens);
	trace_span(ex->trace, ST_TRACK_COMPUTE, t0, trace_now(), "fwd embed");
	if (!m->cfg.tied)
		store_release(s, 0, ST_SLAB_W, 0);
	for (int l = 0; l < L; l++) {
		const float *w = acquire_w(ex, 1 + l);
		prefetch_next(ex, 1 + l, 1, 0);
		act_open(ex, l + 1);
		t0 = trace_now();
		llama_layer_forward(ops, m, a, l, w);
		trace_span(ex->trace, ST_TRACK_COMPUTE, t0, trace_now(), "fwd layer %d", l);
		store_release(s, 1 + l, ST_SLAB_W, 0);
		act_close_forward(ex, l, backward);
	}
	const float *wh = acquire_w(ex, head);
	if (backward)
		prefetch_next(ex, head, -1, 1);
	t0 = trace_now();
	double loss = llama_head_forward(ops, m, a, wh, m->cfg.tied ? wte : NULL, targets,
					 backward ? loss_scale : 0.0f);
	trace_span(ex->trace, ST_TRACK_COMPUTE, t0, trace_now(), "fwd head + loss");
	long count = 0;
	for (int i = 0; i < a->b * a->t; i++)
		count += targets[i] >= 0;
	*n_targets = count;
	if (!backward) {
		store_release(s, head, ST_SLAB_W, 0);
		if (m->cfg.tied)
			store_release(s, 0, ST_SLAB_W, 0);
		return loss;
	}

	/* backward */
	float *gh = store_acquire(s, head, ST_SLAB_G);
	float *dwte = m->cfg.tied ? store_acquire(s, 0, ST_SLAB_G) : NULL;
	t0 = trace_now();
	llama_head_backward(ops, m, a, wh, m->cfg.tied ? wte : NULL, gh, dwte);
	trace_span(ex->trace, ST_TRACK_COMPUTE, t0, trace_now(), "bwd head");
	store_release(s, head, ST_SLAB_W, 0);
	release_g(ex, head, gh);
	unit_done(ex, head);
	for (int l = L - 1; l >= 0; l--) {
		const float *w = store_acquire_as(s, 1 + l, ST_SLAB_W, ST_ACCESS_READ);
		float *g = store_acquire(s, 1 + l, ST_SLAB_G);
		prefetch_next(ex, 1 + l, -1, 1);
		if (is_swapped(ex->act[l])) /* read back what its forward wrote out */
			acts_point_layer(a, m, l, store_acquire_as(s, 1 + l, ST_SLAB_A, ST_ACCESS_READ), NULL);
		if (ex->act[l] == ST_ACT_RECOMPUTE) { /* rebuild its activations from its kept input */
			/* its output, the next layer's input, is already consumed: a
			 * swapped next layer's slot is gone, so it goes to the sink */
			if (l + 1 < L && is_swapped(ex->act[l + 1]))
				a->layers[l + 1].x = ex->sink;
			t0 = trace_now();
			llama_layer_forward(ops, m, a, l, w);
			trace_span(ex->trace, ST_TRACK_COMPUTE, t0, trace_now(), "recompute layer %d", l);
		}
		t0 = trace_now();
		llama_layer_backward(ops, m, a, l, w, g);
		trace_span(ex->trace, ST_TRACK_COMPUTE, t0, trace_now(), "bwd layer %d", l);
		store_release(s, 1 + l, ST_SLAB_W, 0);
		if (is_swapped(ex->act[l])) {
			store_release(s, 1 + l, ST_SLAB_A, 0);
			store_discard(s, 1 + l, ST_SLAB_A);
		}
		release_g(ex, 1 + l, g);
		unit_done(ex, 1 + l);
	}
	if (!dwte)
		dwte = store_acquire(s, 0, ST_SLAB_G);
	/* a tied head still holds the embed weights; otherwise acquire them again
	 * (the stable embedding's LayerNorm needs its gains in backward) */
	const float *we = m->cfg.tied ? wte : store_acquire_as(s, 0, ST_SLAB_W, ST_ACCESS_READ);
	t0 = trace_now();
	llama_embed_backward(ops, m, a, we, dwte, tokens);
	trace_span(ex->trace, ST_TRACK_COMPUTE, t0, trace_now(), "bwd embed");
	store_release(s, 0, ST_SLAB_W, 0);
	release_g(ex, 0, dwte);
	unit_done(ex, 0);
	return loss;
}

size_t exec_eval_row_floats(const struct st_exec *ex)
{
	const size_t nc = (size_t)ex->b * ex->t * (size_t)ex->model->cfg.dim;
	return (nc + 15) & ~(size_t)15; /* rows 64-byte aligned, as the activations */
}

int exec_eval_group_max(const struct st_exec *ex)
{
	const char *env = getenv("STRATA_EVAL_GROUP"); /* test hook */
	if (env && *env) {
		const long v = strtol(env, NULL, 10);
		return v < 1 ? 1 : v > 4096 ? 4096 : (int)v;
	}
	int streamed = 0;
	for (int u = 0; u < ex->model->n_units && !streamed; u++)
		streamed = store_is_staged(ex->store, u, ST_SLAB_W);
	if (!streamed)
		return 1; /* the weights stay put: one pass costs nothing to repeat */
	/* the group's residual streams live in host memory: at most 1 GiB, an
	 * eighth of what is available, and what the host budget leaves (a run
	 * within budgets stays within them) */
	const double one = (double)exec_eval_row_floats(ex) * sizeof(float);
	double cap = (double)(1u << 30);
	const size_t avail = mem_available();
	if (avail && (double)avail / 8 < cap)
		cap = (double)avail / 8;
	const struct st_tier_use *host = &ex->store->tiers[ST_TIER_HOST];
	if (host->budget) {
		const double left = host->budget > host->used ? (double)(host->budget - host->used) : 0;
		cap = left < cap ? left : cap;
	}
	const double k = cap / one;
	return k < 1 ? 1 : k > 4096 ? 4096 : (int)k;
}

void exec_eval_group(struct st_exec *ex, const int32_t *tokens, const int32_t *targets, int k,
		     float *hidden, double *loss_sum, long *n_targets)
{
	const struct st_ops *ops = ex->ops;
	const struct st_model *m = ex->model;
	struct st_store *s = ex->store;
	struct st_acts *a = &ex->acts;
	const int L = m->cfg.n_layers, head = model_head_unit(m);
	const size_t n = (size_t)ex->b * ex->t, nc = n * (size_t)m->cfg.dim;
	const size_t row = exec_eval_row_floats(ex);

	/* embed: each micro-batch's residual stream into its row of hidden */
	prefetch_next(ex, -1, 1, 0);
	const float *wte = acquire_w(ex, 0);
	prefetch_next(ex, 0, 1, 0);
	float *const x0 = a->layers[0].x; /* a swapped layer 0's slot is not open: not used */
	double t0 = trace_now();
	for (int j = 0; j < k; j++) {
		a->layers[0].x = hidden + j * row;
		llama_embed_forward(ops, m, a, wte, tokens + j * n);
	}
	a->layers[0].x = x0;
	trace_span(ex->trace, ST_TRACK_COMPUTE, t0, trace_now(), "eval embed x%d", k);
	if (!m->cfg.tied)
		store_release(s, 0, ST_SLAB_W, 0);
	/* each layer over the group: its input copied into its own activations
	 * (so the layer reads what the per-micro-batch pass would), its output
	 * written over that row */
	for (int l = 0; l < L; l++) {
		const float *w = acquire_w(ex, 1 + l);
		prefetch_next(ex, 1 + l, 1, 0);
		act_open(ex, l);
		float **out = l + 1 < L ? &a->layers[l + 1].x : &a->x_final;
		float *const kept = *out;
		t0 = trace_now();
		for (int j = 0; j < k; j++) {
			memcpy(a->layers[l].x, hidden + j * row, nc * sizeof(float));
			*out = hidden + j * row;
			llama_layer_forward(ops, m, a, l, w);
		}
		*out = kept;
		trace_span(ex->trace, ST_TRACK_COMPUTE, t0, trace_now(), "eval layer %d x%d", l, k);
		store_release(s, 1 + l, ST_SLAB_W, 0);
		act_close_forward(ex, l, 0);
	}
	/* the head, each micro-batch's loss added to the caller's sum in turn,
	 * as k passes would add them */
	const float *wh = acquire_w(ex, head);
	float *const xl = a->x_final;
	t0 = trace_now();
	for (int j = 0; j < k; j++) {
		a->x_final = hidden + j * row;
		*loss_sum += llama_head_forward(ops, m, a, wh, m->cfg.tied ? wte : NULL, targets + j * n,
						0.0f);
		for (size_t i = 0; i < n; i++)
			*n_targets += targets[j * n + i] >= 0;
	}
	a->x_final = xl;
	trace_span(ex->trace, ST_TRACK_COMPUTE, t0, trace_now(), "eval head x%d", k);
	store_release(s, head, ST_SLAB_W, 0);
	if (m->cfg.tied)
		store_release(s, 0, ST_SLAB_W, 0);
}
