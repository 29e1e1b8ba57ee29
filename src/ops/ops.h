/* The kernel table: every numerical operation the model and the optimizers
 * need, as forward/backward pairs with one signature for every backend.
 *
 * Model and trainer code call ops only through a `struct st_ops` table, so the
 * CPU backend (ops/cpu) and the CUDA backend (ops/cuda) are interchangeable.
 * Conventions (kernel signatures):
 *   - outputs first, then inputs, then sizes; the shape of every pointer is
 *     in a comment on the declaration, row-major, last index fastest;
 *   - "N" is the number of token rows (B*T), "C" the model width;
 *   - pointers are backend memory (host RAM on CPU, device memory on CUDA)
 *     holding the backend's compute dtype: fp32 on the CPU backend;
 *   - backward ops ACCUMULATE (+=) into parameter gradients (dw) so gradient
 *     accumulation across micro-batches needs no extra pass, and OVERWRITE
 *     (=) input gradients (dx) unless the comment says otherwise;
 *   - every op is deterministic: the same inputs and thread count give the
 *     same bits (no atomics, fixed reduction order), which resume and
 *     offload bit-identity depend on.
 */
#ifndef ST_OPS_H
#define ST_OPS_H

#include <float.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

struct st_adamw_args {
	float lr, beta1, beta2, eps, weight_decay;
	float grad_scale; /* applied to g before use (global-norm clipping) */
	float bc1, bc2;   /* bias corrections 1 - beta^t */
};

struct st_sgd_args {
	float lr, momentum, weight_decay, grad_scale;
	int first_step; /* momentum buffer is initialized to g' on the first step */
};

/* 8-bit optimizers (Dettmers et al., arXiv 2110.02861): state as uint8 codes
 * into a 256-entry map (optim/quantmap.h) with one fp32 absmax per block of
 * `block` elements (the last block may be partial). */
struct st_adamw8_args {
	float lr, beta1, beta2, eps, weight_decay;
	float grad_scale; /* applied to g before use (global-norm clipping) */
	float bc1, bc2;   /* bias corrections 1 - beta^t */
	int block;        /* elements per absmax block (256 in bitsandbytes) */
	const float *map_m /* signed dynamic map, 256 */, *map_v /* unsigned, 256 */;
};

struct st_sgd8_args {
	float lr, momentum, weight_decay, grad_scale;
	int first_step; /* momentum = g' on the first step; old codes are not read */
	int block;
	const float *map; /* signed dynamic map, 256 */
};

/* The smallest workspace matmul_bf16 takes: 64 KiB, tiles of 48 x 256. */
#define ST_MATMUL_BF16_MIN_WS (64 << 10)

struct st_ops {
	const char *name;    /* "cpu", "cuda" */
	const char *matmul_lib; /* which library/kernel runs matmuls, for reports */

	/* c = alpha * op(a) @ op(b) + beta * c, op(x) = x or x^T (ta/tb nonzero).
	 * c (m,n) with row stride ldc; op(a) is (m,k), op(b) is (k,n); lda/ldb
	 * are the row strides of a and b as stored. */
	void (*matmul)(float *c, const float *a, const float *b, int m, int n, int k, int ta,
		       int tb, float alpha, float beta, int lda, int ldb, int ldc);
	/* The same product with a and b rounded to bf16 (to nearest, ties to
	 * even) and the products summed in fp32: the linear layers' matmul under
	 * --matmul-precision bf16. ws: 64-byte-aligned scratch of ws_bytes >=
	 * ST_MATMUL_BF16_MIN_WS for the rounded operands; a product whose
	 * operands do not fit in it is computed in tiles (k in chunks, their
	 * sums added onto c). NULL where the backend has none. One caller at a
	 * time (the CPU backend's runs on one oneDNN stream): the compute
	 * thread's linear layers, or a measurement before training. */
	void (*matmul_bf16)(float *c, const float *a, const float *b, int m, int n, int k,
			    int ta, int tb, float alpha, float beta, int lda, int ldb, int ldc,
			    void *ws, size_t ws_bytes);
	/* 1 where matmul_bf16 runs on bf16 hardware here (AMX, AVX512-BF16);
	 * 0 where it is emulated (slower than fp32) or missing. *impl names the
	 * kernel ("none" where there is none). */
	int (*matmul_bf16_native)(const char **impl);

	/* out[i,:] = wte[tokens[i],:] */
	void (*embedding_forward)(float *out /* (N,C) */, const int32_t *tokens /* (N) */,
				  const float *wte /* (V,C) */, int n, int c);
	/* dwte[tokens[i],:] += dout[i,:], summed in row order i = 0..N-1 */
	void (*embedding_backward)(float *dwte /* (V,C) */, const float *dout /* (N,C) */,
				   const int32_t *tokens /* (N) */, int n, int c, int v);

	/* out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) (fp32 accumulation) */
	void (*rmsnorm_forward)(float *out /* (N,C) */, float *rstd /* (N) */,
				const float *x /* (N,C) */, const float *w /* (C) */, int n, int c,
				float eps);
	/* dx (=), dw (+=) */
	void (*rmsnorm_backward)(float *dx /* (N,C) */, float *dw /* (C) */,
				 const float *dout /* (N,C) */, const float *x /* (N,C) */,
				 const float *w /* (C) */, const float *rstd /* (N) */, int n,
				 int c);

	/* LayerNorm: out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps),
	 * biased variance over the row (fp32 accumulation). */
	void (*layernorm_forward)(float *out /* (N,C) */, float *mean /* (N) */,
				  float *rstd /* (N) */, const float *x /* (N,C) */,
				  const float *w /* (C) */, const float *b /* (C) */, int n, int c,
				  float eps);
	/* dx (=), dw and db (+=) */
	void (*layernorm_backward)(float *dx /* (N,C) */, float *dw /* (C) */, float *db /* (C) */,
				   const float *dout /* (N,C) */, const float *x /* (N,C) */,
				   const float *w /* (C) */, const float *mean /* (N) */,
				   const float *rstd /* (N) */, int n, int c);

	/* In-place rotary embedding, Hugging Face rotate_half convention: within
	 * each head, element i pairs with i + hd/2, angle = pos * theta^(-2i/hd),
	 * pos = t (row index within its sequence of length T).
	 * x (B,T,H,hd); cos/sin (T, hd/2) from rope_table(). dir = +1 forward,
	 * -1 backward (rotation by the opposite angle is the exact transpose). */
	void (*rope)(float *x /* (B,T,H,hd) */, const float *cos_tab /* (T,hd/2) */,
		     const float *sin_tab /* (T,hd/2) */, int b, int t, int h, int hd, int dir);

	/* Causal self-attention with grouped-query heads: query head j reads kv
	 * head j / (H / Hkv). scale = 1/sqrt(hd). Saves only the log-sum-exp of
	 * each score row (FlashAttention style) so backward recomputes P.
	 * q (B,T,H,hd), k,v (B,T,Hkv,hd), out (B,T,H,hd), lse (B,H,T). */
	void (*attention_forward)(float *out, float *lse, const float *q, const float *k,
				  const float *v, int b, int t, int h, int hkv, int hd);
	/* dq, dk, dv all overwritten (=). out and lse are the forward's. */
	void (*attention_backward)(float *dq, float *dk, float *dv, const float *dout,
				   const float *q, const float *k, const float *v,
				   const float *out, const float *lse, int b, int t, int h,
				   int hkv, int hd);

	/* The same attention for a decoder with a key/value cache (one
	 * sequence): n query rows at positions p0 .. p0+n-1 against the cache's
	 * first p0 + n rows, row i seeing keys 0 .. p0+i. q, out (n,H,hd);
	 * k, v (p0+n, Hkv,hd), k after RoPE. No lse: nothing runs backward. */
	void (*attention_cached)(float *out, const float *q, const float *k, const float *v, int n,
				 int p0, int h, int hkv, int hd);

	/* out = silu(gate) * up, silu(x) = x / (1 + exp(-x)) */
	void (*swiglu_forward)(float *out /* (N,F) */, const float *gate /* (N,F) */,
			       const float *up /* (N,F) */, size_t n);
	/* dgate, dup overwritten */
	void (*swiglu_backward)(float *dgate, float *dup, const float *dout,
				const float *gate, const float *up, size_t n);

	/* y += x (residual stream and gradient accumulation) */
	void (*add_inplace)(float *y, const float *x, size_t n);

	/* Fused softmax + cross-entropy. For each row i with targets[i] >= 0:
	 * losses[i] = logsumexp(logits[i,:]) - logits[i, targets[i]], and, when
	 * dlogits is not NULL, dlogits[i,:] = (softmax(logits[i,:]) - onehot) * scale.
	 * Rows with targets[i] < 0 are ignored: loss 0, gradient 0.
	 * dlogits may alias logits (the logits are not needed afterwards). */
	void (*xent_forward_backward)(float *dlogits /* (N,V) or NULL */,
				      float *losses /* (N) */, const float *logits /* (N,V) */,
				      const int32_t *targets /* (N) */, int n, int v,
				      float scale);

	/* sum of squares of x, accumulated in double in a fixed order */
	double (*sumsq)(const float *x, size_t n);
	/* x *= s */
	void (*scale)(float *x, float s, size_t n);

	/* Optimizer kernels on flat arrays of one unit (see optim/). */

	/* AdamW (Loshchilov & Hutter), decoupled weight decay, in PyTorch's order
	 * (same math as torch.optim.AdamW; the last bits of rounding may differ):
	 *   g' = g * grad_scale
	 *   p -= lr * wd * p                       (if wd != 0)
	 *   m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
	 *   p -= lr * (m / bc1) / (sqrt(v / bc2) + eps)
	 * with bc1 = 1 - b1^t, bc2 = 1 - b2^t given by the caller. */
	void (*adamw_step)(float *p, float *m, float *v, const float *g, size_t n,
			   const struct st_adamw_args *a);
	/* SGD with optional momentum (mom NULL when momentum == 0):
	 *   g' = g * grad_scale + wd * p;  mom = momentum * mom + g' (mom = g' at t=1);
	 *   p -= lr * (momentum ? mom : g') */
	void (*sgd_step)(float *p, float *mom, const float *g, size_t n,
			 const struct st_sgd_args *a);

	/* 8-bit AdamW, fused, bitsandbytes' blockwise order. Each fp32 operation
	 * below rounds once, in this order, with no FMA contraction and IEEE
	 * division and sqrt, so every backend gives the same bits. Per call:
	 *   c2 = sqrt(bc2);  step = lr * c2 / bc1;  eps_hat = eps * c2;
	 *   decay = 1 - lr * wd
	 * per block b (elements i of the block):
	 *   g' = g * grad_scale
	 *   m = map_m[m_codes] * m_absmax[b];  v = map_v[v_codes] * v_absmax[b]
	 *   m = b1 m + (1-b1) g';  v = b2 v + (1-b2) (g' g')
	 *   m_absmax[b] = max |m|, v_absmax[b] = max |v| over the block (new)
	 *   p = p - step * (m / (sqrt(v) + eps_hat))     [= -lr m^/(sqrt(v^)+eps)]
	 *   p = p * decay                                 (decoupled decay, after)
	 *   m_codes = code(m * ops_q8_scale(m_absmax[b])), v_codes likewise
	 * where code() is quant_nearest (nearest entry, exact midpoint -> lower
	 * index, NaN -> the code of 0) and ops_q8_scale (below) is the rounded
	 * reciprocal 1 / absmax (1 for a zero absmax), as in bitsandbytes.
	 * State with all absmax 0 (e.g. all bytes zero) is m = v = 0. Non-finite
	 * gradients poison the block's state: skip such steps (bitsandbytes
	 * zeroes those elements instead). */
	void (*adamw8_step)(float *p /* (n) */, uint8_t *m_codes /* (n) */,
			    uint8_t *v_codes /* (n) */, float *m_absmax /* (ceil(n/block)) */,
			    float *v_absmax /* (ceil(n/block)) */, const float *g /* (n) */,
			    size_t n, const struct st_adamw8_args *a);
	/* SGD with 8-bit block-wise momentum (signed map), same rounding rules:
	 *   g' = g * grad_scale + wd * p                  (L2, as sgd_step)
	 *   mom = map[mom_codes] * mom_absmax[b]          (not on the first step)
	 *   mom = momentum * mom + g'   (mom = g' on the first step)
	 *   p = p - lr * mom
	 *   mom_absmax[b] = max |mom|;  mom_codes = code(mom * ops_q8_scale(mom_absmax[b]))
	 * mom_codes NULL: no state, p = p - lr * g'. */
	void (*sgd8_step)(float *p /* (n) */, uint8_t *mom_codes /* (n) */,
			  float *mom_absmax /* (ceil(n/block)) */, const float *g /* (n) */,
			  size_t n, const struct st_sgd8_args *a);
};

/* The CPU backend's table (always available). */
const struct st_ops *ops_cpu(void);

/* The factor an 8-bit block's values are multiplied by before their codes are
 * looked up (optim/quantmap.c's quant_nearest): the fp32 reciprocal
 * 1 / absmax, as bitsandbytes does. Every encoder (CPU, CUDA, the scalar
 * reference) takes x * ops_q8_scale(absmax), one rounded product per element,
 * not the quotient x / absmax: a product costs a fraction of a division, and
 * the divider bounds the CPU's 8-bit step (bench/q8_stages). absmax 0 gives 1
 * (an all-zero block keeps the code of 0). An absmax of at most 2^-128, whose
 * reciprocal overflows, gives FLT_MAX: every |x| <= absmax still maps into
 * [-1, 1], but only onto entries up to absmax * FLT_MAX (0.034 for 1e-40),
 * so such a block decodes smaller than it was. Moments that small are far
 * below the default eps's share of the update. */
static inline float ops_q8_scale(float absmax)
{
	if (!(absmax > 0.0f))
		return 1.0f;
	const float r = 1.0f / absmax;
	return r < FLT_MAX ? r : FLT_MAX;
}

/* Whether ops multiplies bf16 on a matrix unit here (matmul_bf16_native,
 * for a table that may lack the entries); *impl names the kernel, "none"
 * where there is none. */
static inline int ops_bf16_native(const struct st_ops *ops, const char **impl)
{
	*impl = "none";
	return ops && ops->matmul_bf16 && ops->matmul_bf16_native && ops->matmul_bf16_native(impl);
}

/* The kernel impl (ops_bf16_native's) is AMX's, where bf16 pays off: with
 * AVX512-BF16 dot products alone it ran at 0.55x the fp32 matmul on a Xeon
 * with AMX hidden (README, bf16 matmuls). */
static inline int ops_bf16_amx(const char *impl)
{
	return impl && strstr(impl, "amx") != NULL;
}
/* The CUDA backend's table, or NULL when built without CUDA or no GPU found. */
const struct st_ops *ops_cuda(void);

/* Fill the RoPE tables: cos_tab[t][i] = cos(t * theta^(-2i/hd)), computed in
 * double then rounded, so every backend sees the same angles. */
void rope_table(float *cos_tab /* (T,hd/2) */, float *sin_tab /* (T,hd/2) */, int t, int hd,
		double theta);

#ifdef __cplusplus
}
#endif

#endif
