/* bench/q8_stages: where the CPU's 8-bit AdamW step spends its time, on one
 * core near the caches (the stages' blocks in L1; the step's 64K parameters
 * take 640 KiB with p and g, in L2 where it holds that much, L2 and L3 on a
 * 512 KiB-L2 Zen 3). Times each stage of the fused kernel
 * (decode, absmax, encode: quant8.c's per-variant pieces) per element over a
 * 256-element quantization block, the encoder's bucket-table gather alone
 * (AVX-512: one vpgatherdd per 16 elements), and the whole fused step
 * (cpu_adamw8_step_simd) on a 64K-parameter slice, for every SIMD variant the
 * CPU has. The stages do not sum to the step exactly: the step also runs the
 * fp32 moment and parameter updates and loops over blocks. Last, the fp32
 * AdamW step on the same 64K parameters and on 16K: the arithmetic both
 * steps share; the divider's throughput (division and square root), whose
 * floor both steps sit on; and the cost of building a map's lookup tables (a
 * cache miss in q8_lut_get).
 *
 * usage: q8_stages [--reps 20000]
 *
 * The step is compute-bound on the CPUs measured so far (bench/optim's
 * in-cache figure); this says which piece to work on. */
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <immintrin.h>

#include "cli/cli.h"
#include "ops/cpu/quant8.h"
#include "ops/ops.h"
#include "optim/quantmap.h"
#include "util/check.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static float frand(void) /* [-0.5, 0.5) */
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (float)(rng >> 40) * (1.0f / 16777216.0f) - 0.5f;
}

static volatile float sink;

/* the encoder's table read alone: keys from the values' bits, as many
 * gathers as encode does */
__attribute__((target("avx512f"))) static void gather_only(uint8_t *out, const float *x, size_t n,
							   const struct q8_lut *t)
{
	const __m512i mask = _mm512_set1_epi32(1023);
	for (size_t i = 0; i + 16 <= n; i += 16) {
		__m512i key = _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + i)), mask);
		__m512i e = _mm512_i32gather_epi32(key, (const void *)t->entry, 4);
		_mm_storeu_si128((__m128i *)(out + i), _mm512_cvtepi32_epi8(e));
	}
}

/* The divider's throughput, for the floor it puts under both steps: the 8-bit
 * step divides once per element (its update; the encodes multiply by 1 /
 * absmax since 2026-11-25, where they had divided twice) and takes one square
 * root; fp32 AdamW, in PyTorch's order, divides three times. Plain loops that
 * gcc vectorizes at the build's width (exact IEEE division and sqrt:
 * -fno-fast-math keeps them), over values of the moments' sizes, in L1. */
__attribute__((noinline)) static void div_loop(float *restrict y, const float *restrict x, size_t n,
					       float d)
{
	for (size_t i = 0; i < n; i++)
		y[i] = x[i] / d;
}

__attribute__((noinline)) static void sqrt_loop(float *restrict y, const float *restrict x,
						size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] = sqrtf(x[i]);
}

static const char usage[] =
	"usage: bench/q8_stages [--reps 20000]\n"
	"Per-element cost of each stage of the CPU's 8-bit AdamW step, on one\n"
	"thread, for every SIMD variant this CPU has.\n";

int main(int argc, char **argv)
{
	struct cli_args args;
	long lreps;
	const int rc = cli_start(&args, argc, argv, usage);
	if (rc != CLI_RUN)
		return rc;
	if (cli_get_long(&args, "reps", 20000, LONG_MIN, LONG_MAX, &lreps) != ST_OK ||
	    cli_check_unused(&args, "bench/q8_stages") != ST_OK)
		return 2;
	if (lreps < 1 || lreps > 100000000) {
		fprintf(stderr, "bench/q8_stages: need 1 <= --reps <= 100000000\n");
		return 2;
	}
	const int reps = (int)lreps;
	omp_set_num_threads(1);
	enum { B = 256, N = 65536 };
	float map_s[256], map_u[256];
	quantmap_dynamic(map_s, 1);
	quantmap_dynamic(map_u, 0);
	struct q8_lut *lut = malloc(sizeof *lut);
	q8_lut_build(lut, map_s);
	float *x = malloc(N * 4), *p = malloc(N * 4), *g = malloc(N * 4);
	uint8_t *codes = malloc(N), *vc = malloc(N);
	float *ma = malloc(N / B * 4), *va = malloc(N / B * 4);
	for (int i = 0; i < N; i++) {
		x[i] = frand(), p[i] = frand(), g[i] = 1e-2f * frand();
		codes[i] = (uint8_t)(rng >> 56), vc[i] = (uint8_t)(rng >> 48);
	}
	for (int b = 0; b < N / B; b++)
		ma[b] = 0.01f, va[b] = 1e-5f;

	printf("bench/q8_stages: one thread, ns per element (block %d in L1; step on %d params)\n", B,
	       N);
	printf("%-10s %9s %9s %9s %11s\n", "variant", "decode", "absmax", "encode", "adamw8 step");
	double tg = 1e30, step_pick = 0; /* the default variant's step */
	for (int s = Q8_SCALAR; s < Q8_NSIMD; s++) {
		if (!q8_simd_supported((enum q8_simd)s))
			continue;
		const struct q8_kernels *k = q8_kernels_get((enum q8_simd)s);
		double best[3] = { 1e30, 1e30, 1e30 };
		for (int round = 0; round < 3; round++) {
			double t0 = now();
			for (int r = 0; r < reps; r++)
				k->decode(x, codes + (r % 64) * B, B, 0.5f, lut);
			best[0] = fmin(best[0], (now() - t0) / ((double)reps * B));
			float acc = 0;
			t0 = now();
			for (int r = 0; r < reps; r++)
				acc += k->absmax(x + (r % 64) * B, B);
			best[1] = fmin(best[1], (now() - t0) / ((double)reps * B));
			sink = acc;
			t0 = now();
			for (int r = 0; r < reps; r++)
				k->encode(codes + (r % 64) * B, x + (r % 64) * B, B, 1.0f / 0.75f, lut);
			best[2] = fmin(best[2], (now() - t0) / ((double)reps * B));
		}
		double step = 1e30;
		const int sreps = reps / 256 > 3 ? reps / 256 : 3;
		for (int round = 0; round < 3; round++) {
			double t0 = now();
			for (int r = 0; r < sreps; r++) {
				struct st_adamw8_args a = {
					.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
					.weight_decay = 0.1f, .grad_scale = 1.0f, .bc1 = 0.1f, .bc2 = 0.001f,
					.block = B, .map_m = map_s, .map_v = map_u };
				cpu_adamw8_step_simd((enum q8_simd)s, p, codes, vc, ma, va, g, N, &a);
			}
			step = fmin(step, (now() - t0) / ((double)sreps * N));
		}
		if (s == (int)q8_simd_pick())
			step_pick = step;
		printf("%-10s %9.3f %9.3f %9.3f %11.3f\n", q8_simd_name((enum q8_simd)s), 1e9 * best[0],
		       1e9 * best[1], 1e9 * best[2], 1e9 * step);
		if (s == Q8_AVX512)
			for (int round = 0; round < 3; round++) {
				double t0 = now();
				for (int r = 0; r < reps; r++)
					gather_only(codes + (r % 64) * B, x + (r % 64) * B, B, lut);
				tg = fmin(tg, (now() - t0) / ((double)reps * B));
			}
	}
	if (tg < 1e30)
		printf("avx512 encode's table gather alone: %.3f ns per element\n", 1e9 * tg);
	/* The fp32 AdamW step (ops->adamw_step) on the same 64K parameters, and
	 * on 16K (its four arrays, 256 KiB, well inside L2; fewer would measure
	 * the per-call set-up): the arithmetic every AdamW step does, so the
	 * 8-bit step's cost above it is the quantization's. */
	float *m = malloc(N * 4), *v = malloc(N * 4);
	for (int i = 0; i < N; i++)
		m[i] = 1e-3f * frand(), v[i] = 1e-6f * (1.0f + frand());
	const struct st_adamw_args a32 = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
					   .weight_decay = 0.1f, .grad_scale = 1.0f, .bc1 = 0.1f,
					   .bc2 = 0.001f };
	const size_t sizes[2] = { N, 16384 };
	double f32[2] = { 1e30, 1e30 };
	for (int z = 0; z < 2; z++) {
		const int sreps = (int)((size_t)reps * 256 / sizes[z]) > 3 ? (int)((size_t)reps * 256 / sizes[z]) : 3;
		for (int round = 0; round < 3; round++) {
			double t0 = now();
			for (int r = 0; r < sreps; r++)
				ops_cpu()->adamw_step(p, m, v, g, sizes[z], &a32);
			f32[z] = fmin(f32[z], (now() - t0) / ((double)sreps * (double)sizes[z]));
		}
	}
	printf("fp32 AdamW step: %.3f ns per element on %d params, %.3f on 16384 (in L2)\n",
	       1e9 * f32[0], N, 1e9 * f32[1]);
	double tdiv = 1e30, tsqrt = 1e30;
	for (int round = 0; round < 3; round++) {
		double t0 = now();
		for (int r = 0; r < reps; r++)
			div_loop(m, v + (r % 64) * B, B, 0.37123f);
		tdiv = fmin(tdiv, (now() - t0) / ((double)reps * B));
		t0 = now();
		for (int r = 0; r < reps; r++)
			sqrt_loop(m, v + (r % 64) * B, B);
		tsqrt = fmin(tsqrt, (now() - t0) / ((double)reps * B));
	}
	sink = m[0];
	printf("divider: %.3f ns per division, %.3f per square root; the 8-bit step's one of each "
	       "needs %.3f ns per element, fp32 AdamW's three and one %.3f\n",
	       1e9 * tdiv, 1e9 * tsqrt, 1e9 * (tdiv + tsqrt), 1e9 * (3 * tdiv + tsqrt));
	/* Building a map's lookup tables (q8_lut_build), which q8_lut_get caches
	 * per thread: what a cache miss costs, as a number of parameters the
	 * fused step covers in that time. */
	const float *maps[2] = { map_s, map_u };
	double tb[2] = { 1e30, 1e30 };
	for (int k = 0; k < 2; k++)
		for (int round = 0; round < 5; round++) {
			double t0 = now();
			for (int r = 0; r < 20; r++)
				q8_lut_build(lut, maps[k]);
			tb[k] = fmin(tb[k], (now() - t0) / 20);
		}
	printf("table build: %.1f us (signed map), %.1f us (unsigned), as long as the default step on "
	       "%.0fK params\n",
	       1e6 * tb[0], 1e6 * tb[1], 0.5 * (tb[0] + tb[1]) / step_pick / 1e3);
	free(m), free(v);
	free(lut), free(x), free(p), free(g), free(codes), free(vc), free(ma), free(va);
	return 0;
}
