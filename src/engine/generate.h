/* Text generation: temperature, top-k and nucleus (top-p) sampling, one token per
 * forward pass over the last T tokens of the context (no KV cache yet: the
 * models trained on the CPU are small enough that recomputing the window is
 * fast). */
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
	int eos_id;
};

/* Pick the next token from logits (V) (exposed for tests). */
int32_t sample_logits(const float *logits, int v, double temperature, double top_p, int top_k,
		      double u, float *scratch /* 2V floats */);

/* ctx: n_ctx prompt tokens. Calls emit(tok, arg) for every new token, and
 * stops (returning ST_OK) when it returns nonzero: the output went nowhere,
 * which its caller reports. The session's executor must be set up with b = 1
 * (session_exec). */
int generate(struct st_session *s, const int32_t *ctx, int n_ctx, const struct st_gen_opts *g,
	     int (*emit)(int32_t tok, void *arg), void *arg);

#endif
