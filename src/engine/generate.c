/* Sampling loop; see generate.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/generate.h"
#include "util/check.h"
#include "util/finite.h"
#include "util/rng.h"

struct pidx {
	float p;
	int i;
};

static int by_prob_desc(const void *a, const void *b)
{
	const struct pidx *x = a, *y = b;
	if (x->p != y->p)
		return x->p < y->p ? 1 : -1;
	return x->i - y->i; /* ties: lower id first, deterministic */
}

int32_t sample_logits(const float *logits, int v, double temperature, double top_p, int top_k,
		      double u, float *scratch)
{
	int best = 0;
	for (int i = 1; i < v; i++)
		if (logits[i] > logits[best])
			best = i;
	if (temperature <= 0)
		return best;
	struct pidx *pi = (struct pidx *)scratch;
	double sum = 0;
	for (int i = 0; i < v; i++) {
		pi[i].p = (float)exp((logits[i] - logits[best]) / temperature);
		pi[i].i = i;
		sum += pi[i].p;
	}
	qsort(pi, (size_t)v, sizeof *pi, by_prob_desc);
	/* Hugging Face's order: the top_k most likely tokens, then the
	 * smallest prefix of them whose share of their mass reaches top_p;
	 * sample in it. Tokens tied with the k-th stay, as Hugging Face's
	 * TopKLogitsWarper keeps every token not below the k-th (exactly k
	 * were kept, the lower ids among ties) */
	int most = top_k > 0 && top_k < v ? top_k : v;
	while (most < v && pi[most].p == pi[most - 1].p)
		most++;
	if (most < v) {
		sum = 0;
		for (int j = 0; j < most; j++)
			sum += pi[j].p;
	}
	double keep = 0;
	int n = 0;
	while (n < most && (n == 0 || keep < top_p * sum)) {
		keep += pi[n].p;
		n++;
	}
	double target = u * keep, acc = 0;
	for (int j = 0; j < n; j++) {
		acc += pi[j].p;
		if (acc > target)
			return pi[j].i;
	}
	return pi[n - 1].i;
}

/* The windowed recompute: the last min(n, T) tokens at positions 0..w-1
 * through the executor; the rest of the window is padding, which causal
 * attention keeps from influencing position w-1. */
static const float *window_logits(struct st_exec *ex, const int32_t *hist, int n, int32_t *tok,
				  int32_t *tgt)
{
	const int T = ex->t, w = n < T ? n : T;
	for (int i = 0; i < T; i++) {
		tok[i] = i < w ? hist[n - w + i] : 0;
		tgt[i] = -1;
	}
	long unused;
	exec_micro_step(ex, tok, tgt, 0.0f, &unused);
	return ex->acts.logits + (size_t)(w - 1) * ex->model->cfg.vocab_size;
}

int generate(struct st_session *s, const int32_t *ctx, int n_ctx, const struct st_gen_opts *g,
	     int (*emit)(int32_t tok, void *arg), void *arg)
{
	struct st_decoder *dec = s->dec_ready ? &s->dec : NULL;
	struct st_exec *ex = &s->exec;
	ST_CHECK(dec || (s->exec_ready && ex->b == 1), NULL,
		 "internal: generate needs a decoder or a batch-1 executor");
	ST_CHECK(n_ctx > 0, "give a prompt", "empty prompt");
	const int T = dec ? dec->t_max : ex->t, V = s->model.cfg.vocab_size;
	/* a full cache goes on from its last half (ceil(T/2) tokens re-read) */
	const int keep = T - T / 2;
	if (g->max_new <= 0)
		return ST_OK; /* nothing to sample: the prompt is not even read */
	int32_t *hist = st_malloc((size_t)(n_ctx + g->max_new) * sizeof *hist);
	/* the windowed recompute's micro-batch */
	const size_t win = dec ? 1 : (size_t)T;
	int32_t *tok = st_malloc(win * sizeof *tok), *tgt = st_malloc(win * sizeof *tgt);
	float *scratch = st_malloc((size_t)V * 2 * sizeof *scratch);
	if (!hist || !tok || !tgt || !scratch) {
		free(hist), free(tok), free(tgt), free(scratch);
		return ST_FAIL;
	}
	memcpy(hist, ctx, (size_t)n_ctx * sizeof *hist);
	int n = n_ctx, start = n > T ? n - T : 0; /* the cache holds hist[start..n) */
	struct st_rng r;
	rng_seed(&r, g->seed, 0x5a3e);
	const float *logits = NULL;
	if (dec) {
		decoder_reset(dec);
		logits = decoder_feed(dec, hist + start, n - start);
	}
	for (int k = 0; k < g->max_new; k++) {
		if (!dec)
			logits = window_logits(ex, hist, n, tok, tgt);
		if (!logits)
			break; /* the decoder said why */
		/* a failed transfer (said by the store) left stale weights in the
		 * scores: no token from them */
		if (store_ok(&s->store) != ST_OK) {
			free(hist), free(tok), free(tgt), free(scratch);
			return ST_FAIL;
		}
		if (st_first_nonfinite(logits, (size_t)V) >= 0) {
			ST_ERROR("sample an earlier checkpoint: this one's weights make the outputs "
				 "overflow",
				 "the model's next-token scores are not finite (at new token %d)", k + 1);
			free(hist), free(tok), free(tgt), free(scratch);
			return ST_FAIL;
		}
		int32_t next = sample_logits(logits, V, g->temperature, g->top_p, g->top_k, rng_uniform(&r),
					     scratch);
		int end = 0;
		for (int e = 0; g->stop_at_eos && e < g->n_eos; e++)
			end |= next == g->eos_ids[e];
		if (end)
			break; /* the end of the text: not itself printed */
		hist[n++] = next;
		if (emit(next, arg))
			break; /* nowhere to write the rest */
		if (!dec || k + 1 == g->max_new)
			continue;
		if (n - start > T) { /* the cache is full: re-read its last half */
			start = n - keep;
			decoder_reset(dec);
			logits = decoder_feed(dec, hist + start, n - start);
		} else {
			logits = decoder_feed(dec, &next, 1);
		}
	}
	free(hist), free(tok), free(tgt), free(scratch);
	return logits ? ST_OK : ST_FAIL;
}
