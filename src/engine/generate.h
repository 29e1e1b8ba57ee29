/* Text generation: temperature, top-k and nucleus (top-p) sampling, one token per
 * decoder pass over a key/value cache of T positions (engine/decode.h). When
 * the text outgrows the cache, the cache is refilled with the last ceil(T/2)
 * tokens (their positions start again at 0) and generation goes on, so every
 * token sees between ceil(T/2) and T tokens of context, at the cost of
 * re-reading half a window once per T/2 tokens.
 *
 * Without a decoder, generate recomputes the window of the last T tokens
 * through the executor for every token (the reference the decoder is tested
 * and benchmarked against; T times the FLOPs per token). */
#ifndef ST_GENERATE_H
#define ST_GENERATE_H

#include <stdint.h>

#include "engine/session.h"

struct st_gen_opts {
	int max_new;        /* tokens to generate */
	double temperature; /* 0: greedy */
	double top_p;       /* 1: no truncation */
	int top_k;          /* 0: no limit */
	uint64_t seed;
	int stop_at_eos;
	const int *eos_ids; /* it stops at any of these (not printed) */
	int n_eos;
};

/* Pick the next token from logits (V) (exposed for tests). */
int32_t sample_logits(const float *logits, int v, double temperature, double top_p, int top_k,
		      double u, float *scratch /* 2V floats */);

/* ctx: n_ctx prompt tokens (the last T of them are read). Calls emit(tok,
 * arg) for every new token, and stops (returning ST_OK) when it returns
 * nonzero: the output went nowhere, which its caller reports. The session
 * needs a decoder (session_decoder), or else an executor set up with b = 1
 * (session_exec): the windowed recompute. */
int generate(struct st_session *s, const int32_t *ctx, int n_ctx, const struct st_gen_opts *g,
	     int (*emit)(int32_t tok, void *arg), void *arg);

#endif
