/* CUDA kernels against the CPU backend, on a GPU: fp32 AdamW, 8-bit AdamW and
 * 8-bit SGD (each through the warp-per-block kernel at block 256 and through
 * the general kernel) must give EXACTLY the CPU's bits (ops.h: every fp32 operation rounds
 * once, in a fixed order, on every backend), over several steps of fresh
 * random inputs, at sizes with partial blocks, unaligned pointers and more
 * quantization blocks than the persistent grid holds at once.
 *
 * Without a GPU (or in a build without nvcc) every test is skipped with a
 * message saying so; scripts/gpu-check runs this suite on a GPU machine.
 *
 * The optimizers update their state in place, so it cannot be poisoned;
 * instead the state starts random (random codes and absmax, random moments),
 * so every element changes in the first step and one the kernel skipped
 * keeps a stale value that cannot match. The bytes around every device array
 * are poisoned (0xff) and checked untouched after each step, so a write
 * outside the array fails too. */
#pragma GCC optimize("fp-contract=off")
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "optim/quantmap.h"
#include "testutil.h"

#ifdef ST_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/cuda_optim.h"

#define CK(call)                                                                               \
	do {                                                                                   \
		cudaError_t e_ = (call);                                                       \
		cr_assert_eq(e_, cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));        \
	} while (0)

/* Skip the calling test unless a device is usable. */
static void need_gpu(void)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count == 0)
		cr_skip_test("no CUDA device (%s): CUDA kernels compiled, not run here",
			     e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
	CK(cudaSetDevice(0));
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	cr_assert(p);
	return p;
}

#define SLACK 64 /* poisoned bytes after each device array */

/* device copy of host bytes, `pad` bytes into a fresh allocation (pad makes
 * unaligned pointers); the pad and SLACK bytes after the array are 0xff */
static void *dup_to_dev(const void *h, size_t bytes, size_t pad, void **base)
{
	char *d;
	CK(cudaMalloc((void **)&d, bytes + pad + SLACK));
	CK(cudaMemset(d, 0xff, bytes + pad + SLACK));
	CK(cudaMemcpy(d + pad, h, bytes, cudaMemcpyHostToDevice));
	*base = d;
	return d + pad;
}

/* the poisoned bytes around the array at d (bytes long) are still 0xff */
static void expect_untouched(const void *d, size_t bytes, size_t pad, const char *what)
{
	unsigned char before[16], after[SLACK];
	CK(cudaDeviceSynchronize());
	if (pad)
		CK(cudaMemcpy(before, (const char *)d - pad, pad, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(after, (const char *)d + bytes, SLACK, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < pad; i++)
		cr_expect_eq(before[i], 0xff, "%s: byte %zu before the array written", what, pad - i);
	for (size_t i = 0; i < SLACK; i++)
		cr_expect_eq(after[i], 0xff, "%s: byte %zu after the array written", what, i);
}

/* random bytes (codes) and random positive floats (absmax) */
static void fill_bytes(uint8_t *x, size_t n, uint64_t *seed)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (uint8_t)(tu_next(seed) >> 56);
}

static void fill_positive(float *x, size_t n, double lo, double hi, uint64_t *seed)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)(lo * pow(hi / lo, tu_uniform(seed)));
}

static void from_dev(void *h, const void *d, size_t bytes)
{
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

static size_t first_diff(const void *a, const void *b, size_t bytes)
{
	const unsigned char *x = a, *y = b;
	for (size_t i = 0; i < bytes; i++)
		if (x[i] != y[i])
			return i;
	return (size_t)-1;
}

/* The first differing float of a and b, where any two NaNs count as equal:
 * a NaN's bits are not promised (the GPU makes every NaN 0x7fffffff, x86
 * keeps the payload or gives 0xffc00000), only that it is NaN. */
static size_t first_diff_f32(const float *a, const float *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!(isnan(a[i]) && isnan(b[i])) && memcmp(&a[i], &b[i], 4) != 0)
			return i;
	return (size_t)-1;
}

/* ---- fp32 AdamW ------------------------------------------------------------------- */

static void check_adamw(size_t n, size_t pad, uint64_t seed)
{
	float *p = xmalloc(n * 4), *m = xmalloc(n * 4), *v = xmalloc(n * 4), *g = xmalloc(n * 4);
	float *out = xmalloc(n * 4);
	tu_fill_normal(p, n, 1.0, &seed);
	tu_fill_normal(m, n, 1e-3, &seed);
	fill_positive(v, n, 1e-10, 1e-4, &seed);
	void *bp, *bm, *bv, *bg;
	float *dp = dup_to_dev(p, n * 4, pad, &bp), *dm = dup_to_dev(m, n * 4, pad, &bm);
	float *dv = dup_to_dev(v, n * 4, pad, &bv), *dg = dup_to_dev(g, n * 4, pad, &bg);
	for (int t = 1; t <= 4; t++) {
		tu_block_grads(g, n, 256, &seed);
		CK(cudaMemcpy(dg, g, n * 4, cudaMemcpyHostToDevice));
		struct st_adamw_args a = { .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
					   .weight_decay = 0.1f, .grad_scale = 0.7f,
					   .bc1 = (float)(1.0 - pow(0.9, t)),
					   .bc2 = (float)(1.0 - pow(0.999, t)) };
		ops_cpu()->adamw_step(p, m, v, g, n, &a);
		CK(cuda_adamw_step(dp, dm, dv, dg, n, &a, 0));
		const float *want[3] = { p, m, v };
		const float *got[3] = { dp, dm, dv };
		const char *name[3] = { "p", "m", "v" };
		for (int k = 0; k < 3; k++) {
			from_dev(out, got[k], n * 4);
			size_t d = first_diff(out, want[k], n * 4);
			if (d != (size_t)-1)
				cr_expect(0, "adamw n %zu pad %zu step %d: %s differs at %zu (gpu %.9g, cpu %.9g)",
					  n, pad, t, name[k], d / 4, (double)out[d / 4],
					  (double)want[k][d / 4]);
			expect_untouched(got[k], n * 4, pad, name[k]);
		}
	}
	cudaFree(bp), cudaFree(bm), cudaFree(bv), cudaFree(bg);
	free(p), free(m), free(v), free(g), free(out);
}

Test(cuda, adamw_matches_cpu)
{
	need_gpu();
	check_adamw(1000003, 0, 0x11); /* vector kernel + scalar tail */
	check_adamw(4099, 4, 0x12);    /* unaligned: scalar kernel */
	check_adamw(3, 0, 0x13);
}

/* ---- 8-bit AdamW ------------------------------------------------------------------ */

struct q8_host {
	float *p, *ma, *va;
	uint8_t *mc, *vc;
};

enum a8_path { A8_AUTO, A8_GENERAL };

/* 5 steps on the CPU and on the GPU from the same start; every array compared
 * after every step. pad shifts p and g off 16-byte alignment, cpad the code
 * arrays off 4-byte alignment; zero_start
 * starts from all-zero state (m = v = 0) instead of a random one.
 * nonfinite 1 plants NaN and inf gradients (outside the trainer's contract,
 * which skips such steps, but the absmax must still ignore NaN in every
 * block and the codes stay exact; p is compared with NaN == NaN); 2 makes
 * two blocks' moments so small that their absmax is at most 2^-128, where
 * ops_q8_scale caps the reciprocal at FLT_MAX (tu_tiny_blocks). */
static void check_adam8_nf(int block, size_t n, size_t pad, size_t cpad, enum a8_path path,
			   int zero_start, int nonfinite, uint64_t seed)
{
	const size_t nb = (n + (size_t)block - 1) / (size_t)block;
	float map_s[256], map_u[256];
	quantmap_dynamic(map_s, 1);
	quantmap_dynamic(map_u, 0);
	struct q8_host h = { xmalloc(n * 4), xmalloc(nb * 4), xmalloc(nb * 4), xmalloc(n),
			     xmalloc(n) };
	float *g = xmalloc(n * 4);
	char *out = xmalloc(n * 4);
	tu_fill_normal(h.p, n, 1.0, &seed);
	if (zero_start) {
		memset(h.mc, 0, n), memset(h.vc, 0, n);
		memset(h.ma, 0, nb * 4), memset(h.va, 0, nb * 4);
	} else {
		fill_bytes(h.mc, n, &seed), fill_bytes(h.vc, n, &seed);
		fill_positive(h.ma, nb, 1e-4, 1e-1, &seed);
		fill_positive(h.va, nb, 1e-8, 1e-3, &seed);
	}
	void *b[8];
	float *dp = dup_to_dev(h.p, n * 4, pad, &b[0]), *dg = dup_to_dev(g, n * 4, pad, &b[1]);
	uint8_t *dmc = dup_to_dev(h.mc, n, cpad, &b[2]), *dvc = dup_to_dev(h.vc, n, cpad, &b[3]);
	float *dma = dup_to_dev(h.ma, nb * 4, 0, &b[4]), *dva = dup_to_dev(h.va, nb * 4, 0, &b[5]);
	float *dmap_s = dup_to_dev(map_s, sizeof map_s, 0, &b[6]);
	float *dmap_u = dup_to_dev(map_u, sizeof map_u, 0, &b[7]);
	for (int t = 1; t <= 5; t++) {
		tu_block_grads(g, n, block, &seed);
		if (nonfinite == 2)
			tu_tiny_blocks(g, n, block, &seed);
		else if (nonfinite) { /* a NaN and an inf in the second block, -NaN in the last */
			g[(size_t)block + 3] = NAN;
			g[(size_t)block + 40] = INFINITY;
			g[n - 1] = -NAN;
		}
		CK(cudaMemcpy(dg, g, n * 4, cudaMemcpyHostToDevice));
		struct st_adamw8_args a = {
			.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f,
			.grad_scale = 0.7f, .bc1 = (float)(1.0 - pow(0.9, t)),
			.bc2 = (float)(1.0 - pow(0.999, t)), .block = block, .map_m = map_s,
			.map_v = map_u };
		ops_cpu()->adamw8_step(h.p, h.mc, h.vc, h.ma, h.va, g, n, &a);
		struct st_adamw8_args ad = a;
		ad.map_m = dmap_s, ad.map_v = dmap_u;
		if (path == A8_GENERAL)
			CK(cuda_adamw8_step_general(dp, dmc, dvc, dma, dva, dg, n, &ad, 0));
		else
			CK(cuda_adamw8_step(dp, dmc, dvc, dma, dva, dg, n, &ad, 0));
		const void *want[5] = { h.p, h.mc, h.vc, h.ma, h.va };
		const void *got[5] = { dp, dmc, dvc, dma, dva };
		const size_t bytes[5] = { n * 4, n, n, nb * 4, nb * 4 };
		const char *name[5] = { "p", "m codes", "v codes", "m absmax", "v absmax" };
		for (int k = 0; k < 5; k++) {
			from_dev(out, got[k], bytes[k]);
			size_t d = k == 0 ? first_diff_f32((const float *)out, want[k], n)
					  : first_diff(out, want[k], bytes[k]);
			if (k == 0 && d != (size_t)-1)
				d *= 4;
			cr_expect(d == (size_t)-1,
				  "adamw8 %s block %d n %zu pad %zu/%zu step %d: %s differ at byte %zu",
				  path == A8_GENERAL ? "general" : "auto", block, n, pad, cpad, t,
				  name[k], d);
			expect_untouched(got[k], bytes[k], k == 0 ? pad : k < 3 ? cpad : 0, name[k]);
		}
	}
	/* the state moved, and no scale is NaN */
	cr_expect(h.ma[0] > 0 && h.va[0] > 0);
	if (nonfinite == 2) /* the capped scale was reached */
		cr_expect(h.va[1] > 0 && h.va[1] <= 0x1p-128f && h.ma[3] > 0 && h.ma[3] <= 0x1p-128f,
			  "tiny blocks: v absmax %g, m absmax %g", (double)h.va[1], (double)h.ma[3]);
	for (size_t k = 0; k < nb; k++)
		cr_expect(!isnan(h.ma[k]) && !isnan(h.va[k]), "block %zu: NaN absmax", k);
	for (int k = 0; k < 8; k++)
		cudaFree(b[k]);
	free(h.p), free(h.ma), free(h.va), free(h.mc), free(h.vc), free(g), free(out);
}

static void check_adam8(int block, size_t n, size_t pad, size_t cpad, enum a8_path path,
			int zero_start, uint64_t seed)
{
	check_adam8_nf(block, n, pad, cpad, path, zero_start, 0, seed);
}

Test(cuda, adamw8_warp_kernel_matches_cpu)
{
	need_gpu();
	check_adam8(256, 256 * 37 + 5, 0, 0, A8_AUTO, 0, 0x21);  /* partial last block */
	check_adam8(256, 256 * 37 + 5, 0, 0, A8_AUTO, 1, 0x25);  /* from zero state */
	check_adam8(256, 256 * 64, 0, 0, A8_AUTO, 0, 0x22);         /* whole blocks only */
	check_adam8(256, 256 * 100003 + 131, 0, 0, A8_AUTO, 0, 0x23); /* more blocks than the grid */
	check_adam8(256, 200, 0, 0, A8_AUTO, 0, 0x24);              /* a single partial block */
}

Test(cuda, adamw8_general_kernel_matches_cpu)
{
	need_gpu();
	check_adam8(256, 256 * 37 + 5, 0, 0, A8_GENERAL, 0, 0x31);
	check_adam8(256, 256 * 37 + 5, 4, 0, A8_AUTO, 0, 0x32); /* unaligned p, g: general */
	check_adam8(256, 256 * 37 + 5, 0, 1, A8_AUTO, 0, 0x37); /* unaligned codes: general */
	check_adam8(64, 64 * 37 + 5, 0, 0, A8_AUTO, 0, 0x33);
	check_adam8(2048, 2048 * 9 + 1000, 0, 0, A8_AUTO, 0, 0x34); /* stash in shared memory */
	check_adam8(8192, 8192 * 4 + 777, 0, 0, A8_AUTO, 0, 0x35);  /* recomputed second pass */
	check_adam8(100, 100 * 11 + 7, 0, 0, A8_AUTO, 0, 0x36);     /* not a whole number of warps */
	/* a last block of 3000 with block 4096: on the CPU one whole and one
	 * partial 2048-value chunk in its two passes */
	check_adam8(4096, 4096 * 3 + 3000, 0, 0, A8_AUTO, 0, 0x38);
}

Test(cuda, adamw8_nonfinite_gradients)
{
	need_gpu();
	check_adam8_nf(256, 256 * 37 + 5, 0, 0, A8_AUTO, 0, 1, 0x39);
	check_adam8_nf(256, 256 * 37 + 5, 0, 0, A8_GENERAL, 0, 1, 0x3a);
	check_adam8_nf(4096, 4096 * 3 + 3000, 0, 0, A8_AUTO, 0, 1, 0x3b);
}

/* Blocks whose moments' absmax is at most 2^-128 (from zero state, so the
 * moments stay that small): the capped scale, as on the CPU. */
Test(cuda, adamw8_tiny_moments)
{
	need_gpu();
	check_adam8_nf(256, 256 * 37 + 5, 0, 0, A8_AUTO, 1, 2, 0x3c);
	check_adam8_nf(256, 256 * 37 + 5, 0, 0, A8_GENERAL, 1, 2, 0x3d);
}

/* The two ways the kernels find a code (bucket table, binary search) against
 * the scalar reference quant_nearest, on the values where they could differ:
 * every threshold and its float neighbours, the map entries, +-0, +-inf,
 * NaN, bucket edges, and random floats of every magnitude from 1e-30 to 4. */
static void check_codes(const float map[256], const char *name, uint64_t seed)
{
	size_t cap = 300000, n = 0;
	float *x = xmalloc(cap * 4);
	for (int k = 0; k < 255; k++) {
		double mid = ((double)map[k] + (double)map[k + 1]) * 0.5;
		float f = (float)mid;
		for (int d = 0; d < 3; d++) {
			x[n++] = f, x[n++] = nextafterf(f, INFINITY), x[n++] = nextafterf(f, -INFINITY);
			f = nextafterf(f, d ? -INFINITY : INFINITY);
		}
		x[n++] = map[k], x[n++] = -map[k];
	}
	const float special[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, 2.0f, -2.0f, 1.0f, -1.0f,
				  0x1p-23f, -0x1p-23f, nextafterf(0x1p-23f, 0), nextafterf(2.0f, 0) };
	for (size_t i = 0; i < sizeof special / sizeof *special; i++)
		x[n++] = special[i];
	for (int e = -24; e <= 1; e++) /* bucket edges: 128 per binade */
		for (int j = 0; j < 128; j++) {
			float edge = ldexpf(1.0f + j / 128.0f, e);
			x[n++] = edge, x[n++] = nextafterf(edge, 0), x[n++] = -edge;
		}
	while (n < cap) {
		double mag = pow(10.0, -30.0 + 30.6 * tu_uniform(&seed));
		x[n++] = (float)(tu_uniform(&seed) < 0.5 ? -mag : mag);
	}
	void *b[4];
	float *dx = dup_to_dev(x, n * 4, 0, &b[0]), *dmap = dup_to_dev(map, 256 * 4, 0, &b[1]);
	uint8_t *zero = xmalloc(n), *lut = xmalloc(n), *search = xmalloc(n);
	memset(zero, 0xff, n);
	uint8_t *dl = dup_to_dev(zero, n, 0, &b[2]), *ds = dup_to_dev(zero, n, 0, &b[3]);
	CK(cuda_q8_codes(dl, ds, dx, n, dmap, 0));
	from_dev(lut, dl, n);
	from_dev(search, ds, n);
	size_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		uint8_t want = quant_nearest(map, x[i]);
		if ((lut[i] != want || search[i] != want) && bad++ < 5)
			cr_log_error("%s map, x = %a: reference %d, bucket table %d, search %d", name,
				     (double)x[i], want, lut[i], search[i]);
	}
	cr_expect_eq(bad, 0, "%s map: %zu of %zu codes differ from quant_nearest", name, bad, n);
	for (int k = 0; k < 4; k++)
		cudaFree(b[k]);
	free(x), free(zero), free(lut), free(search);
}

Test(cuda, codes_match_reference)
{
	need_gpu();
	float s[256], u[256], c[256], one[256];
	quantmap_dynamic(s, 1);
	quantmap_dynamic(u, 0);
	check_codes(s, "signed", 0x51);
	check_codes(u, "unsigned", 0x52);
	/* Maps whose buckets hold several thresholds, so the table's compare
	 * loop runs: test_quant's clustered map (entries 1e-3 apart around
	 * 0.5), and 254 entries 1e-6 apart around 0.3, all in one bucket. */
	for (int k = 0; k < 256; k++) {
		c[k] = k < 64	 ? -1.0f + (float)k / 64.0f
		       : k < 192 ? 0.5f + (float)(k - 128) * 1e-3f
				 : 0.57f + (float)(k - 191) * (0.43f / 64.0f);
		one[k] = k == 0 ? -1.0f : k == 255 ? 1.0f : 0.3f + (float)(k - 128) * 1e-6f;
	}
	check_codes(c, "clustered", 0x53);
	check_codes(one, "one-bucket", 0x54);
	/* no 0 entry: the middle threshold is +-0 exactly */
	float z[256];
	for (int k = 0; k < 256; k++)
		z[k] = ((float)k - 127.5f) / 127.5f;
	check_codes(z, "zero-threshold", 0x55);
}

/* ---- 8-bit SGD -------------------------------------------------------------------- */

/* 4 steps from a populated state that the first step must not read (random
 * codes and scales: a kernel that read them would differ); pad shifts p and
 * g off 16-byte alignment. */
static void check_sgd8(int block, size_t n, int stateless, enum a8_path path, size_t pad,
		       uint64_t seed)
{
	const size_t nb = (n + (size_t)block - 1) / (size_t)block;
	float map_s[256];
	quantmap_dynamic(map_s, 1);
	float *p = xmalloc(n * 4), *g = xmalloc(n * 4), *ma = xmalloc(nb * 4);
	uint8_t *mc = xmalloc(n);
	char *out = xmalloc(n * 4);
	tu_fill_normal(p, n, 1.0, &seed);
	fill_bytes(mc, n, &seed); /* the first step must not read them */
	fill_positive(ma, nb, 1e-3, 1e-1, &seed);
	void *b[5];
	float *dp = dup_to_dev(p, n * 4, pad, &b[0]), *dg = dup_to_dev(g, n * 4, pad, &b[1]);
	uint8_t *dmc = dup_to_dev(mc, n, 0, &b[2]);
	float *dma = dup_to_dev(ma, nb * 4, 0, &b[3]);
	float *dmap = dup_to_dev(map_s, sizeof map_s, 0, &b[4]);
	for (int t = 1; t <= 4; t++) {
		tu_block_grads(g, n, block, &seed);
		CK(cudaMemcpy(dg, g, n * 4, cudaMemcpyHostToDevice));
		struct st_sgd8_args a = { .lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f,
					  .grad_scale = 0.8f, .first_step = t == 1, .block = block,
					  .map = map_s };
		ops_cpu()->sgd8_step(p, stateless ? NULL : mc, ma, g, n, &a);
		struct st_sgd8_args ad = a;
		ad.map = dmap;
		if (path == A8_GENERAL)
			CK(cuda_sgd8_step_general(dp, stateless ? NULL : dmc, dma, dg, n, &ad, 0));
		else
			CK(cuda_sgd8_step(dp, stateless ? NULL : dmc, dma, dg, n, &ad, 0));
		from_dev(out, dp, n * 4);
		size_t d = first_diff(out, p, n * 4);
		cr_expect(d == (size_t)-1, "sgd8 %s block %d n %zu%s step %d: p differs at %zu",
			  path == A8_GENERAL ? "general" : "auto", block, n,
			  stateless ? " stateless" : "", t, d / 4);
		expect_untouched(dp, n * 4, pad, "p");
		from_dev(out, dmc, n);
		cr_expect(!memcmp(out, mc, n), "sgd8 block %d step %d: codes differ", block, t);
		from_dev(out, dma, nb * 4);
		cr_expect(!memcmp(out, ma, nb * 4), "sgd8 block %d step %d: absmax differ", block, t);
		expect_untouched(dmc, n, 0, "codes");
		expect_untouched(dma, nb * 4, 0, "absmax");
	}
	for (int k = 0; k < 5; k++)
		cudaFree(b[k]);
	free(p), free(g), free(ma), free(mc), free(out);
}

Test(cuda, sgd8_matches_cpu)
{
	need_gpu();
	check_sgd8(64, 64 * 37 + 5, 0, A8_AUTO, 0, 0x41);
	check_sgd8(256, 40009, 0, A8_AUTO, 0, 0x42);            /* warp kernel, partial block */
	check_sgd8(256, 40009, 0, A8_GENERAL, 0, 0x45);
	check_sgd8(256, 40009, 0, A8_AUTO, 4, 0x48);            /* unaligned p, g: general */
	check_sgd8(256, 256 * 50021 + 77, 0, A8_AUTO, 0, 0x46); /* more blocks than the grid */
	check_sgd8(256, 200, 0, A8_AUTO, 0, 0x47);              /* a single partial block */
	check_sgd8(8192, 8192 * 4 + 777, 0, A8_AUTO, 0, 0x43);
	check_sgd8(4096, 4096 * 3 + 3000, 0, A8_AUTO, 0, 0x49); /* partial 2048 chunk */
	check_sgd8(256, 40009, 1, A8_AUTO, 0, 0x44);
}

#else /* built without nvcc */

Test(cuda, kernels)
{
	cr_skip_test("built without nvcc: no CUDA kernels to test");
}

#endif
