/* AdamW on one flat unit, in exactly the order ops.h writes it (PyTorch's):
 * scale the gradient, decoupled decay, moment updates, bias-corrected step.
 * Elementwise, so any split across threads gives the same bits.
 *
 * The work goes in blocks of ADAMW_BLOCK elements, three loops per block,
 * because sqrtf keeps gcc from vectorizing any loop it appears in: with
 * errno semantics (no -ffast-math) it compiles to sqrtss plus a guarded call
 * for negative inputs. Isolating it leaves the two loops with the divisions
 * vectorized and the sqrt loop a tight scalar one: 3.3x faster than the one
 * fused loop on the dev box, with the same per-element operations (so the
 * same bits).
 *
 * No FMA contraction (the pragma): each operation rounds once, as written,
 * so the CUDA kernel gives the same bits. The kernel stays memory-bound
 * without FMA: 95% of bench/optim's bandwidth ceiling on the 2-core dev box
 * and on a 16-core Xeon, with an in-cache rate 1.7x the bandwidth-bound one
 * on the dev box. */
#pragma GCC optimize("fp-contract=off") /* the CUDA kernel (ops/cuda/adamw.cu) rounds the same */
#include <math.h>

#include "ops/cpu/cpu_kernels.h"

/* 1 KiB of sqrt arguments per block: stays in L1 between the three loops. */
#define ADAMW_BLOCK 256

/* Software prefetch of the four arrays' lines ADAMW_AHEAD elements past the
 * block at b0, for the same reason as the 8-bit steps' (quant8.h): at 128M
 * parameters on the 2-core Xeon VM (2026-11-25, bench/results/
 * optim-20261125-xeon2-prefetch/) it raised the step from 0.88-0.92 to
 * 0.94-0.98 of bench/optim's bandwidth ceiling. */
#define ADAMW_AHEAD 512

static inline void prefetch_ahead(const float *p, const float *m, const float *v,
				  const float *g, size_t b0, size_t len, size_t n)
{
	if (n - b0 <= ADAMW_AHEAD)
		return;
	const size_t a = b0 + ADAMW_AHEAD, b = n - a < len ? n : a + len;
	for (size_t i = a; i < b; i += 16) { /* a 64-byte line of floats */
		cpu_prefetch_w(p + i);
		cpu_prefetch_w(m + i);
		cpu_prefetch_w(v + i);
		cpu_prefetch_r(g + i);
	}
}

void cpu_adamw_step(float *p, float *m, float *v, const float *g, size_t n,
		    const struct st_adamw_args *a)
{
	const float lr = a->lr, b1 = a->beta1, b2 = a->beta2, eps = a->eps;
	const float gs = a->grad_scale, bc1 = a->bc1, bc2 = a->bc2;
	/* p -= lr * wd * p as written; decay = 0 leaves p unchanged, which is
	 * the "if wd != 0" of ops.h */
	const float decay = lr * a->weight_decay;
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN)
	for (size_t b0 = 0; b0 < n; b0 += ADAMW_BLOCK) {
		size_t len = n - b0 < ADAMW_BLOCK ? n - b0 : ADAMW_BLOCK;
		float *restrict pb = p + b0, *restrict mb = m + b0, *restrict vb = v + b0;
		const float *restrict gb = g + b0;
		float den[ADAMW_BLOCK];
		prefetch_ahead(p, m, v, g, b0, len, n);
		for (size_t i = 0; i < len; i++) {
			float gi = gb[i] * gs;
			float pi = pb[i];
			pb[i] = pi - decay * pi;
			float mi = b1 * mb[i] + (1.0f - b1) * gi;
			float vi = b2 * vb[i] + (1.0f - b2) * gi * gi;
			mb[i] = mi;
			vb[i] = vi;
			den[i] = vi / bc2;
		}
		for (size_t i = 0; i < len; i++)
			den[i] = sqrtf(den[i]);
		for (size_t i = 0; i < len; i++)
			pb[i] -= lr * (mb[i] / bc1) / (den[i] + eps);
	}
}
