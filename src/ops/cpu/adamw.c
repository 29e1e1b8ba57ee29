/* AdamW on one flat unit, in exactly the order ops.h writes it (PyTorch's):
 * scale the gradient, decoupled decay, moment updates, bias-corrected step.
 * Elementwise, so any split across threads gives the same bits.
 *
 * The work goes in blocks of ADAMW_BLOCK elements. Where the CPU has AVX2,
 * a full block is one intrinsics pass (adamw_block_avx2). Otherwise, and for
 * the last partial block, three loops per block, because
 * sqrtf kept gcc from vectorizing any loop it appeared in (with errno
 * semantics it compiled to sqrtss plus a guarded call for negative inputs):
 * isolating it left the two loops with the divisions vectorized and the
 * sqrt loop a tight one, 3.3x faster than one fused loop on the dev box.
 * Every path does the same per-element operations, so gives the same bits.
 *
 * No FMA contraction (the pragma): each operation rounds once, as written,
 * so the CUDA kernel gives the same bits. The kernel stays memory-bound
 * without FMA: 95% of bench/optim's bandwidth ceiling on the 2-core dev box
 * and on a 16-core Xeon with the three loops, above it on the 2-core Xeon
 * VM with the AVX2 pass and the prefetch (2026-11-25). */
#pragma GCC optimize("fp-contract=off") /* the CUDA kernel (ops/cuda/adamw.cu) rounds the same */
#include <immintrin.h>
#include <math.h>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/quant8.h" /* q8_simd_pick: STRATA_SIMD=scalar turns the pass off */

/* 1 KiB of sqrt arguments per block: stays in L1 between the three loops. */
#define ADAMW_BLOCK 256

/* Software prefetch of the four arrays' lines ADAMW_AHEAD elements past the
 * block at b0, for the same reason as the 8-bit steps' (quant8.h): at 128M
 * parameters on the 2-core Xeon VM (2026-11-25, bench/results/
 * optim-20261125-xeon2-prefetch/explore.txt, trial builds) it raised the
 * three-loop step from 0.92 to 0.95-0.96 of bench/optim's ceiling. */
#define ADAMW_AHEAD 512

static inline void prefetch_ahead(const float *p, const float *m, const float *v,
				  const float *g, size_t b0, size_t len, size_t n)
{
	size_t a = 0;
	const size_t b = cpu_prefetch_span(b0, len, n, ADAMW_AHEAD, &a);
	for (size_t i = a; i < b; i += 16) { /* a 64-byte line of floats */
		cpu_prefetch_w(p + i);
		cpu_prefetch_w(m + i);
		cpu_prefetch_w(v + i);
		cpu_prefetch_r(g + i);
	}
}

/* Per-call constants, each the fp32 value the loops below compute. */
struct adamw_consts {
	float lr, b1, omb1, b2, omb2, eps, gs, bc1, bc2, decay;
};

/* One full block in 8-wide AVX2 registers, a single pass: the same fp32
 * operations in the same order as the three loops below, each rounding once
 * (no FMA: gcc may fuse _mm256_mul_ps into a following _mm256_add_ps as it
 * would a * b + c, and the file's pragma forbids it here too), so the same
 * bits (tests/test_ops.c checks both paths against a scalar
 * replay). On the 2-core Xeon VM (2026-11-25, bench/results/
 * optim-20261125-xeon2-prefetch/) the pass and the prefetch took the step
 * from 0.91-0.93 of bench/optim's ceiling to 1.06-1.07, 0.99-1.02x PyTorch's
 * fused AdamW: the three loops' loads, stores and 256-float buffer had kept
 * the compute from hiding under the memory traffic. The same pass in 16-wide
 * AVX-512 registers ran 3-4% slower there than this one, so there is none. */
__attribute__((target("avx2"))) static void adamw_block_avx2(
	float *restrict pb, float *restrict mb, float *restrict vb, const float *restrict gb,
	const struct adamw_consts *k)
{
	const __m256 gs = _mm256_set1_ps(k->gs), decay = _mm256_set1_ps(k->decay);
	const __m256 b1 = _mm256_set1_ps(k->b1), omb1 = _mm256_set1_ps(k->omb1);
	const __m256 b2 = _mm256_set1_ps(k->b2), omb2 = _mm256_set1_ps(k->omb2);
	const __m256 bc1 = _mm256_set1_ps(k->bc1), bc2 = _mm256_set1_ps(k->bc2);
	const __m256 lr = _mm256_set1_ps(k->lr), eps = _mm256_set1_ps(k->eps);
	for (size_t i = 0; i < ADAMW_BLOCK; i += 8) {
		const __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(gb + i), gs);
		const __m256 pi = _mm256_loadu_ps(pb + i);
		const __m256 p1 = _mm256_sub_ps(pi, _mm256_mul_ps(decay, pi));
		const __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(mb + i)),
						_mm256_mul_ps(omb1, gi));
		const __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(vb + i)),
						_mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
		_mm256_storeu_ps(mb + i, mi);
		_mm256_storeu_ps(vb + i, vi);
		const __m256 den = _mm256_sqrt_ps(_mm256_div_ps(vi, bc2));
		const __m256 u = _mm256_div_ps(_mm256_mul_ps(lr, _mm256_div_ps(mi, bc1)),
					       _mm256_add_ps(den, eps));
		_mm256_storeu_ps(pb + i, _mm256_sub_ps(p1, u));
	}
}

void cpu_adamw_step_simd(int avx2, float *p, float *m, float *v, const float *g, size_t n,
			 const struct st_adamw_args *a)
{
	const float lr = a->lr, b1 = a->beta1, b2 = a->beta2, eps = a->eps;
	const float gs = a->grad_scale, bc1 = a->bc1, bc2 = a->bc2;
	/* p -= lr * wd * p as written; decay = 0 leaves p unchanged, which is
	 * the "if wd != 0" of ops.h */
	const float decay = lr * a->weight_decay;
	const struct adamw_consts k = {.lr = lr, .b1 = b1, .omb1 = 1.0f - b1, .b2 = b2,
				       .omb2 = 1.0f - b2, .eps = eps, .gs = gs, .bc1 = bc1,
				       .bc2 = bc2, .decay = decay};
	avx2 = avx2 && __builtin_cpu_supports("avx2");
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN)
	for (size_t b0 = 0; b0 < n; b0 += ADAMW_BLOCK) {
		size_t len = n - b0 < ADAMW_BLOCK ? n - b0 : ADAMW_BLOCK;
		float *restrict pb = p + b0, *restrict mb = m + b0, *restrict vb = v + b0;
		const float *restrict gb = g + b0;
		float den[ADAMW_BLOCK];
		prefetch_ahead(p, m, v, g, b0, len, n);
		if (avx2 && len == ADAMW_BLOCK) {
			adamw_block_avx2(pb, mb, vb, gb, &k);
			continue;
		}
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

void cpu_adamw_step(float *p, float *m, float *v, const float *g, size_t n,
		    const struct st_adamw_args *a)
{
	cpu_adamw_step_simd(q8_simd_pick() != Q8_SCALAR, p, m, v, g, n, a);
}
