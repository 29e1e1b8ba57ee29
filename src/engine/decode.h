/* The decoder: text generation's forward with a key/value cache. Each layer
 * keeps the keys and values of the tokens seen so far (up to t_max), so a
 * new token costs one row through every weight instead of a pass over the
 * whole window, as recomputing it with the executor does: at a 256-token
 * window, that is 256 times fewer FLOPs per generated token.
 *
 * Memory: every layer's cache is its A slab (decode_cache_floats), the
 * scratch of a pass of up to `rows` tokens is the head's, all on the device
 * tier. Weights are acquired from the store unit by unit, prefetching the
 * next ones, as the executor does, so weights placed on the host or disk
 * stream through the staging pool, once per pass: once per generated token,
 * and once for a whole prompt (each unit runs over all its tokens, in chunks
 * of ST_DECODE_ROWS, before the next unit's weights are needed). */
#ifndef ST_DECODE_H
#define ST_DECODE_H

#include <stdint.h>

#include "model/llama.h"
#include "ops/ops.h"
#include "store/store.h"

/* Most tokens per chunk of a pass: the matmuls run on up to this many rows
 * at a time (the scratch holds one chunk; the residual streams, a whole
 * pass). */
#define ST_DECODE_ROWS 64

struct st_decoder {
	const struct st_ops *ops;
	const struct st_model *model;
	struct st_store *store;
	struct st_decode_acts acts;
	float **cache; /* per layer: its keys, then its values */
	int t_max;     /* positions the caches hold */
	int pos;       /* tokens in the caches */
	int prefetch;  /* units of weights fetched ahead of the one computing */
};

/* The bytes decoder_init allocates from the store's device tier for a
 * t_max-position cache (what a placement must leave it). */
size_t decoder_bytes(const struct st_model *m, int t_max);
/* Allocate the caches (the layers' A slabs) and the scratch (the head's),
 * before store_start. */
int decoder_init(struct st_decoder *d, const struct st_ops *ops, const struct st_model *m,
		 struct st_store *s, int t_max);
void decoder_free(struct st_decoder *d);
/* Forget the cached tokens: the next decoder_feed starts at position 0. */
static inline void decoder_reset(struct st_decoder *d) { d->pos = 0; }
/* Append n tokens (pos + n <= t_max) at positions pos .. pos+n-1, in one
 * pass; returns the next-token scores after the last of them (vocab_size
 * floats, valid until the next call), or NULL for an n that does not fit
 * (an internal error, said). */
const float *decoder_feed(struct st_decoder *d, const int32_t *tokens, int n);

#endif
