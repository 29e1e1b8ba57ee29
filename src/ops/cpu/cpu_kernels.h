/* Internal to the CPU backend: the kernels that cpu.c collects into the
 * `struct st_ops` table, one definition file per op (matmul.c, rope.c, ...).
 * Signatures and semantics are exactly those of the table in ops/ops.h; see
 * the comments there for shapes and the =/+= rules. */
#ifndef ST_OPS_CPU_KERNELS_H
#define ST_OPS_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/ops.h"

/* Work below this many floats runs on the calling thread: an OpenMP fork/join
 * costs a few microseconds, more than a memory-bound pass over 16K floats
 * (64 KiB). Results never depend on this choice (every reduction order is
 * fixed independently of the thread count). */
#define CPU_PAR_MIN 16384

/* Software prefetch of one line toward the core, to be written (PREFETCHW
 * where the CPU has it: the line arrives exclusive) or read (prefetcht2).
 * On the 2-core Xeon VM that pair ran 1-3% faster than prefetcht1 for every
 * line (bench/results/optim-20261125-xeon2-prefetch/explore.txt; the read
 * hint alone was not compared). Asm statements, since gcc 12
 * deletes a loop whose body is only __builtin_prefetch calls as dead code;
 * nothing on other architectures. Only hints: no result depends on them. */
static inline void cpu_prefetch_w(const void *a)
{
#if defined(__x86_64__) && defined(__PRFCHW__)
	__asm__ volatile("prefetchw %0" : : "m"(*(const char *)a));
#elif defined(__x86_64__)
	__asm__ volatile("prefetcht2 %0" : : "m"(*(const char *)a));
#endif
}

static inline void cpu_prefetch_r(const void *a)
{
#if defined(__x86_64__)
	__asm__ volatile("prefetcht2 %0" : : "m"(*(const char *)a));
#endif
}

/* The elements [*a, end) that a block of len at i0 <= n prefetches `ahead`
 * elements on, within n: end is 0 when that lies past n. */
static inline size_t cpu_prefetch_span(size_t i0, size_t len, size_t n, size_t ahead, size_t *a)
{
	if (n - i0 <= ahead)
		return 0;
	*a = i0 + ahead;
	return n - *a < len ? n : *a + len;
}

/* exp(x) in fp32 that gcc vectorizes inside plain loops (glibc's expf is a
 * scalar call unless -ffast-math, and softmax/sigmoid loops are dominated by
 * it: 16% of attention time, most of xent's). Cody-Waite reduction
 * x = n ln2 + r, |r| <= ln2/2, then Cephes' degree-6 polynomial for e^r and
 * 2^n built in the exponent bits: within 1.02 ulp of exp on [-87, 88]
 * (measured on 2e7 points; tests/test_ops.c checks 2 ulp). Outside: 0 below
 * -87 (flushing what would be ~1e-38 or subnormal), +inf above 88 (fp32
 * overflows at 88.72), NaN for NaN, so saturating sigmoids get exact 0 and 1.
 *
 * Everything is branch-free integer work on the float's bits: a float
 * compare or a select makes gcc branch around the trapping arithmetic, which
 * it then cannot if-convert (no -fno-trapping-math), so the loop would not
 * vectorize. Unsigned bits order negative floats (larger = more negative),
 * signed bits order positive ones. */
static inline float cpu_expf(float x)
{
	union bits {
		float f;
		uint32_t u;
		int32_t i;
	};
	union bits in = { .f = x }, v = in, out;
	v.u = v.u > 0xc2ae0000u ? 0xc2ae0000u : v.u; /* x < -87.0f: -87 */
	v.i = v.i > 0x42b00000 ? 0x42b00000 : v.i;   /* x > 88.0f: 88 */
	x = v.f;
	/* n = round(x / ln2) by the 1.5 * 2^23 trick (rintf would not vectorize
	 * without -ffast-math; the build forbids reassociation, so the sum is
	 * not folded away) */
	float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
	float r = x - n * 0.693359375f + n * 2.12194440e-4f; /* ln2 = hi - lo */
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r * r + r + 1.0f;
	v.i = ((int32_t)n + 127) << 23; /* 2^n, n in [-125, 127] */
	out.f = p * v.f;
	/* all-ones masks where x < -87, x > 88, x is NaN (|x| bits > inf's) */
	uint32_t under = 0u - (uint32_t)(in.u > 0xc2ae0000u);
	uint32_t over = 0u - (uint32_t)(in.i > 0x42b00000);
	uint32_t nan = 0u - (uint32_t)((in.u & 0x7fffffffu) > 0x7f800000u);
	out.u &= ~under;
	out.u = (out.u & ~over) | (0x7f800000u & over);
	out.u = (out.u & ~nan) | (in.u & nan);
	return out.f;
}

void cpu_matmul(float *c, const float *a, const float *b, int m, int n, int k, int ta, int tb,
		float alpha, float beta, int lda, int ldb, int ldc);
void cpu_matmul_bf16(float *c, const float *a, const float *b, int m, int n, int k, int ta, int tb,
		     float alpha, float beta, int lda, int ldb, int ldc, void *ws, size_t ws_bytes);
int cpu_matmul_bf16_native(const char **impl);
/* The tiles cpu_matmul_bf16 cuts an (m,n,k) product into for ws_bytes of
 * workspace: mc x nc of c, k in chunks of kc (tests check the cuts). */
void cpu_matmul_bf16_tiles(int m, int n, int k, size_t ws_bytes, int *mc, int *nc, int *kc);

void cpu_embedding_forward(float *out, const int32_t *tokens, const float *wte, int n, int c);
void cpu_embedding_backward(float *dwte, const float *dout, const int32_t *tokens, int n, int c,
			    int v);

void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w,
			   const float *b, int n, int c, float eps);
void cpu_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x,
			    const float *w, const float *mean, const float *rstd, int n, int c);
void cpu_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int n, int c,
			 float eps);
void cpu_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
			  const float *w, const float *rstd, int n, int c);

void cpu_rope(float *x, const float *cos_tab, const float *sin_tab, int b, int t, int h, int hd,
	      int dir);

void cpu_attention_forward(float *out, float *lse, const float *q, const float *k,
			   const float *v, int b, int t, int h, int hkv, int hd);
void cpu_attention_cached(float *out, const float *q, const float *k, const float *v, int n,
			  int p0, int h, int hkv, int hd);
void cpu_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
			    const float *k, const float *v, const float *out, const float *lse,
			    int b, int t, int h, int hkv, int hd);

void cpu_swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void cpu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
			 const float *up, size_t n);

void cpu_add_inplace(float *y, const float *x, size_t n);
double cpu_sumsq(const float *x, size_t n);
void cpu_scale(float *x, float s, size_t n);

void cpu_xent_forward_backward(float *dlogits, float *losses, const float *logits,
			       const int32_t *targets, int n, int v, float scale);

void cpu_adamw_step(float *p, float *m, float *v, const float *g, size_t n,
		    const struct st_adamw_args *a);
/* cpu_adamw_step with its AVX2 one-pass variant (avx2, on a CPU that has it)
 * or its portable loops (!avx2); the same bits either way. cpu_adamw_step
 * takes the pass unless STRATA_SIMD=scalar. For the tests. */
void cpu_adamw_step_simd(int avx2, float *p, float *m, float *v, const float *g, size_t n,
			 const struct st_adamw_args *a);
void cpu_sgd_step(float *p, float *mom, const float *g, size_t n, const struct st_sgd_args *a);

#endif
