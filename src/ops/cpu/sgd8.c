/* SGD with 8-bit block-wise momentum (Dettmers et al., arXiv 2110.02861),
 * fused per quantization block: dequantize the momentum, update it and p in
 * fp32, requantize with the new block absmax (signed dynamic map). Formulas
 * and order are ops.h's; structure, variants and determinism as adam8.c. */
#pragma GCC optimize("fp-contract=off")
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/quant8.h"

/* mom = (first ? 0 : momentum * mom) + (g * grad_scale + wd * p);  p -= lr * mom.
 * The first step never reads mom (its codes are uninitialized). */
static void sgd_update(float *restrict p, float *restrict mom, const float *restrict g, size_t n,
		       const struct st_sgd8_args *a)
{
	const float lr = a->lr, mu = a->momentum, wd = a->weight_decay, gs = a->grad_scale;
	if (a->first_step)
		for (size_t i = 0; i < n; i++) {
			float gi = g[i] * gs + wd * p[i];
			mom[i] = gi;
			p[i] = p[i] - lr * gi;
		}
	else
		for (size_t i = 0; i < n; i++) {
			float mi = mu * mom[i] + (g[i] * gs + wd * p[i]);
			mom[i] = mi;
			p[i] = p[i] - lr * mi;
		}
}

void cpu_sgd8_step_simd(enum q8_simd s, float *p, uint8_t *mom_codes, float *mom_absmax,
			const float *g, size_t n, const struct st_sgd8_args *a)
{
	const float lr = a->lr, wd = a->weight_decay, gs = a->grad_scale;
	if (!mom_codes) { /* no state: plain SGD */
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++)
			p[i] = p[i] - lr * (g[i] * gs + wd * p[i]);
		return;
	}
	const struct q8_kernels *q = q8_kernels_get(s);
	const size_t block = (size_t)a->block, nblocks = (n + block - 1) / block;
	const struct q8_lut *lut = q8_lut_get(a->map);
#pragma omp parallel if (n >= CPU_PAR_MIN && nblocks > 1)
	{
		float mb[Q8_CHUNK], pb[Q8_CHUNK];
#pragma omp for schedule(static)
		for (size_t b = 0; b < nblocks; b++) {
			const size_t b0 = b * block, len = n - b0 < block ? n - b0 : block;
			const float old = a->first_step ? 0.0f : mom_absmax[b];
			float amax = 0.0f;
			/* Blocks over Q8_CHUNK: a first pass for the absmax only, on a
			 * copy of p (the update is recomputed with the same bits). */
			if (len > Q8_CHUNK)
				for (size_t c0 = 0; c0 < len; c0 += Q8_CHUNK) {
					size_t cl = len - c0 < Q8_CHUNK ? len - c0 : Q8_CHUNK;
					if (!a->first_step)
						q->decode(mb, mom_codes + b0 + c0, cl, old, lut);
					for (size_t i = 0; i < cl; i++)
						pb[i] = p[b0 + c0 + i];
					sgd_update(pb, mb, g + b0 + c0, cl, a);
					float x = q->absmax(mb, cl);
					amax = x > amax ? x : amax;
				}
			for (size_t c0 = 0; c0 < len; c0 += Q8_CHUNK) {
				size_t cl = len - c0 < Q8_CHUNK ? len - c0 : Q8_CHUNK;
				q8_prefetch_block(p, g, mom_codes, NULL, b0 + c0, cl, n);
				if (!a->first_step)
					q->decode(mb, mom_codes + b0 + c0, cl, old, lut);
				sgd_update(p + b0 + c0, mb, g + b0 + c0, cl, a);
				if (len <= Q8_CHUNK)
					amax = q->absmax(mb, cl);
				q->encode(mom_codes + b0 + c0, mb, cl, ops_q8_scale(amax), lut);
			}
			mom_absmax[b] = amax;
		}
	}
}

void cpu_sgd8_step(float *p, uint8_t *mom_codes, float *mom_absmax, const float *g, size_t n,
		   const struct st_sgd8_args *a)
{
	cpu_sgd8_step_simd(q8_simd_pick(), p, mom_codes, mom_absmax, g, n, a);
}
