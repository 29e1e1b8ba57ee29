/* Kernel tests: every op of the CPU backend's table against an independent
 * float64 reference written here, and every backward against float64 central
 * finite differences of that reference, i.e. the gradient of
 * L = sum(dout * f(inputs)) with respect to each input and weight. Also the
 * optimizer kernels against a float64 scalar replay of the formulas in ops.h,
 * and determinism across thread counts.
 *
 * Inputs are fresh normal random numbers from a per-test seed. Outputs that a
 * kernel must overwrite are pre-filled with NaN, so an accidental += shows up;
 * outputs it must accumulate into are pre-filled with random values, so an
 * accidental = shows up. */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/cpu_kernels.h"
#include "ops/ops.h"
#include "testutil.h"

/* Errors are measured as |got - ref| / (|ref| + floor), floor = a fraction of
 * the reference's RMS: entries near zero come from cancellation, and fp32
 * rounding scales with the size of the terms, not of the result.
 *
 * FLOOR: 10% of the RMS, for outputs that are short sums (<= ~70 terms).
 * SUM_FLOOR: the full RMS, for outputs that are long sums of terms of either
 * sign (matmul with k = 129, attention over 131 keys), whose rounding error
 * grows like sqrt(k) times the size of the partial sums, i.e. of the RMS. */
#define FLOOR 0.1
#define SUM_FLOOR 1.0
/* Forward: fp32 kernels lose a few ulps (6e-8 each) per rounding, times the
 * length of their sums: measured <= 6e-7 on these shapes (relative to the
 * floors above), so 1e-5 leaves a wide margin; a wrong formula is off by O(1). */
#define FWD_TOL 1e-5
/* Backward: the fp32 backward has more roundings than the forward (measured
 * <= 1.1e-5, attention dq), and the float64 central differences (h = 1e-5) are
 * accurate to ~1e-9; a wrong formula or sign is off by O(1). */
#define GRAD_TOL 1e-4
#define FD_H 1e-5
/* Optimizer replay: three steps of a handful of fp32 roundings each, measured
 * <= 1.5e-7 of the state's magnitude. The first moment sums gradients of
 * either sign, so entries cancel towards zero while their rounding error stays
 * that of the terms: the floor is the full RMS of the reference state. A
 * wrong update order (e.g. decay after the Adam step) is off by lr^2*wd ~ 1e-5. */
#define OPT_TOL 1e-6
#define OPT_FLOOR 1.0

static const struct st_ops *ops(void)
{
	const struct st_ops *o = ops_cpu();
	cr_assert(o && !strcmp(o->name, "cpu"));
	return o;
}

static float *fmalloc(size_t n)
{
	float *p = malloc((n ? n : 1) * sizeof(float));
	cr_assert(p);
	return p;
}

static double *dmalloc(size_t n)
{
	double *p = malloc((n ? n : 1) * sizeof(double));
	cr_assert(p);
	return p;
}

static float *frand(size_t n, double sd, uint64_t *seed)
{
	float *p = fmalloc(n);
	tu_fill_normal(p, n, sd, seed);
	return p;
}

static float *fnan(size_t n)
{
	float *p = fmalloc(n);
	for (size_t i = 0; i < n; i++)
		p[i] = NAN;
	return p;
}

static double *todouble(const float *x, size_t n)
{
	double *d = dmalloc(n);
	for (size_t i = 0; i < n; i++)
		d[i] = x[i];
	return d;
}

static float *fcopy(const float *x, size_t n)
{
	float *p = fmalloc(n);
	memcpy(p, x, n * sizeof(float));
	return p;
}

/* Max over sampled entries (every stride-th) of |got-ref| / (|ref| + floor),
 * floor = floor_frac times the RMS of the sampled reference; fails the test if
 * above tol. NaN counts as infinitely wrong. */
static double expect_close_f(const char *what, const float *got, const double *ref, size_t n,
			     size_t stride, double tol, double floor_frac)
{
	double ss = 0;
	size_t cnt = 0;
	for (size_t i = 0; i < n; i += stride, cnt++)
		ss += ref[i] * ref[i];
	double floor_ = floor_frac * sqrt(ss / (double)(cnt ? cnt : 1)) + 1e-30;
	double worst = 0;
	size_t at = 0;
	for (size_t i = 0; i < n; i += stride) {
		double e = fabs((double)got[i] - ref[i]) / (fabs(ref[i]) + floor_);
		if (!(e <= worst)) {
			worst = isnan(e) ? INFINITY : e;
			at = i;
		}
	}
	cr_expect(worst <= tol, "%s: max relative error %.3g > %.3g at [%zu]: got %.9g, ref %.9g",
		  what, worst, tol, at, n ? (double)got[at] : 0.0, n ? ref[at] : 0.0);
	return worst;
}

static double expect_close(const char *what, const float *got, const double *ref, size_t n,
			   size_t stride, double tol)
{
	return expect_close_f(what, got, ref, n, stride, tol, FLOOR);
}

/* ---- finite differences ---------------------------------------------------
 * A reference op reads its float64 inputs from in[] and writes out (out_n).
 * fd_grad fills grad[i] = dL/d in[which][i] for every stride-th i, where
 * L = sum(dout * out), by central differences. */
struct ref_op {
	void (*f)(const struct ref_op *op, double *out);
	double *in[3];
	size_t in_n[3];
	size_t out_n;
	int d[8];		/* op-specific sizes */
	const int32_t *ints;	/* tokens or targets */
	double eps;
};

static void fd_grad(const struct ref_op *op, int which, const double *dout, double *grad,
		    size_t stride)
{
	double *out = dmalloc(op->out_n);
	double *x = op->in[which];
	for (size_t i = 0; i < op->in_n[which]; i += stride) {
		double x0 = x[i], lp = 0, lm = 0;
		x[i] = x0 + FD_H;
		op->f(op, out);
		for (size_t j = 0; j < op->out_n; j++)
			lp += dout[j] * out[j];
		x[i] = x0 - FD_H;
		op->f(op, out);
		for (size_t j = 0; j < op->out_n; j++)
			lm += dout[j] * out[j];
		x[i] = x0;
		grad[i] = (lp - lm) / (2 * FD_H);
	}
	free(out);
}

/* ---- the CPU backend's vectorizable exp ----------------------------------- */

/* Within 2 ulp of exp on [-87, 88] (the polynomial is good to ~1 ulp), 0 and
 * inf outside, NaN propagated. Softmax, sigmoid and xent rest on it. */
Test(ops, cpu_expf_accuracy)
{
	double worst = 0, at = 0;
	for (long i = 0; i <= 2000000; i++) {
		float x = (float)(-87.0 + 175.0 * (double)i / 2000000.0);
		double e = exp((double)x), got = cpu_expf(x);
		double ulp = (double)nextafterf((float)e, INFINITY) - (double)(float)e;
		double err = fabs(got - e) / ulp;
		if (!(err <= worst))
			worst = err, at = x;
	}
	cr_expect(worst <= 2.0, "cpu_expf: %.3g ulp from exp at x = %.9g", worst, at);
	cr_expect(cpu_expf(0.0f) == 1.0f);
	cr_expect(isnan(cpu_expf(NAN)), "cpu_expf(NaN) must be NaN");
	cr_expect(cpu_expf(-87.5f) == 0.0f && cpu_expf(-INFINITY) == 0.0f,
		  "cpu_expf below -87 must flush to 0");
	cr_expect(cpu_expf(88.5f) == INFINITY && cpu_expf(INFINITY) == INFINITY,
		  "cpu_expf above 88 must overflow to inf");
}

/* ---- matmul, fp32 and bf16 --------------------------------------------------- */

/* x rounded to bf16, to nearest with ties to even, written here from the
 * definition (the kernel has oneDNN do it) */
static float ref_bf16(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return x; /* NaN stays NaN */
	const uint32_t low = u & 0xffffu, half = 0x8000u;
	u &= 0xffff0000u;
	if (low > half || (low == half && (u & 0x10000u)))
		u += 0x10000u; /* carries into the exponent, up to inf, as it should */
	float r;
	memcpy(&r, &u, 4);
	return r;
}

/* Skips where oneDNN has no bf16 matmul for this CPU (AVX2 only). */
static void need_bf16(void)
{
	const char *impl;
	if (!ops()->matmul_bf16_native(&impl) && !strcmp(impl, "none"))
		cr_skip_test("%s", impl);
}

/* c = alpha op(a) op(b) + beta c for all four transpose combinations, with
 * row strides larger than the rows, beta != 0, and the padding of c
 * untouched; ws_bytes 0: the fp32 matmul, against a float64 product (FWD_TOL
 * with SUM_FLOOR); else matmul_bf16 with that workspace, against a float64
 * product of the operands rounded to bf16: each product of two bf16 values is
 * exact in fp32, so what is left is the fp32 summation's rounding, FWD_TOL
 * again. Rounding by truncation instead of to nearest would be off by
 * ~2^-9 relative, and fp32 inputs by as much (asserted: the rounding
 * shows). */
static void check_matmul_ws(int m, int n, int k, size_t ws_bytes, uint64_t seed)
{
	const int bf16 = ws_bytes > 0;
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			int ar = ta ? k : m, ac = ta ? m : k; /* a as stored */
			int br = tb ? n : k, bc = tb ? k : n;
			int lda = ac + 3, ldb = bc + 2, ldc = n + 5;
			float *a = frand((size_t)ar * lda, 1, &seed);
			float *b = frand((size_t)br * ldb, 1, &seed);
			float *c = frand((size_t)m * ldc, 1, &seed);
			float *c0 = fcopy(c, (size_t)m * ldc);
			void *ws = bf16 ? aligned_alloc(64, (ws_bytes + 63) & ~(size_t)63) : NULL;
			cr_assert(!bf16 || ws);
			const float alpha = 0.7f, beta = -1.3f;
			if (bf16)
				ops()->matmul_bf16(c, a, b, m, n, k, ta, tb, alpha, beta, lda, ldb, ldc, ws,
						   ws_bytes);
			else
				ops()->matmul(c, a, b, m, n, k, ta, tb, alpha, beta, lda, ldb, ldc);
			double *ref = dmalloc((size_t)m * n);
			float *got = fmalloc((size_t)m * n);
			double off32 = 0, rms = 0; /* how far fp32 inputs would be */
			for (int i = 0; i < m; i++)
				for (int j = 0; j < n; j++) {
					double s = 0, s32 = 0;
					for (int p = 0; p < k; p++) {
						float av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
						float bv = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
						s += bf16 ? (double)ref_bf16(av) * ref_bf16(bv) : (double)av * bv;
						s32 += (double)av * bv;
					}
					const size_t o = (size_t)i * n + j;
					ref[o] = (double)alpha * s + (double)beta * c0[(size_t)i * ldc + j];
					got[o] = c[(size_t)i * ldc + j];
					off32 = fmax(off32, fabs(alpha * (s - s32)));
					rms += ref[o] * ref[o];
				}
			rms = sqrt(rms / ((double)m * n));
			char what[128];
			snprintf(what, sizeof what, "%smatmul %dx%dx%d ta=%d tb=%d ws=%zu", bf16 ? "bf16 " : "",
				 m, n, k, ta, tb, ws_bytes);
			expect_close_f(what, got, ref, (size_t)m * n, 1, FWD_TOL, SUM_FLOOR);
			cr_expect(!bf16 || off32 > 100 * FWD_TOL * rms,
				  "%s: the bf16 rounding must show (%g of an RMS %g)", what, off32, rms);
			for (int i = 0; i < m; i++)
				cr_expect(!memcmp(c + (size_t)i * ldc + n, c0 + (size_t)i * ldc + n,
						  (size_t)(ldc - n) * sizeof(float)),
					  "%s: wrote past n in row %d", what, i);
			free(a), free(b), free(c), free(c0), free(ref), free(got), free(ws);
		}
}

static void check_matmul(int m, int n, int k, uint64_t seed) { check_matmul_ws(m, n, k, 0, seed); }

static void check_matmul_bf16(int m, int n, int k, size_t ws_bytes, uint64_t seed)
{
	check_matmul_ws(m, n, k, ws_bytes, seed);
}

Test(ops, matmul_transposes_strides_beta)
{
	check_matmul(5, 7, 9, 0x11);
	check_matmul(67, 45, 129, 0x12); /* past oneDNN's register blocking */
}

Test(ops, matmul_bf16_rounds_inputs_sums_fp32)
{
	need_bf16();
	check_matmul_bf16(5, 7, 9, 1 << 20, 0x21);
	check_matmul_bf16(67, 45, 129, 1 << 20, 0x22);
}

/* The tiles cpu_matmul_bf16 cuts a product into fit its workspace (the
 * second tile starts 64-byte aligned after the first) and are non-empty
 * and within the product, over shapes from 1 to past the workspace and
 * workspaces from the smallest to the largest a model sizes: arithmetic
 * alone, run on every CPU. */
Test(ops, matmul_bf16_tiles_fit)
{
	const int dims[] = {1, 2, 15, 16, 17, 31, 33, 255, 256, 257, 1000, 2048, 4097, 32000, 131072};
	const size_t wss[] = {ST_MATMUL_BF16_MIN_WS, ST_MATMUL_BF16_MIN_WS + 64, 100032, 1 << 20,
			      (size_t)37 << 20, (size_t)64 << 20};
	const int nd = (int)(sizeof dims / sizeof *dims);
	long checked = 0;
	for (size_t w = 0; w < sizeof wss / sizeof *wss; w++)
		for (int i = 0; i < nd; i++)
			for (int j = 0; j < nd; j++)
				for (int l = 0; l < nd; l++) {
					const int m = dims[i], n = dims[j], k = dims[l];
					int mc, nc, kc;
					cpu_matmul_bf16_tiles(m, n, k, wss[w], &mc, &nc, &kc);
					const size_t a = ((size_t)mc * kc * 2 + 63) & ~(size_t)63;
					const size_t used = a + (size_t)nc * kc * 2;
					checked++;
					cr_assert(mc >= 1 && mc <= m && nc >= 1 && nc <= n && kc >= 1 &&
							  kc <= k && used <= wss[w],
						  "%dx%dx%d in %zu bytes: tiles %dx%d, k %d use %zu", m, n, k,
						  wss[w], mc, nc, kc, used);
				}
	cr_expect(checked == 6L * nd * nd * nd);
}

/* The smallest workspace cuts the product into tiles of c and chunks of k;
 * the result is the same product to fp32 rounding. */
Test(ops, matmul_bf16_in_tiles)
{
	need_bf16();
	int mc, nc, kc;
	cpu_matmul_bf16_tiles(300, 200, 700, ST_MATMUL_BF16_MIN_WS, &mc, &nc, &kc);
	cr_assert(mc < 300 && nc < 200 && kc < 700 && kc % 32 == 0,
		  "300x200x700 in 64 KiB: tiles %dx%d, k chunks of %d", mc, nc, kc);
	cr_assert(((size_t)mc * kc + (size_t)nc * kc) * 2 + 128 <= ST_MATMUL_BF16_MIN_WS);
	check_matmul_bf16(300, 200, 700, ST_MATMUL_BF16_MIN_WS, 0x23);
	/* a workspace holding both operands whole: one tile */
	cpu_matmul_bf16_tiles(300, 200, 700, (size_t)(300 + 200) * 700 * 2 + 256, &mc, &nc, &kc);
	cr_expect(mc == 300 && nc == 200 && kc == 700, "one tile: %dx%d, k %d", mc, nc, kc);
	/* k alone in chunks where a long k meets a small c */
	cpu_matmul_bf16_tiles(16, 16, 100000, 1 << 20, &mc, &nc, &kc);
	cr_expect(mc == 16 && nc == 16 && kc < 100000 && kc >= 256, "%dx%d, k %d", mc, nc, kc);
	check_matmul_bf16(16, 24, 5000, ST_MATMUL_BF16_MIN_WS, 0x24);
}

/* Rounding exactly: x (m,1) @ 1 (1,1) is bf16(x), bit for bit, at ties
 * (to even, both ways), just past them, at the carry into the exponent and
 * to inf (the largest float, and a tie below it); NaN stays NaN. (-0 is
 * left out: a sum starting from +0 gives +0, in fp32 matmuls too.) */
Test(ops, matmul_bf16_rounding_bits)
{
	need_bf16();
	const float h = 0x1p-8f; /* half a bf16 ulp at 1 */
	const float xs[] = {1 + h,	     1 + 3 * h,	     -(1 + h),	   -(1 + 3 * h),
			    1 + h + 0x1p-20f, 1 + h - 0x1p-20f, 2 - h,	   0x1.fffffep127f,
			    0x1.fe0000p127f,  0x1.ff0000p127f,  -0x1.fffffep127f, 1e-30f,
			    3.14159265f,      -2.7182818f,	     INFINITY,	   -INFINITY,
			    0.0f,	      65504.0f,	     0x1.010000p-126f, NAN};
	const int m = (int)(sizeof xs / sizeof *xs);
	float one = 1.0f, c[sizeof xs / sizeof *xs];
	void *ws = aligned_alloc(64, ST_MATMUL_BF16_MIN_WS);
	cr_assert(ws);
	ops()->matmul_bf16(c, xs, &one, m, 1, 1, 0, 0, 1.0f, 0.0f, 1, 1, 1, ws, ST_MATMUL_BF16_MIN_WS);
	for (int i = 0; i < m; i++) {
		const float want = ref_bf16(xs[i]);
		if (isnan(want))
			cr_expect(isnan(c[i]), "bf16(NaN) gave %a", (double)c[i]);
		else
			cr_expect(!memcmp(&c[i], &want, 4), "bf16(%a) gave %a, not %a", (double)xs[i],
				  (double)c[i], (double)want);
	}
	free(ws);
}

/* ---- embedding ---------------------------------------------------------------- */

static void ref_embedding(const struct ref_op *op, double *out)
{
	int n = op->d[0], c = op->d[1];
	for (int i = 0; i < n; i++)
		for (int j = 0; j < c; j++)
			out[(size_t)i * c + j] = op->in[0][(size_t)op->ints[i] * c + j];
}

Test(ops, embedding)
{
	uint64_t seed = 0x21;
	const int n = 13, c = 70, v = 7; /* c spans two 64-column bands */
	int32_t tok[13];
	for (int i = 0; i < n; i++) /* row v-1 never used; repeats guaranteed */
		tok[i] = (int32_t)(tu_next(&seed) % (uint64_t)(v - 1));
	float *wte = frand((size_t)v * c, 1, &seed);
	float *out = fnan((size_t)n * c);
	ops()->embedding_forward(out, tok, wte, n, c);
	for (int i = 0; i < n; i++)
		cr_expect(!memcmp(out + (size_t)i * c, wte + (size_t)tok[i] * c, c * sizeof(float)),
			  "embedding_forward row %d is not wte[%d]", i, tok[i]);

	float *dout = frand((size_t)n * c, 1, &seed);
	float *dwte = frand((size_t)v * c, 1, &seed); /* += target */
	double *ref = todouble(dwte, (size_t)v * c), *g = dmalloc((size_t)v * c);
	ops()->embedding_backward(dwte, dout, tok, n, c, v);
	struct ref_op op = { .f = ref_embedding, .in = { todouble(wte, (size_t)v * c) },
			     .in_n = { (size_t)v * c }, .out_n = (size_t)n * c, .d = { n, c },
			     .ints = tok };
	double *dd = todouble(dout, (size_t)n * c);
	fd_grad(&op, 0, dd, g, 1);
	for (size_t i = 0; i < (size_t)v * c; i++)
		ref[i] += g[i];
	expect_close("embedding_backward dwte (+=)", dwte, ref, (size_t)v * c, 1, GRAD_TOL);
	free(wte), free(out), free(dout), free(dwte), free(ref), free(g), free(op.in[0]), free(dd);
}

/* ---- rmsnorm ---------------------------------------------------------------- */

static void ref_rmsnorm_rstd(const double *x, double *rstd, int n, int c, double eps)
{
	for (int i = 0; i < n; i++) {
		double ss = 0;
		for (int j = 0; j < c; j++)
			ss += x[(size_t)i * c + j] * x[(size_t)i * c + j];
		rstd[i] = 1.0 / sqrt(ss / c + eps);
	}
}

static void ref_rmsnorm(const struct ref_op *op, double *out)
{
	int n = op->d[0], c = op->d[1];
	double *rstd = dmalloc((size_t)n);
	ref_rmsnorm_rstd(op->in[0], rstd, n, c, op->eps);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < c; j++)
			out[(size_t)i * c + j] = op->in[0][(size_t)i * c + j] * rstd[i] * op->in[1][j];
	free(rstd);
}

Test(ops, rmsnorm)
{
	uint64_t seed = 0x31;
	const int n = 5, c = 70;
	const float eps = 1e-5f;
	const size_t nc = (size_t)n * c;
	float *x = frand(nc, 1, &seed), *w = frand((size_t)c, 1, &seed);
	for (int j = 0; j < c; j++) /* row 1: mean(x^2) ~ eps, so eps matters */
		x[c + j] *= 3e-3f;
	float *out = fnan(nc), *rstd = fnan((size_t)n);
	ops()->rmsnorm_forward(out, rstd, x, w, n, c, eps);
	struct ref_op op = { .f = ref_rmsnorm, .in = { todouble(x, nc), todouble(w, (size_t)c) },
			     .in_n = { nc, (size_t)c }, .out_n = nc, .d = { n, c }, .eps = eps };
	double *ref = dmalloc(nc), *rref = dmalloc((size_t)n);
	ref_rmsnorm(&op, ref);
	ref_rmsnorm_rstd(op.in[0], rref, n, c, eps);
	expect_close("rmsnorm_forward out", out, ref, nc, 1, FWD_TOL);
	expect_close("rmsnorm_forward rstd", rstd, rref, (size_t)n, 1, FWD_TOL);

	float *dout = frand(nc, 1, &seed), *dx = fnan(nc), *dw = frand((size_t)c, 1, &seed);
	double *dwref = todouble(dw, (size_t)c), *gx = dmalloc(nc), *gw = dmalloc((size_t)c);
	ops()->rmsnorm_backward(dx, dw, dout, x, w, rstd, n, c);
	double *dd = todouble(dout, nc);
	fd_grad(&op, 0, dd, gx, 1);
	fd_grad(&op, 1, dd, gw, 1);
	for (int j = 0; j < c; j++)
		dwref[j] += gw[j];
	expect_close("rmsnorm_backward dx", dx, gx, nc, 1, GRAD_TOL);
	expect_close("rmsnorm_backward dw (+=)", dw, dwref, (size_t)c, 1, GRAD_TOL);
	free(x), free(w), free(out), free(rstd), free(op.in[0]), free(op.in[1]), free(ref);
	free(rref), free(dout), free(dx), free(dw), free(dwref), free(gx), free(gw), free(dd);
}

/* ---- layernorm ------------------------------------------------------------ */

static void ref_layernorm_stats(const double *x, double *mean, double *rstd, int n, int c,
				double eps)
{
	for (int i = 0; i < n; i++) {
		double s = 0, v = 0;
		for (int j = 0; j < c; j++)
			s += x[(size_t)i * c + j];
		double mu = s / c;
		for (int j = 0; j < c; j++)
			v += (x[(size_t)i * c + j] - mu) * (x[(size_t)i * c + j] - mu);
		mean[i] = mu;
		rstd[i] = 1.0 / sqrt(v / c + eps);
	}
}

static void ref_layernorm(const struct ref_op *op, double *out)
{
	int n = op->d[0], c = op->d[1];
	double *mean = dmalloc((size_t)n), *rstd = dmalloc((size_t)n);
	ref_layernorm_stats(op->in[0], mean, rstd, n, c, op->eps);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < c; j++)
			out[(size_t)i * c + j] = (op->in[0][(size_t)i * c + j] - mean[i]) * rstd[i] *
							 op->in[1][j] +
						 op->in[2][j];
	free(mean), free(rstd);
}

Test(ops, layernorm)
{
	uint64_t seed = 0x35;
	const int n = 6, c = 70;
	const float eps = 1e-5f;
	const size_t nc = (size_t)n * c;
	float *x = frand(nc, 1, &seed), *w = frand((size_t)c, 1, &seed), *b = frand((size_t)c, 1, &seed);
	for (int j = 0; j < c; j++) /* row 1: offset mean, variance ~ eps */
		x[c + j] = 2.0f + 3e-3f * x[c + j];
	float *out = fnan(nc), *mean = fnan((size_t)n), *rstd = fnan((size_t)n);
	ops()->layernorm_forward(out, mean, rstd, x, w, b, n, c, eps);
	struct ref_op op = { .f = ref_layernorm,
			     .in = { todouble(x, nc), todouble(w, (size_t)c), todouble(b, (size_t)c) },
			     .in_n = { nc, (size_t)c, (size_t)c }, .out_n = nc, .d = { n, c }, .eps = eps };
	double *ref = dmalloc(nc), *mref = dmalloc((size_t)n), *rref = dmalloc((size_t)n);
	ref_layernorm(&op, ref);
	ref_layernorm_stats(op.in[0], mref, rref, n, c, eps);
	expect_close("layernorm_forward out", out, ref, nc, 1, FWD_TOL);
	expect_close("layernorm_forward rstd", rstd, rref, (size_t)n, 1, FWD_TOL);
	expect_close("layernorm_forward mean", mean, mref, (size_t)n, 1, FWD_TOL);

	float *dout = frand(nc, 1, &seed), *dx = fnan(nc);
	float *dw = frand((size_t)c, 1, &seed), *db = frand((size_t)c, 1, &seed);
	double *dwref = todouble(dw, (size_t)c), *dbref = todouble(db, (size_t)c);
	double *gx = dmalloc(nc), *gw = dmalloc((size_t)c), *gb = dmalloc((size_t)c);
	ops()->layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, n, c);
	double *dd = todouble(dout, nc);
	fd_grad(&op, 0, dd, gx, 1);
	fd_grad(&op, 1, dd, gw, 1);
	fd_grad(&op, 2, dd, gb, 1);
	for (int j = 0; j < c; j++) {
		dwref[j] += gw[j];
		dbref[j] += gb[j];
	}
	expect_close("layernorm_backward dx", dx, gx, nc, 1, GRAD_TOL);
	expect_close("layernorm_backward dw (+=)", dw, dwref, (size_t)c, 1, GRAD_TOL);
	expect_close("layernorm_backward db (+=)", db, dbref, (size_t)c, 1, GRAD_TOL);
	free(x), free(w), free(b), free(out), free(mean), free(rstd), free(op.in[0]), free(op.in[1]);
	free(op.in[2]), free(ref), free(mref), free(rref), free(dout), free(dx), free(dw), free(db);
	free(dwref), free(dbref), free(gx), free(gw), free(gb), free(dd);
}

/* ---- rope ---------------------------------------------------------------- */

#define ROPE_THETA 10000.0

static void ref_rope(const struct ref_op *op, double *out)
{
	int b = op->d[0], t = op->d[1], h = op->d[2], hd = op->d[3], half = hd / 2;
	const double *x = op->in[0];
	for (int r = 0; r < b * t; r++)
		for (int j = 0; j < h; j++)
			for (int i = 0; i < half; i++) {
				double a = (r % t) * pow(ROPE_THETA, -2.0 * i / hd);
				size_t o = ((size_t)r * h + j) * hd + i;
				out[o] = x[o] * cos(a) - x[o + half] * sin(a);
				out[o + half] = x[o + half] * cos(a) + x[o] * sin(a);
			}
}

Test(ops, rope_table_rounds_double_angles)
{
	const int t = 300, hd = 16, half = hd / 2;
	float *ct = fnan((size_t)t * half), *st = fnan((size_t)t * half);
	rope_table(ct, st, t, hd, ROPE_THETA);
	for (int p = 0; p < t; p++)
		for (int i = 0; i < half; i++) {
			double a = p * pow(ROPE_THETA, -2.0 * i / hd);
			/* rounded once from double: within half an fp32 ulp */
			double ec = fabs(ct[p * half + i] - cos(a)), es = fabs(st[p * half + i] - sin(a));
			cr_expect(ec <= 6.0e-8 * fabs(cos(a)) + 1e-45 && es <= 6.0e-8 * fabs(sin(a)) + 1e-45,
				  "rope_table[%d][%d]: cos %.9g vs %.17g, sin %.9g vs %.17g", p, i,
				  ct[p * half + i], cos(a), st[p * half + i], sin(a));
		}
	free(ct), free(st);
}

Test(ops, rope)
{
	uint64_t seed = 0x41;
	const int b = 2, t = 5, h = 3, hd = 8;
	const size_t nx = (size_t)b * t * h * hd;
	float *ct = fmalloc((size_t)t * hd / 2), *st = fmalloc((size_t)t * hd / 2);
	rope_table(ct, st, t, hd, ROPE_THETA);
	float *x = frand(nx, 1, &seed), *y = fcopy(x, nx);
	ops()->rope(y, ct, st, b, t, h, hd, +1);
	struct ref_op op = { .f = ref_rope, .in = { todouble(x, nx) }, .in_n = { nx }, .out_n = nx,
			     .d = { b, t, h, hd } };
	double *ref = dmalloc(nx);
	ref_rope(&op, ref);
	expect_close("rope forward", y, ref, nx, 1, FWD_TOL);

	/* backward: dx = rope(dout, dir=-1) is the transpose of the rotation */
	float *dout = frand(nx, 1, &seed), *dx = fcopy(dout, nx);
	ops()->rope(dx, ct, st, b, t, h, hd, -1);
	double *dd = todouble(dout, nx), *g = dmalloc(nx);
	fd_grad(&op, 0, dd, g, 1);
	expect_close("rope backward (dir=-1)", dx, g, nx, 1, GRAD_TOL);
	free(ct), free(st), free(x), free(y), free(op.in[0]), free(ref), free(dout), free(dx);
	free(dd), free(g);
}

Test(ops, rope_inverse_undoes_forward)
{
	uint64_t seed = 0x42;
	const int b = 2, t = 37, h = 2, hd = 16;
	const size_t nx = (size_t)b * t * h * hd;
	float *ct = fmalloc((size_t)t * hd / 2), *st = fmalloc((size_t)t * hd / 2);
	rope_table(ct, st, t, hd, ROPE_THETA);
	float *x = frand(nx, 1, &seed), *y = fcopy(x, nx);
	ops()->rope(y, ct, st, b, t, h, hd, +1);
	ops()->rope(y, ct, st, b, t, h, hd, -1);
	double worst = 0;
	for (size_t i = 0; i < nx; i++)
		worst = fmax(worst, fabs((double)y[i] - x[i]) / (fabs(x[i]) + 1.0));
	/* cos^2+sin^2 of the rounded tables is 1 within ~1e-7, plus 4 roundings */
	cr_expect(worst <= 1e-6, "rope(-1) after rope(+1) differs from x by %.3g", worst);
	free(ct), free(st), free(x), free(y);
}

/* ---- attention ---------------------------------------------------------------- */

/* Naive masked softmax attention in float64: scores for every key, mask
 * above the diagonal with -inf, softmax, weighted sum of values. */
static void ref_attention_full(const double *q, const double *k, const double *v, double *out,
			       double *lse, int b, int t, int h, int hkv, int hd)
{
	double scale = 1.0 / sqrt((double)hd);
	double *s = dmalloc((size_t)t);
	for (int bb = 0; bb < b; bb++)
		for (int hh = 0; hh < h; hh++) {
			int g = hh / (h / hkv);
			for (int i = 0; i < t; i++) {
				const double *qi = q + ((size_t)(bb * t + i) * h + hh) * hd;
				double m = -INFINITY;
				for (int j = 0; j < t; j++) {
					const double *kj = k + ((size_t)(bb * t + j) * hkv + g) * hd;
					double dot = 0;
					for (int d = 0; d < hd; d++)
						dot += qi[d] * kj[d];
					s[j] = j <= i ? dot * scale : -INFINITY;
					m = fmax(m, s[j]);
				}
				double z = 0;
				for (int j = 0; j < t; j++)
					z += exp(s[j] - m);
				double *oi = out + ((size_t)(bb * t + i) * h + hh) * hd;
				for (int d = 0; d < hd; d++)
					oi[d] = 0;
				for (int j = 0; j < t; j++) {
					double p = exp(s[j] - m) / z;
					const double *vj = v + ((size_t)(bb * t + j) * hkv + g) * hd;
					for (int d = 0; d < hd; d++)
						oi[d] += p * vj[d];
				}
				if (lse)
					lse[((size_t)bb * h + hh) * t + i] = m + log(z);
			}
		}
	free(s);
}

static void ref_attention(const struct ref_op *op, double *out)
{
	ref_attention_full(op->in[0], op->in[1], op->in[2], out, NULL, op->d[0], op->d[1],
			   op->d[2], op->d[3], op->d[4]);
}

/* fd_stride > 1 checks the gradient on every fd_stride-th entry only (long T). */
static void check_attention(int b, int t, int h, int hkv, int hd, size_t fd_stride,
			    uint64_t seed)
{
	const size_t nq = (size_t)b * t * h * hd, nk = (size_t)b * t * hkv * hd;
	const size_t nl = (size_t)b * h * t;
	char what[128];
	float *q = frand(nq, 1, &seed), *k = frand(nk, 1, &seed), *v = frand(nk, 1, &seed);
	float *out = fnan(nq), *lse = fnan(nl);
	ops()->attention_forward(out, lse, q, k, v, b, t, h, hkv, hd);
	struct ref_op op = { .f = ref_attention,
			     .in = { todouble(q, nq), todouble(k, nk), todouble(v, nk) },
			     .in_n = { nq, nk, nk }, .out_n = nq, .d = { b, t, h, hkv, hd } };
	double *ref = dmalloc(nq), *lref = dmalloc(nl);
	ref_attention_full(op.in[0], op.in[1], op.in[2], ref, lref, b, t, h, hkv, hd);
	snprintf(what, sizeof what, "attention B=%d T=%d H=%d Hkv=%d hd=%d", b, t, h, hkv, hd);
	char w2[160];
	snprintf(w2, sizeof w2, "%s forward out", what);
	expect_close_f(w2, out, ref, nq, 1, FWD_TOL, SUM_FLOOR);
	snprintf(w2, sizeof w2, "%s forward lse", what);
	expect_close(w2, lse, lref, nl, 1, FWD_TOL);

	float *dout = frand(nq, 1, &seed);
	float *dq = fnan(nq), *dk = fnan(nk), *dv = fnan(nk);
	ops()->attention_backward(dq, dk, dv, dout, q, k, v, out, lse, b, t, h, hkv, hd);
	double *dd = todouble(dout, nq), *g = dmalloc(nq);
	const float *got[3] = { dq, dk, dv };
	const char *name[3] = { "dq", "dk", "dv" };
	for (int which = 0; which < 3; which++) {
		fd_grad(&op, which, dd, g, fd_stride);
		snprintf(w2, sizeof w2, "%s backward %s", what, name[which]);
		expect_close(w2, got[which], g, op.in_n[which], fd_stride, GRAD_TOL);
	}
	free(q), free(k), free(v), free(out), free(lse), free(ref), free(lref), free(dout);
	free(dq), free(dk), free(dv), free(dd), free(g);
	for (int i = 0; i < 3; i++)
		free(op.in[i]);
}

Test(ops, attention_gqa)
{
	check_attention(2, 7, 4, 2, 16, 1, 0x51);
}
Test(ops, attention_mha)
{
	check_attention(2, 7, 4, 4, 8, 1, 0x52);
}
Test(ops, attention_mqa_odd_headdim)
{
	check_attention(2, 9, 3, 1, 6, 1, 0x53);
}
/* T > 2 query blocks of 64: block boundaries, causal prefix lengths, and the
 * GQA partial-sum reduction over several blocks. Gradients sampled. */
Test(ops, attention_long_sequence)
{
	check_attention(1, 131, 4, 2, 8, 13, 0x54);
}

/* A decoder's attention over a key/value cache: n queries at positions
 * p0 .. p0+n-1 against the cache's first p0+n keys give the float64
 * reference's rows p0 .. p0+n-1 of the full causal attention, at splits on
 * and off the 64-row blocks (one new token, a chunk crossing a block, a
 * whole prompt); the whole sequence from position 0 is the training forward
 * bit for bit (the same code). */
static void check_attention_cached(int t, int h, int hkv, int hd, uint64_t seed)
{
	const size_t qd = (size_t)h * hd, kd = (size_t)hkv * hd;
	float *q = frand((size_t)t * qd, 1, &seed), *k = frand((size_t)t * kd, 1, &seed);
	float *v = frand((size_t)t * kd, 1, &seed);
	double *ref = dmalloc((size_t)t * qd);
	double *dq = todouble(q, (size_t)t * qd), *dk = todouble(k, (size_t)t * kd);
	double *dv = todouble(v, (size_t)t * kd);
	ref_attention_full(dq, dk, dv, ref, NULL, 1, t, h, hkv, hd);
	const int splits[][2] = {{0, t}, {0, 1}, {1, 1}, {t - 1, 1}, {t / 2, 1}, {3, t - 3},
				 {60, 10 < t - 60 ? 10 : t - 60}, {t - 5, 5}};
	char what[128];
	for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
		const int p0 = splits[i][0], n = splits[i][1];
		if (p0 < 0 || n < 1 || p0 + n > t)
			continue;
		float *out = fnan((size_t)n * qd);
		ops()->attention_cached(out, q + (size_t)p0 * qd, k, v, n, p0, h, hkv, hd);
		snprintf(what, sizeof what, "attention_cached T=%d H=%d Hkv=%d hd=%d p0=%d n=%d", t, h,
			 hkv, hd, p0, n);
		expect_close_f(what, out, ref + (size_t)p0 * qd, (size_t)n * qd, 1, FWD_TOL, SUM_FLOOR);
		free(out);
	}
	float *full = fnan((size_t)t * qd), *lse = fnan((size_t)h * t), *cached = fnan((size_t)t * qd);
	ops()->attention_forward(full, lse, q, k, v, 1, t, h, hkv, hd);
	ops()->attention_cached(cached, q, k, v, t, 0, h, hkv, hd);
	cr_expect(memcmp(full, cached, (size_t)t * qd * sizeof(float)) == 0,
		  "attention_cached from position 0 differs from attention_forward");
	free(q), free(k), free(v), free(ref), free(dq), free(dk), free(dv);
	free(full), free(lse), free(cached);
}

Test(ops, attention_cached_matches_causal_rows)
{
	check_attention_cached(9, 4, 2, 16, 0x61);
	check_attention_cached(131, 4, 1, 8, 0x62);
	check_attention_cached(70, 3, 3, 6, 0x63);
}

/* ---- swiglu ---------------------------------------------------------------- */

static void ref_swiglu(const struct ref_op *op, double *out)
{
	for (size_t i = 0; i < op->out_n; i++) {
		double g = op->in[0][i];
		out[i] = g / (1.0 + exp(-g)) * op->in[1][i];
	}
}

Test(ops, swiglu)
{
	uint64_t seed = 0x61;
	const size_t n = 1003;
	/* sd 3 reaches the saturated ends of the sigmoid */
	float *gate = frand(n, 3, &seed), *up = frand(n, 1, &seed), *out = fnan(n);
	ops()->swiglu_forward(out, gate, up, n);
	struct ref_op op = { .f = ref_swiglu, .in = { todouble(gate, n), todouble(up, n) },
			     .in_n = { n, n }, .out_n = n };
	double *ref = dmalloc(n), *g = dmalloc(n);
	ref_swiglu(&op, ref);
	expect_close("swiglu_forward", out, ref, n, 1, FWD_TOL);
	float *dout = frand(n, 1, &seed), *dgate = fnan(n), *dup = fnan(n);
	ops()->swiglu_backward(dgate, dup, dout, gate, up, n);
	double *dd = todouble(dout, n);
	fd_grad(&op, 0, dd, g, 1);
	expect_close("swiglu_backward dgate", dgate, g, n, 1, GRAD_TOL);
	fd_grad(&op, 1, dd, g, 1);
	expect_close("swiglu_backward dup", dup, g, n, 1, GRAD_TOL);
	free(gate), free(up), free(out), free(op.in[0]), free(op.in[1]), free(ref), free(g);
	free(dout), free(dgate), free(dup), free(dd);
}

/* Saturated gates: silu(g) -> g for g >> 0 and -> 0 for g << 0, without NaN
 * where exp(-g) overflows fp32. */
Test(ops, swiglu_saturates)
{
	const float gv[4] = { 100.0f, -100.0f, 1e30f, -1e30f };
	float one[4] = { 1, 1, 1, 1 }, out[4], dg[4], du[4];
	ops()->swiglu_forward(out, gv, one, 4);
	ops()->swiglu_backward(dg, du, one, gv, one, 4);
	for (int i = 0; i < 4; i++) {
		double want = gv[i] > 0 ? gv[i] : 0.0, dwant = gv[i] > 0 ? 1.0 : 0.0;
		cr_expect(fabs(out[i] - want) <= 1e-6 * fabs(want) + 1e-30 &&
				  fabs(dg[i] - dwant) <= 1e-6 && fabs(du[i] - want) <= 1e-6 * fabs(want) + 1e-30,
			  "swiglu at gate %g: out %g dgate %g dup %g", gv[i], out[i], dg[i], du[i]);
	}
}

/* ---- elementwise ---------------------------------------------------------------- */

/* fp32 add and multiply are correctly rounded, and the double result of two
 * floats is exact, so the kernels must match bit for bit. n crosses the
 * threshold where the kernels go parallel. */
Test(ops, add_inplace_and_scale_exact)
{
	uint64_t seed = 0x71;
	const size_t n = 40009;
	float *y = frand(n, 1, &seed), *x = frand(n, 1, &seed), *y0 = fcopy(y, n);
	ops()->add_inplace(y, x, n);
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += y[i] != (float)((double)y0[i] + (double)x[i]);
	cr_expect(bad == 0, "add_inplace: %zu of %zu entries wrong", bad, n);
	memcpy(y, y0, n * sizeof(float));
	const float s = -0.37f;
	ops()->scale(y, s, n);
	bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += y[i] != (float)((double)y0[i] * (double)s);
	cr_expect(bad == 0, "scale: %zu of %zu entries wrong", bad, n);
	free(y), free(x), free(y0);
}

Test(ops, sumsq)
{
	uint64_t seed = 0x81;
	const size_t sizes[] = { 0, 1, 5, 63, 64, 65, 1000, 100003 };
	for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
		size_t n = sizes[si];
		float *x = frand(n, 1, &seed);
		long double ref = 0; /* extended precision reference */
		for (size_t i = 0; i < n; i++)
			ref += (long double)x[i] * x[i];
		double got = ops()->sumsq(x, n);
		/* double accumulation of n positive terms: <= n * 1.1e-16 relative;
		 * a float accumulator would be off by ~1e-6 */
		double tol = 1e-16 * (double)(n + 10) * (double)ref;
		cr_expect(fabs(got - (double)ref) <= tol, "sumsq n=%zu: %.17g vs %.17Lg", n, got,
			  ref);
		free(x);
	}
}

/* ---- cross-entropy ---------------------------------------------------------------- */

static void ref_xent(const struct ref_op *op, double *losses)
{
	int n = op->d[0], v = op->d[1];
	for (int i = 0; i < n; i++) {
		const double *x = op->in[0] + (size_t)i * v;
		if (op->ints[i] < 0) {
			losses[i] = 0;
			continue;
		}
		double m = -INFINITY, z = 0;
		for (int j = 0; j < v; j++)
			m = fmax(m, x[j]);
		for (int j = 0; j < v; j++)
			z += exp(x[j] - m);
		losses[i] = m + log(z) - x[op->ints[i]];
	}
}

Test(ops, xent)
{
	uint64_t seed = 0x91;
	const int n = 6, v = 37;
	const size_t nv = (size_t)n * v;
	const float scale = 0.25f;
	int32_t tgt[6];
	for (int i = 0; i < n; i++)
		tgt[i] = (int32_t)(tu_next(&seed) % (uint64_t)v);
	tgt[2] = -1; /* ignored row */
	tgt[4] = v - 1;
	float *logits = frand(nv, 2, &seed), *dl = fnan(nv), *losses = fnan((size_t)n);
	ops()->xent_forward_backward(dl, losses, logits, tgt, n, v, scale);
	struct ref_op op = { .f = ref_xent, .in = { todouble(logits, nv) }, .in_n = { nv },
			     .out_n = (size_t)n, .d = { n, v }, .ints = tgt };
	double *ref = dmalloc((size_t)n), *g = dmalloc(nv), *dd = dmalloc((size_t)n);
	ref_xent(&op, ref);
	expect_close("xent losses", losses, ref, (size_t)n, 1, FWD_TOL);
	cr_expect(losses[2] == 0.0f, "ignored row has loss %g", losses[2]);
	/* dlogits is the gradient of scale * sum(losses) */
	for (int i = 0; i < n; i++)
		dd[i] = scale;
	fd_grad(&op, 0, dd, g, 1);
	expect_close("xent dlogits", dl, g, nv, 1, GRAD_TOL);
	for (int j = 0; j < v; j++)
		cr_expect(dl[2 * v + j] == 0.0f, "ignored row: dlogits[%d] = %g", j, dl[2 * v + j]);

	/* losses alone (dlogits NULL), and dlogits aliasing logits: same bits */
	float *l2 = fnan((size_t)n), *alias = fcopy(logits, nv);
	ops()->xent_forward_backward(NULL, l2, logits, tgt, n, v, scale);
	cr_expect(!memcmp(l2, losses, (size_t)n * sizeof(float)), "xent without dlogits differs");
	ops()->xent_forward_backward(alias, l2, alias, tgt, n, v, scale);
	cr_expect(!memcmp(l2, losses, (size_t)n * sizeof(float)), "xent aliased: losses differ");
	cr_expect(!memcmp(alias, dl, nv * sizeof(float)), "xent aliased: dlogits differ");

	/* logits around 100: exp would overflow fp32 without the max shift */
	for (size_t i = 0; i < nv; i++)
		alias[i] = logits[i] + 100.0f;
	double *shifted = todouble(alias, nv);
	struct ref_op op2 = op;
	op2.in[0] = shifted;
	ref_xent(&op2, ref);
	ops()->xent_forward_backward(NULL, l2, alias, tgt, n, v, scale);
	expect_close("xent losses, logits + 100", l2, ref, (size_t)n, 1, FWD_TOL);
	free(logits), free(dl), free(losses), free(op.in[0]), free(ref), free(g), free(dd);
	free(l2), free(alias), free(shifted);
}

/* ---- optimizers ---------------------------------------------------------------- */

static void check_adamw(float wd, size_t n, uint64_t seed)
{
	float *p = frand(n, 1, &seed), *m = fmalloc(n), *v = fmalloc(n);
	memset(m, 0, n * sizeof(float));
	memset(v, 0, n * sizeof(float));
	double *rp = todouble(p, n), *rm = dmalloc(n), *rv = dmalloc(n);
	for (size_t i = 0; i < n; i++)
		rm[i] = rv[i] = 0;
	struct st_adamw_args a = { .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
				   .weight_decay = wd, .grad_scale = 0.5f };
	for (int step = 1; step <= 3; step++) {
		float *g = frand(n, 1, &seed);
		a.bc1 = (float)(1.0 - pow(a.beta1, step));
		a.bc2 = (float)(1.0 - pow(a.beta2, step));
		ops()->adamw_step(p, m, v, g, n, &a);
		for (size_t i = 0; i < n; i++) {
			double gi = (double)g[i] * a.grad_scale;
			if (a.weight_decay != 0)
				rp[i] -= (double)a.lr * a.weight_decay * rp[i];
			rm[i] = a.beta1 * rm[i] + (1.0 - a.beta1) * gi;
			rv[i] = a.beta2 * rv[i] + (1.0 - a.beta2) * gi * gi;
			rp[i] -= a.lr * (rm[i] / a.bc1) / (sqrt(rv[i] / a.bc2) + a.eps);
		}
		free(g);
	}
	char what[64];
	snprintf(what, sizeof what, "adamw wd=%g n=%zu p", wd, n);
	expect_close_f(what, p, rp, n, 1, OPT_TOL, OPT_FLOOR);
	snprintf(what, sizeof what, "adamw wd=%g n=%zu m", wd, n);
	expect_close_f(what, m, rm, n, 1, OPT_TOL, OPT_FLOOR);
	snprintf(what, sizeof what, "adamw wd=%g n=%zu v", wd, n);
	expect_close_f(what, v, rv, n, 1, OPT_TOL, OPT_FLOOR);
	free(p), free(m), free(v), free(rp), free(rm), free(rv);
}

Test(ops, adamw_three_steps)
{
	check_adamw(0.1f, 1003, 0xa1);
	check_adamw(0.0f, 1003, 0xa2);
	check_adamw(0.1f, 40009, 0xa3); /* parallel path */
}

/* ops.h's AdamW in fp32, each operation rounding once in the written order:
 * the bits the CPU kernel's every path and the CUDA kernel must give. */
__attribute__((optimize("fp-contract=off"))) static void adamw_replay(
	float *p, float *m, float *v, const float *g, size_t n, const struct st_adamw_args *a)
{
	for (size_t i = 0; i < n; i++) {
		float gi = g[i] * a->grad_scale;
		p[i] = p[i] - a->lr * a->weight_decay * p[i];
		m[i] = a->beta1 * m[i] + (1.0f - a->beta1) * gi;
		v[i] = a->beta2 * v[i] + (1.0f - a->beta2) * gi * gi;
		p[i] = p[i] - a->lr * (m[i] / a->bc1) / (sqrtf(v[i] / a->bc2) + a->eps);
	}
}

/* The kernel's AVX2 one-pass variant (where the CPU has AVX2) and its
 * portable loops both equal the replay bit for bit, over three steps, at
 * lengths that end in a partial block, with and without weight decay, on one
 * thread and in parallel. */
Test(ops, adamw_paths_equal_the_replay_bit_for_bit)
{
	const size_t lens[] = { 1, 255, 256, 1003, 4096 + 7, 40009 };
	const char *names[] = { "portable", "AVX2" };
	const int has[] = { 1, __builtin_cpu_supports("avx2") };
	for (int path = 1; path >= 0; path--) {
		if (!has[path]) {
			cr_log_warn("AdamW's %s path not checked: this CPU lacks it", names[path]);
			continue;
		}
		for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
			for (int wd = 0; wd < 2; wd++) {
				const size_t n = lens[li];
				uint64_t seed = 0xad0 + li;
				/* moments mid-run: m signed, v >= 0 */
				float *p = frand(n, 1, &seed), *m = frand(n, 0.1f, &seed);
				float *v = frand(n, 0.01f, &seed);
				for (size_t i = 0; i < n; i++)
					v[i] = v[i] * v[i];
				float *rp = fmalloc(n), *rm = fmalloc(n), *rv = fmalloc(n);
				memcpy(rp, p, n * sizeof(float)), memcpy(rm, m, n * sizeof(float));
				memcpy(rv, v, n * sizeof(float));
				struct st_adamw_args a = { .lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
							   .eps = 1e-8f, .weight_decay = wd ? 0.1f : 0.0f,
							   .grad_scale = 0.7f };
				for (int step = 1; step <= 3; step++) {
					float *g = frand(n, 1, &seed);
					a.bc1 = (float)(1.0 - pow(a.beta1, step));
					a.bc2 = (float)(1.0 - pow(a.beta2, step));
					cpu_adamw_step_simd(path, p, m, v, g, n, &a);
					adamw_replay(rp, rm, rv, g, n, &a);
					free(g);
				}
				cr_expect(memcmp(p, rp, n * sizeof(float)) == 0 &&
						  memcmp(m, rm, n * sizeof(float)) == 0 &&
						  memcmp(v, rv, n * sizeof(float)) == 0,
					  "AdamW (%s path), n = %zu, wd %d: not the replay's bits",
					  names[path], n, wd);
				free(p), free(m), free(v), free(rp), free(rm), free(rv);
			}
	}
}

static void check_sgd(float momentum, size_t n, uint64_t seed)
{
	float *p = frand(n, 1, &seed), *mom = momentum != 0 ? fnan(n) : NULL;
	double *rp = todouble(p, n), *rmom = dmalloc(n);
	struct st_sgd_args a = { .lr = 0.1f, .momentum = momentum, .weight_decay = 0.01f,
				 .grad_scale = 0.5f };
	for (int step = 1; step <= 3; step++) {
		float *g = frand(n, 1, &seed);
		a.first_step = step == 1;
		ops()->sgd_step(p, mom, g, n, &a);
		for (size_t i = 0; i < n; i++) {
			double gi = (double)g[i] * a.grad_scale + (double)a.weight_decay * rp[i];
			rmom[i] = step == 1 ? gi : a.momentum * rmom[i] + gi;
			rp[i] -= a.lr * (momentum != 0 ? rmom[i] : gi);
		}
		free(g);
	}
	char what[64];
	snprintf(what, sizeof what, "sgd momentum=%g n=%zu p", momentum, n);
	expect_close_f(what, p, rp, n, 1, OPT_TOL, OPT_FLOOR);
	if (mom) {
		snprintf(what, sizeof what, "sgd momentum=%g n=%zu mom", momentum, n);
		expect_close_f(what, mom, rmom, n, 1, OPT_TOL, OPT_FLOOR);
	}
	free(p), free(mom), free(rp), free(rmom);
}

Test(ops, sgd_three_steps)
{
	check_sgd(0.9f, 1003, 0xb1);
	check_sgd(0.0f, 1003, 0xb2);
	check_sgd(0.9f, 40009, 0xb3);
}

/* ---- determinism across thread counts -------------------------------------- */

Test(ops, deterministic_across_thread_counts)
{
	uint64_t seed = 0xc1;
	const int threads[] = { 1, 2, 3 };
	const int nt = 3;
	int saved = omp_get_max_threads();

	/* sumsq */
	const size_t ns = (1u << 20) + 3;
	float *xs = frand(ns, 1, &seed);
	double s0 = 0;
	/* embedding_backward: many repeats of few tokens */
	const int n = 4096, c = 200, v = 50;
	int32_t *tok = malloc((size_t)n * sizeof *tok);
	cr_assert(tok);
	for (int i = 0; i < n; i++)
		tok[i] = (int32_t)(tu_next(&seed) % (uint64_t)v);
	float *dout = frand((size_t)n * c, 1, &seed), *dw0 = frand((size_t)v * c, 1, &seed);
	float *dwte[3];
	/* rmsnorm_backward */
	float *x = frand((size_t)n * c, 1, &seed), *w = frand((size_t)c, 1, &seed);
	float *rstd = fmalloc((size_t)n), *xn = fmalloc((size_t)n * c);
	ops()->rmsnorm_forward(xn, rstd, x, w, n, c, 1e-5f);
	float *rdx[3], *rdw[3];
	/* layernorm_backward (the stable embedding's): dw and db are sums over
	 * rows that the threads split */
	float *lb = frand((size_t)c, 1, &seed), *lmean = fmalloc((size_t)n), *lrstd = fmalloc((size_t)n);
	ops()->layernorm_forward(xn, lmean, lrstd, x, w, lb, n, c, 1e-5f);
	float *ldx[3], *ldw[3], *ldb[3];
	/* attention: forward and backward, GQA, 3 query blocks */
	const int B = 2, T = 130, H = 4, HKV = 2, HD = 16;
	const size_t nq = (size_t)B * T * H * HD, nk = (size_t)B * T * HKV * HD;
	float *q = frand(nq, 1, &seed), *k = frand(nk, 1, &seed), *vv = frand(nk, 1, &seed);
	float *ao = frand(nq, 1, &seed);
	float *out[3], *lse[3], *dq[3], *dk[3], *dv[3];

	for (int r = 0; r < nt; r++) {
		omp_set_num_threads(threads[r]);
		double s = ops()->sumsq(xs, ns);
		if (r == 0)
			s0 = s;
		cr_expect(!memcmp(&s, &s0, sizeof s), "sumsq: %d threads %.17g vs 1 thread %.17g",
			  threads[r], s, s0);
		dwte[r] = fcopy(dw0, (size_t)v * c);
		ops()->embedding_backward(dwte[r], dout, tok, n, c, v);
		rdx[r] = fmalloc((size_t)n * c);
		rdw[r] = fcopy(w, (size_t)c);
		ops()->rmsnorm_backward(rdx[r], rdw[r], dout, x, w, rstd, n, c);
		ldx[r] = fmalloc((size_t)n * c);
		ldw[r] = fcopy(w, (size_t)c), ldb[r] = fcopy(lb, (size_t)c);
		ops()->layernorm_backward(ldx[r], ldw[r], ldb[r], dout, x, w, lmean, lrstd, n, c);
		out[r] = fmalloc(nq), lse[r] = fmalloc((size_t)B * H * T);
		dq[r] = fmalloc(nq), dk[r] = fmalloc(nk), dv[r] = fmalloc(nk);
		ops()->attention_forward(out[r], lse[r], q, k, vv, B, T, H, HKV, HD);
		ops()->attention_backward(dq[r], dk[r], dv[r], ao, q, k, vv, out[0], lse[0], B, T, H,
					  HKV, HD);
	}
	omp_set_num_threads(saved);
	for (int r = 1; r < nt; r++) {
#define SAME(arr, count, what)                                                                 \
	cr_expect(!memcmp(arr[r], arr[0], (count) * sizeof(float)),                            \
		  what ": %d threads differ from 1 thread", threads[r])
		SAME(dwte, (size_t)v * c, "embedding_backward");
		SAME(rdx, (size_t)n * c, "rmsnorm_backward dx");
		SAME(rdw, (size_t)c, "rmsnorm_backward dw");
		SAME(ldx, (size_t)n * c, "layernorm_backward dx");
		SAME(ldw, (size_t)c, "layernorm_backward dw");
		SAME(ldb, (size_t)c, "layernorm_backward db");
		SAME(out, nq, "attention_forward out");
		SAME(lse, (size_t)B * H * T, "attention_forward lse");
		SAME(dq, nq, "attention_backward dq");
		SAME(dk, nk, "attention_backward dk");
		SAME(dv, nk, "attention_backward dv");
#undef SAME
	}
	for (int r = 0; r < nt; r++) {
		free(dwte[r]), free(rdx[r]), free(rdw[r]), free(out[r]), free(lse[r]);
		free(ldx[r]), free(ldw[r]), free(ldb[r]);
		free(dq[r]), free(dk[r]), free(dv[r]);
	}
	free(xs), free(tok), free(dout), free(dw0), free(x), free(w), free(rstd), free(xn);
	free(lb), free(lmean), free(lrstd);
	free(q), free(k), free(vv), free(ao);
}
