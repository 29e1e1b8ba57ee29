/* LLaMA unit passes: embed, decoder layer, head; forward and backward, written
 * once against the kernel table. Shapes: N = B*T rows, C model width, F the
 * MLP width, H/Hkv query/kv heads of size hd, V vocabulary. Weights are
 * (out,in) row-major as Hugging Face stores them, so y = x W^T. */
#include <stdlib.h>
#include <string.h>

#include "model/llama.h"
#include "util/check.h"

/* The linear layers' matmul: fp32, or with the inputs rounded to bf16 in
 * mm's workspace where the session chose --matmul-precision bf16 (mm NULL:
 * fp32, as the decoder's one-row passes always are). */
static void linear_matmul(const struct st_ops *ops, const struct st_mm *mm, float *c,
			  const float *a, const float *b, int m, int n, int k, int ta, int tb,
			  float beta, int lda, int ldb, int ldc)
{
	if (mm && mm->ws)
		ops->matmul_bf16(c, a, b, m, n, k, ta, tb, 1.0f, beta, lda, ldb, ldc, mm->ws,
				 mm->ws_bytes);
	else
		ops->matmul(c, a, b, m, n, k, ta, tb, 1.0f, beta, lda, ldb, ldc);
}

/* y (n,out) (= or += when accumulate) = x (n,in) @ w^T, w (out,in) */
static void linear_forward(const struct st_ops *ops, const struct st_mm *mm, float *y,
			   const float *x, const float *w, int n, int in, int out, int accumulate)
{
	linear_matmul(ops, mm, y, x, w, n, out, in, 0, 1, accumulate ? 1.0f : 0.0f, in, in, out);
}

/* dx (n,in) (= or += when accumulate) = dy (n,out) @ w (out,in);
 * dw (out,in) += dy^T (out,n) @ x (n,in) */
static void linear_backward(const struct st_ops *ops, const struct st_mm *mm, float *dx,
			    float *dw, const float *dy, const float *x, const float *w, int n,
			    int in, int out, int accumulate)
{
	linear_matmul(ops, mm, dx, dy, w, n, in, out, 0, 0, accumulate ? 1.0f : 0.0f, out, in, in);
	linear_matmul(ops, mm, dw, dy, x, out, in, n, 1, 0, 1.0f, out, in, in);
}

/* Activation buffers, in floats, each rounded up to 16 (64 bytes). */
#define R16(n) ((((size_t)(n)) + 15) & ~(size_t)15)

size_t acts_layer_floats(const struct st_model *m, int b, int t)
{
	const struct st_config *c = &m->cfg;
	const size_t N = (size_t)b * t, C = c->dim, F = c->ffn_dim;
	const size_t QD = (size_t)c->n_heads * c->head_dim, KD = (size_t)c->n_kv_heads * c->head_dim;
	return 4 * R16(N * C) + 2 * R16(N) + 2 * R16(N * QD) + 2 * R16(N * KD) +
	       R16((size_t)b * c->n_heads * t) + 3 * R16(N * F);
}

size_t acts_rest_floats(const struct st_model *m, int b, int t)
{
	const struct st_config *c = &m->cfg;
	const size_t N = (size_t)b * t, C = c->dim, F = c->ffn_dim, V = c->vocab_size;
	const size_t QD = (size_t)c->n_heads * c->head_dim, KD = (size_t)c->n_kv_heads * c->head_dim;
	return 5 * R16(N * C) + 2 * R16(N) + R16(N * V) + 2 * R16(N * QD) + 2 * R16(N * KD) +
	       3 * R16(N * F) + 2 * R16((size_t)t * c->head_dim / 2) +
	       (c->stable_embedding ? R16(N * C) + 2 * R16(N) : 0) +
	       R16(model_matmul_ws_bytes(m, N) / sizeof(float));
}

/* 64 MiB: a 7B layer's gate product at 2048 rows (2048 x 11008 x 4096)
 * then runs in 2 chunks of k, passing over its 90 MB output twice. */
#define MATMUL_WS_MAX ((size_t)64 << 20)

size_t model_matmul_ws_bytes(const struct st_model *m, size_t rows)
{
	if (!m->matmul_bf16)
		return 0;
	const struct st_config *c = &m->cfg;
	const size_t QD = (size_t)c->n_heads * c->head_dim, KD = (size_t)c->n_kv_heads * c->head_dim;
	const size_t C = c->dim, F = c->ffn_dim;
	const size_t shapes[][2] = {{C, QD}, {C, KD}, {QD, C}, {C, F}, {F, C}, {C, c->vocab_size}};
	size_t most = 0; /* elements of both operands of the largest product */
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
		const size_t in = shapes[i][0], out = shapes[i][1], w = in * out;
		const size_t fwd = rows * in + w, dx = rows * out + w, dw = out * rows + rows * in;
		most = fwd > most ? fwd : most;
		most = dx > most ? dx : most;
		most = dw > most ? dw : most;
	}
	/* two tiles, each rounded up to 64 bytes, and whole 64-byte lines, so
	 * that the activations' block holds every byte of it */
	size_t bytes = (most * 2 + 128 + 63) & ~(size_t)63;
	bytes = bytes < MATMUL_WS_MAX ? bytes : MATMUL_WS_MAX;
	return bytes > ST_MATMUL_BF16_MIN_WS ? bytes : ST_MATMUL_BF16_MIN_WS;
}

size_t acts_input_floats(const struct st_model *m, int b, int t)
{
	return R16((size_t)b * t * m->cfg.dim);
}

size_t acts_total_floats(const struct st_model *m, int b, int t, int n_recompute)
{
	const size_t L = (size_t)m->cfg.n_layers, r = (size_t)n_recompute;
	return (L - r) * acts_layer_floats(m, b, t) + r * acts_input_floats(m, b, t) +
	       (r ? acts_layer_floats(m, b, t) : 0) + acts_rest_floats(m, b, t);
}

int acts_bind(struct st_acts *a, const struct st_model *m, int b, int t, float *const *layer_blocks,
	      float *rest_block)
{
	return acts_bind_recompute(a, m, b, t, layer_blocks, rest_block, 0, NULL);
}

int acts_bind_recompute(struct st_acts *a, const struct st_model *m, int b, int t,
			float *const *layer_blocks, float *rest_block, int n_recompute, float *shared)
{
	unsigned char *mask = st_calloc((size_t)m->cfg.n_layers, 1);
	if (!mask)
		return ST_FAIL;
	for (int l = 0; l < n_recompute; l++)
		mask[l] = 1;
	int rc = acts_bind_mask(a, m, b, t, layer_blocks, rest_block, mask, shared);
	free(mask);
	return rc;
}

#define TAKE(n) (cur += R16(n), cur - R16(n))

void acts_point_layer(struct st_acts *a, const struct st_model *m, int l, float *block, float *shared)
{
	const struct st_config *c = &m->cfg;
	const size_t N = (size_t)a->b * a->t, C = c->dim, F = c->ffn_dim;
	const size_t QD = (size_t)c->n_heads * c->head_dim, KD = (size_t)c->n_kv_heads * c->head_dim;
	struct st_layer_acts *la = &a->layers[l];
	float *cur = block;
	la->x = TAKE(N * C);
	if (shared) /* the rest in the shared block, at the usual offsets */
		cur = shared + R16(N * C);
	la->xn1 = TAKE(N * C);
	la->rstd1 = TAKE(N);
	la->q = TAKE(N * QD);
	la->k = TAKE(N * KD);
	la->v = TAKE(N * KD);
	la->att = TAKE(N * QD);
	la->lse = TAKE((size_t)a->b * c->n_heads * a->t);
	la->xmid = TAKE(N * C);
	la->xn2 = TAKE(N * C);
	la->rstd2 = TAKE(N);
	la->gate = TAKE(N * F);
	la->up = TAKE(N * F);
	la->h = TAKE(N * F);
}

int acts_bind_mask(struct st_acts *a, const struct st_model *m, int b, int t,
		   float *const *layer_blocks, float *rest_block, const unsigned char *recomputed,
		   float *shared)
{
	const struct st_config *c = &m->cfg;
	memset(a, 0, sizeof *a);
	a->b = b;
	a->t = t;
	a->layers = st_calloc((size_t)c->n_layers, sizeof *a->layers);
	if (!a->layers)
		return ST_FAIL;
	const size_t N = (size_t)b * t, C = c->dim, F = c->ffn_dim, V = c->vocab_size;
	const size_t QD = (size_t)c->n_heads * c->head_dim, KD = (size_t)c->n_kv_heads * c->head_dim;
	for (int l = 0; l < c->n_layers; l++)
		if (layer_blocks[l])
			acts_point_layer(a, m, l, layer_blocks[l], recomputed && recomputed[l] ? shared : NULL);
	float *cur = rest_block;
	a->x_final = TAKE(N * C);
	a->xf = TAKE(N * C);
	a->rstd_f = TAKE(N);
	a->logits = TAKE(N * V);
	a->losses = TAKE(N);
	a->dx = TAKE(N * C);
	a->dtmp = TAKE(N * C);
	a->dxn = TAKE(N * C);
	a->dq = TAKE(N * QD);
	a->dk = TAKE(N * KD);
	a->dv = TAKE(N * KD);
	a->datt = TAKE(N * QD);
	a->dh = TAKE(N * F);
	a->dgate = TAKE(N * F);
	a->dup = TAKE(N * F);
	a->rope_cos = TAKE((size_t)t * c->head_dim / 2);
	a->rope_sin = TAKE((size_t)t * c->head_dim / 2);
	if (c->stable_embedding) {
		a->emb = TAKE(N * C);
		a->emb_mean = TAKE(N);
		a->emb_rstd = TAKE(N);
	}
	a->mm.ws_bytes = model_matmul_ws_bytes(m, N);
	a->mm.ws = a->mm.ws_bytes ? TAKE(a->mm.ws_bytes / sizeof(float)) : NULL;
	rope_table(a->rope_cos, a->rope_sin, t, c->head_dim, c->rope_theta);
	return ST_OK;
}
#undef TAKE

void acts_unbind(struct st_acts *a)
{
	free(a->layers);
	memset(a, 0, sizeof *a);
}

/* pointer to parameter i of the unit's slab */
static const float *P(const struct st_model *m, int unit, int i, const float *w)
{
	return w + m->params[m->units[unit].first_param + i].offset;
}
static float *PG(const struct st_model *m, int unit, int i, float *g)
{
	return g + m->params[m->units[unit].first_param + i].offset;
}

void llama_embed_forward(const struct st_ops *ops, const struct st_model *m, struct st_acts *a,
			 const float *w, const int32_t *tokens)
{
	const int N = a->b * a->t, C = m->cfg.dim;
	float *x0 = a->layers[0].x;
	if (!m->cfg.stable_embedding) {
		ops->embedding_forward(x0, tokens, w, N, C);
		return;
	}
	/* stable embedding: x0 = LayerNorm(wte[tokens]) */
	ops->embedding_forward(a->emb, tokens, w, N, C);
	ops->layernorm_forward(x0, a->emb_mean, a->emb_rstd, a->emb, P(m, 0, 1, w), P(m, 0, 2, w), N,
			       C, ST_EMBED_NORM_EPS);
}

void llama_embed_backward(const struct st_ops *ops, const struct st_model *m,
			  struct st_acts *a, const float *w, float *g, const int32_t *tokens)
{
	const int N = a->b * a->t, C = m->cfg.dim;
	const float *dx0 = a->dx;
	if (m->cfg.stable_embedding) {
		ops->layernorm_backward(a->dtmp, PG(m, 0, 1, g), PG(m, 0, 2, g), a->dx, a->emb,
					P(m, 0, 1, w), a->emb_mean, a->emb_rstd, N, C);
		dx0 = a->dtmp;
	}
	ops->embedding_backward(g, dx0, tokens, N, C, m->cfg.vocab_size);
}

/* The kernels other than matmuls and attention in the layer's forward and
 * backward are counted by model_layer_ew_bytes and timed in this order by
 * profile.c's run_ew (the planner's elementwise rate): change them
 * together. */
void llama_layer_forward(const struct st_ops *ops, const struct st_model *m, struct st_acts *a,
			 int l, const float *w)
{
	const struct st_config *c = &m->cfg;
	const int u = 1 + l, B = a->b, T = a->t, N = B * T, C = c->dim, F = c->ffn_dim;
	const int H = c->n_heads, KH = c->n_kv_heads, hd = c->head_dim;
	struct st_layer_acts *la = &a->layers[l];
	float *xout = l + 1 < c->n_layers ? a->layers[l + 1].x : a->x_final;

	ops->rmsnorm_forward(la->xn1, la->rstd1, la->x, P(m, u, LP_ATTN_NORM, w), N, C,
			     c->norm_eps);
	linear_forward(ops, &a->mm, la->q, la->xn1, P(m, u, LP_WQ, w), N, C, H * hd, 0);
	linear_forward(ops, &a->mm, la->k, la->xn1, P(m, u, LP_WK, w), N, C, KH * hd, 0);
	linear_forward(ops, &a->mm, la->v, la->xn1, P(m, u, LP_WV, w), N, C, KH * hd, 0);
	ops->rope(la->q, a->rope_cos, a->rope_sin, B, T, H, hd, +1);
	ops->rope(la->k, a->rope_cos, a->rope_sin, B, T, KH, hd, +1);
	ops->attention_forward(la->att, la->lse, la->q, la->k, la->v, B, T, H, KH, hd);
	/* xmid = x + att @ Wo^T */
	memcpy(la->xmid, la->x, (size_t)N * C * sizeof(float));
	linear_forward(ops, &a->mm, la->xmid, la->att, P(m, u, LP_WO, w), N, H * hd, C, 1);

	ops->rmsnorm_forward(la->xn2, la->rstd2, la->xmid, P(m, u, LP_MLP_NORM, w), N, C,
			     c->norm_eps);
	linear_forward(ops, &a->mm, la->gate, la->xn2, P(m, u, LP_WGATE, w), N, C, F, 0);
	linear_forward(ops, &a->mm, la->up, la->xn2, P(m, u, LP_WUP, w), N, C, F, 0);
	ops->swiglu_forward(la->h, la->gate, la->up, (size_t)N * F);
	/* xout = xmid + h @ Wdown^T */
	memcpy(xout, la->xmid, (size_t)N * C * sizeof(float));
	linear_forward(ops, &a->mm, xout, la->h, P(m, u, LP_WDOWN, w), N, F, C, 1);
}

void llama_layer_backward(const struct st_ops *ops, const struct st_model *m, struct st_acts *a,
			  int l, const float *w, float *g)
{
	const struct st_config *c = &m->cfg;
	const int u = 1 + l, B = a->b, T = a->t, N = B * T, C = c->dim, F = c->ffn_dim;
	const int H = c->n_heads, KH = c->n_kv_heads, hd = c->head_dim;
	struct st_layer_acts *la = &a->layers[l];
	/* a->dx holds dL/d(xout) on entry and dL/d(x) on return. */

	/* MLP: xout = xmid + down(swiglu(gate(xn2), up(xn2))) */
	linear_backward(ops, &a->mm, a->dh, PG(m, u, LP_WDOWN, g), a->dx, la->h,
			P(m, u, LP_WDOWN, w), N, F, C, 0);
	ops->swiglu_backward(a->dgate, a->dup, a->dh, la->gate, la->up, (size_t)N * F);
	linear_backward(ops, &a->mm, a->dxn, PG(m, u, LP_WGATE, g), a->dgate, la->xn2,
			P(m, u, LP_WGATE, w), N, C, F, 0);
	linear_backward(ops, &a->mm, a->dxn, PG(m, u, LP_WUP, g), a->dup, la->xn2,
			P(m, u, LP_WUP, w), N, C, F, 1);
	ops->rmsnorm_backward(a->dtmp, PG(m, u, LP_MLP_NORM, g), a->dxn, la->xmid,
			      P(m, u, LP_MLP_NORM, w), la->rstd2, N, C);
	ops->add_inplace(a->dx, a->dtmp, (size_t)N * C); /* dx = dL/d(xmid) */

	/* attention: xmid = x + o(attn(rope(q(xn1)), rope(k(xn1)), v(xn1))) */
	linear_backward(ops, &a->mm, a->datt, PG(m, u, LP_WO, g), a->dx, la->att, P(m, u, LP_WO, w),
			N, H * hd, C, 0);
	ops->attention_backward(a->dq, a->dk, a->dv, a->datt, la->q, la->k, la->v, la->att, la->lse,
				B, T, H, KH, hd);
	ops->rope(a->dq, a->rope_cos, a->rope_sin, B, T, H, hd, -1);
	ops->rope(a->dk, a->rope_cos, a->rope_sin, B, T, KH, hd, -1);
	linear_backward(ops, &a->mm, a->dxn, PG(m, u, LP_WQ, g), a->dq, la->xn1, P(m, u, LP_WQ, w),
			N, C, H * hd, 0);
	linear_backward(ops, &a->mm, a->dxn, PG(m, u, LP_WK, g), a->dk, la->xn1, P(m, u, LP_WK, w),
			N, C, KH * hd, 1);
	linear_backward(ops, &a->mm, a->dxn, PG(m, u, LP_WV, g), a->dv, la->xn1, P(m, u, LP_WV, w),
			N, C, KH * hd, 1);
	ops->rmsnorm_backward(a->dtmp, PG(m, u, LP_ATTN_NORM, g), a->dxn, la->x,
			      P(m, u, LP_ATTN_NORM, w), la->rstd1, N, C);
	ops->add_inplace(a->dx, a->dtmp, (size_t)N * C); /* dx = dL/d(x) */
}

/* The output projection: lm_head, or the embedding when tied. */
static const float *head_proj(const struct st_model *m, const float *w, const float *wte)
{
	return m->cfg.tied ? wte : P(m, model_head_unit(m), 1, w);
}

double llama_head_forward(const struct st_ops *ops, const struct st_model *m, struct st_acts *a,
			  const float *w, const float *wte, const int32_t *targets,
			  float dlogits_scale)
{
	const struct st_config *c = &m->cfg;
	const int N = a->b * a->t, C = c->dim, V = c->vocab_size, u = model_head_unit(m);
	ops->rmsnorm_forward(a->xf, a->rstd_f, a->x_final, P(m, u, 0, w), N, C, c->norm_eps);
	linear_forward(ops, &a->mm, a->logits, a->xf, head_proj(m, w, wte), N, C, V, 0);
	ops->xent_forward_backward(dlogits_scale > 0 ? a->logits : NULL, a->losses, a->logits,
				   targets, N, V, dlogits_scale);
	double sum = 0; /* fixed order: reproducible */
	for (int i = 0; i < N; i++)
		sum += a->losses[i];
	return sum;
}

void llama_head_backward(const struct st_ops *ops, const struct st_model *m, struct st_acts *a,
			 const float *w, const float *wte, float *g, float *dwte)
{
	const struct st_config *c = &m->cfg;
	const int N = a->b * a->t, C = c->dim, V = c->vocab_size, u = model_head_unit(m);
	float *dproj = c->tied ? dwte : PG(m, u, 1, g);
	linear_backward(ops, &a->mm, a->dxn, dproj, a->logits, a->xf, head_proj(m, w, wte), N, C, V,
			0);
	ops->rmsnorm_backward(a->dx, PG(m, u, 0, g), a->dxn, a->x_final, P(m, u, 0, w), a->rstd_f,
			      N, C);
}

size_t decode_cache_floats(const struct st_model *m, int t_max)
{
	return 2 * R16((size_t)t_max * m->cfg.n_kv_heads * m->cfg.head_dim);
}

size_t decode_rest_floats(const struct st_model *m, int rows, int t_max)
{
	const struct st_config *c = &m->cfg;
	const size_t N = (size_t)rows, C = c->dim, F = c->ffn_dim;
	const size_t QD = (size_t)c->n_heads * c->head_dim;
	return R16((size_t)t_max * C) + R16(N * C) + R16(N) + 2 * R16(N * QD) + 3 * R16(N * F) +
	       R16(C) + R16(1) + R16(c->vocab_size) + 2 * R16((size_t)t_max * c->head_dim / 2) +
	       (c->stable_embedding ? R16(N * C) + 2 * R16(N) : 0);
}

#define TAKE(n) (cur += R16(n), cur - R16(n))
void decode_bind(struct st_decode_acts *d, const struct st_model *m, int rows, int t_max,
		 float *block)
{
	const struct st_config *c = &m->cfg;
	const size_t N = (size_t)rows, C = c->dim, F = c->ffn_dim;
	const size_t QD = (size_t)c->n_heads * c->head_dim;
	float *cur = block;
	memset(d, 0, sizeof *d);
	d->rows = rows;
	d->t_max = t_max;
	d->x = TAKE((size_t)t_max * C);
	d->xn = TAKE(N * C);
	d->rstd = TAKE(N);
	d->q = TAKE(N * QD);
	d->att = TAKE(N * QD);
	d->gate = TAKE(N * F);
	d->up = TAKE(N * F);
	d->h = TAKE(N * F);
	d->xf = TAKE(C);
	d->rstd_f = TAKE(1);
	d->logits = TAKE(c->vocab_size);
	d->rope_cos = TAKE((size_t)t_max * c->head_dim / 2);
	d->rope_sin = TAKE((size_t)t_max * c->head_dim / 2);
	if (c->stable_embedding) {
		d->emb = TAKE(N * C);
		d->emb_mean = TAKE(N);
		d->emb_rstd = TAKE(N);
	}
	rope_table(d->rope_cos, d->rope_sin, t_max, c->head_dim, c->rope_theta);
}
#undef TAKE

void llama_embed_decode(const struct st_ops *ops, const struct st_model *m,
			struct st_decode_acts *d, const float *w, const int32_t *tokens, int n,
			float *x)
{
	const int C = m->cfg.dim;
	if (!m->cfg.stable_embedding) {
		ops->embedding_forward(x, tokens, w, n, C);
		return;
	}
	ops->embedding_forward(d->emb, tokens, w, n, C);
	ops->layernorm_forward(x, d->emb_mean, d->emb_rstd, d->emb, P(m, 0, 1, w), P(m, 0, 2, w), n, C,
			       ST_EMBED_NORM_EPS);
}

void llama_layer_decode(const struct st_ops *ops, const struct st_model *m,
			struct st_decode_acts *d, int l, const float *w, float *cache, int pos,
			int n, float *x)
{
	const struct st_config *c = &m->cfg;
	const int u = 1 + l, C = c->dim, F = c->ffn_dim;
	const int H = c->n_heads, KH = c->n_kv_heads, hd = c->head_dim;
	const size_t KD = (size_t)KH * hd;
	float *kc = cache, *vc = cache + decode_cache_floats(m, d->t_max) / 2;
	float *k = kc + (size_t)pos * KD, *v = vc + (size_t)pos * KD;
	const float *cos_tab = d->rope_cos + (size_t)pos * hd / 2;
	const float *sin_tab = d->rope_sin + (size_t)pos * hd / 2;

	ops->rmsnorm_forward(d->xn, d->rstd, x, P(m, u, LP_ATTN_NORM, w), n, C, c->norm_eps);
	linear_forward(ops, NULL, d->q, d->xn, P(m, u, LP_WQ, w), n, C, H * hd, 0);
	linear_forward(ops, NULL, k, d->xn, P(m, u, LP_WK, w), n, C, KH * hd, 0);
	linear_forward(ops, NULL, v, d->xn, P(m, u, LP_WV, w), n, C, KH * hd, 0);
	ops->rope(d->q, cos_tab, sin_tab, 1, n, H, hd, +1);
	ops->rope(k, cos_tab, sin_tab, 1, n, KH, hd, +1);
	ops->attention_cached(d->att, d->q, kc, vc, n, pos, H, KH, hd);
	/* x += att @ Wo^T, then x += h @ Wdown^T: the forward's residual adds */
	linear_forward(ops, NULL, x, d->att, P(m, u, LP_WO, w), n, H * hd, C, 1);
	ops->rmsnorm_forward(d->xn, d->rstd, x, P(m, u, LP_MLP_NORM, w), n, C, c->norm_eps);
	linear_forward(ops, NULL, d->gate, d->xn, P(m, u, LP_WGATE, w), n, C, F, 0);
	linear_forward(ops, NULL, d->up, d->xn, P(m, u, LP_WUP, w), n, C, F, 0);
	ops->swiglu_forward(d->h, d->gate, d->up, (size_t)n * F);
	linear_forward(ops, NULL, x, d->h, P(m, u, LP_WDOWN, w), n, F, C, 1);
}

void llama_head_decode(const struct st_ops *ops, const struct st_model *m,
		       struct st_decode_acts *d, const float *w, const float *wte,
		       const float *x_last)
{
	const struct st_config *c = &m->cfg;
	const int C = c->dim, u = model_head_unit(m);
	ops->rmsnorm_forward(d->xf, d->rstd_f, x_last, P(m, u, 0, w), 1, C, c->norm_eps);
	linear_forward(ops, NULL, d->logits, d->xf, head_proj(m, w, wte), 1, C, c->vocab_size, 0);
}
