/* The key/value-cache decoder; see decode.h. */
#include <stdlib.h>
#include <string.h>

#include "engine/decode.h"
#include "util/check.h"

static int decode_rows(int t_max)
{
	return t_max < ST_DECODE_ROWS ? t_max : ST_DECODE_ROWS;
}

size_t decoder_bytes(const struct st_model *m, int t_max)
{
	return ((size_t)m->cfg.n_layers * decode_cache_floats(m, t_max) +
		decode_rest_floats(m, decode_rows(t_max), t_max)) *
	       sizeof(float);
}

int decoder_init(struct st_decoder *d, const struct st_ops *ops, const struct st_model *m,
		 struct st_store *s, int t_max)
{
	memset(d, 0, sizeof *d);
	ST_CHECK(t_max >= 1, NULL, "internal: decoder of %d positions", t_max);
	ST_CHECK(ops->attention_cached, "sample on the CPU (--device cpu)",
		 "the %s backend has no cached attention", ops->name);
	d->ops = ops;
	d->model = m;
	d->store = s;
	d->t_max = t_max;
	const int L = m->cfg.n_layers, head = model_head_unit(m);
	d->cache = st_calloc((size_t)L + 1, sizeof *d->cache);
	if (!d->cache)
		return ST_FAIL;
	const size_t cache = decode_cache_floats(m, t_max) * sizeof(float);
	for (int l = 0; l < L; l++) {
		ST_TRY(store_alloc(s, 1 + l, ST_SLAB_A, ST_TIER_DEVICE, cache));
		d->cache[l] = store_acquire(s, 1 + l, ST_SLAB_A);
	}
	const int rows = decode_rows(t_max);
	ST_TRY(store_alloc(s, head, ST_SLAB_A, ST_TIER_DEVICE,
			   decode_rest_floats(m, rows, t_max) * sizeof(float)));
	decode_bind(&d->acts, m, rows, t_max, store_acquire(s, head, ST_SLAB_A));
	return ST_OK;
}

void decoder_free(struct st_decoder *d)
{
	free(d->cache); /* the slabs are the store's */
	memset(d, 0, sizeof *d);
}

static void prefetch_next(struct st_decoder *d, int unit)
{
	for (int i = 1; i <= d->prefetch && unit + i < d->model->n_units; i++)
		store_prefetch(d->store, unit + i, ST_SLAB_W);
}

static const float *acquire_w(struct st_decoder *d, int unit)
{
	const float *w = store_acquire_as(d->store, unit, ST_SLAB_W, ST_ACCESS_READ);
	prefetch_next(d, unit);
	return w;
}

/* One pass of n tokens through every unit, each unit's weights acquired
 * once and run over the pass in chunks of up to rows tokens (as evaluation
 * runs a group of micro-batches, layer-major: a prompt streamed from disk is
 * read once, not once per chunk); the head scores the last token. */
static void pass(struct st_decoder *d, const int32_t *tokens, int n)
{
	const struct st_ops *ops = d->ops;
	const struct st_model *m = d->model;
	struct st_store *s = d->store;
	struct st_decode_acts *a = &d->acts;
	const int L = m->cfg.n_layers, head = model_head_unit(m), tied = m->cfg.tied;
	const size_t C = (size_t)m->cfg.dim;
	prefetch_next(d, -1);
	const float *wte = acquire_w(d, 0);
	for (int i = 0; i < n; i += a->rows) {
		const int k = n - i < a->rows ? n - i : a->rows;
		llama_embed_decode(ops, m, a, wte, tokens + i, k, a->x + i * C);
	}
	if (!tied) /* a tied head reads the embedding */
		store_release(s, 0, ST_SLAB_W, 0);
	for (int l = 0; l < L; l++) {
		const float *w = acquire_w(d, 1 + l);
		/* in order: each chunk's keys and values are in the cache before
		 * the next chunk attends to them */
		for (int i = 0; i < n; i += a->rows) {
			const int k = n - i < a->rows ? n - i : a->rows;
			llama_layer_decode(ops, m, a, l, w, d->cache[l], d->pos + i, k, a->x + i * C);
		}
		store_release(s, 1 + l, ST_SLAB_W, 0);
	}
	const float *wh = acquire_w(d, head);
	/* the next pass's first units stream in while the head scores and the
	 * caller samples (a unit still held is left as it is) */
	prefetch_next(d, -1);
	llama_head_decode(ops, m, a, wh, tied ? wte : NULL, a->x + (size_t)(n - 1) * C);
	store_release(s, head, ST_SLAB_W, 0);
	if (tied)
		store_release(s, 0, ST_SLAB_W, 0);
	d->pos += n;
}

const float *decoder_feed(struct st_decoder *d, const int32_t *tokens, int n)
{
	if (n < 1 || d->pos + n > d->t_max) {
		ST_ERROR(NULL, "internal: %d tokens at position %d of a %d-position cache", n, d->pos,
			 d->t_max);
		return NULL;
	}
	pass(d, tokens, n);
	return d->acts.logits;
}
