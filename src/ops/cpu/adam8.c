/* 8-bit AdamW (Dettmers et al., arXiv 2110.02861), fused: per quantization
 * block, dequantize m and v, update them in fp32, take the new block absmax,
 * update p, requantize; the fp32 moments never leave a stack buffer. Formulas
 * and order are ops.h's (bitsandbytes' blockwise kernel, with exact IEEE
 * division and sqrt).
 *
 * Blocks are independent, so the OpenMP split over blocks cannot change any
 * bit. The 8-bit decode / absmax / encode come in scalar, AVX2, AVX-512 and
 * VBMI variants (quant8.c, quant8_vbmi.c); the fp32 arithmetic between them
 * is one intrinsics pass in the AVX2 and AVX-512 variants (the moments, their
 * absmax and the update of p) and plain C in the scalar one. No FMA
 * contraction anywhere
 * (the pragma), so every variant, the scalar reference in tests/test_quant.c
 * and the CUDA kernel round identically. */
#pragma GCC optimize("fp-contract=off")
#include <math.h>
#include <omp.h>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/quant8.h"
#include "ops/cpu/quant8_simd.h"

/* Per-call constants, each one rounding in fp32 as ops.h writes them. */
struct adam8_consts {
	float gs, b1, omb1, b2, omb2, step, eps_hat, decay;
};

static struct adam8_consts adam8_consts(const struct st_adamw8_args *a)
{
	const float c2 = sqrtf(a->bc2);
	return (struct adam8_consts){
		.gs = a->grad_scale,
		.b1 = a->beta1,
		.omb1 = 1.0f - a->beta1,
		.b2 = a->beta2,
		.omb2 = 1.0f - a->beta2,
		.step = a->lr * c2 / a->bc1,
		.eps_hat = a->eps * c2,
		.decay = 1.0f - a->lr * a->weight_decay,
	};
}

/* m = b1 m + (1-b1) g';  v = b2 v + (1-b2) (g' g'),  g' = g * grad_scale */
static void moments(float *restrict m, float *restrict v, const float *restrict g, size_t n,
		    const struct adam8_consts *k)
{
	for (size_t i = 0; i < n; i++) {
		float gi = g[i] * k->gs;
		m[i] = k->b1 * m[i] + k->omb1 * gi;
		v[i] = k->b2 * v[i] + k->omb2 * (gi * gi);
	}
}

/* p = (p - step * (m / (sqrt(v) + eps_hat))) * decay */
static void update(float *restrict p, const float *restrict m, const float *restrict v, size_t n,
		   const struct adam8_consts *k)
{
	for (size_t i = 0; i < n; i++) {
		float pi = p[i] - k->step * (m[i] / (sqrtf(v[i]) + k->eps_hat));
		p[i] = pi * k->decay;
	}
}

/* The vector passes' last elements, i0 <= i < n, in scalar code: their
 * moments and absmax (*tm, *tv), then the update of p unless p is NULL. */
static inline void moments_tail(float *restrict p, float *restrict m, float *restrict v,
				const float *restrict g, size_t i0, size_t n,
				const struct adam8_consts *k, float *tm, float *tv)
{
	float xm = 0.0f, xv = 0.0f;
	for (size_t i = i0; i < n; i++) {
		float gi = g[i] * k->gs;
		m[i] = k->b1 * m[i] + k->omb1 * gi;
		v[i] = k->b2 * v[i] + k->omb2 * (gi * gi);
		xm = q8_absmax1(m[i], xm);
		xv = q8_absmax1(v[i], xv);
	}
	if (p)
		update(p + i0, m + i0, v + i0, n - i0, k);
	*tm = xm;
	*tv = xv;
}

/* The AVX-512 and AVX2 loops below (the AVX-512 variants avx512,
 * avx512vbmi and tuned; avx2): moments(), then update() unless p is NULL, and
 * the largest |m|, |v| (NaN ignored), in one pass. That saves the two absmax
 * passes over the buffers (4% of the step on the Zen 5 VM; 6.5% in AVX2 on
 * the Zen 3 VM) and the update's own pass over m and v: the update needs the
 * new moments but not their absmax. The same fp32 operations as moments()
 * and update(). */

/* one call's constants in AVX-512 registers */
struct adam8_zmm {
	__m512 gs, b1, omb1, b2, omb2, step, eps_hat, decay;
};

static inline __attribute__((always_inline, target("avx512f"))) struct adam8_zmm
adam8_zmm(const struct adam8_consts *k)
{
	return (struct adam8_zmm){ _mm512_set1_ps(k->gs),      _mm512_set1_ps(k->b1),
				   _mm512_set1_ps(k->omb1),    _mm512_set1_ps(k->b2),
				   _mm512_set1_ps(k->omb2),    _mm512_set1_ps(k->step),
				   _mm512_set1_ps(k->eps_hat), _mm512_set1_ps(k->decay) };
}

/* elements i..i+15: the new moments into m, v, their |max| into *xm, *xv,
 * and the update of p unless p is NULL */
static inline __attribute__((always_inline, target("avx512f"))) void moments16_avx512(
	float *restrict p, float *restrict m, float *restrict v, const float *restrict g, size_t i,
	const struct adam8_zmm *c, __m512 *xm, __m512 *xv)
{
	const __m512 gi = _mm512_mul_ps(_mm512_loadu_ps(g + i), c->gs);
	const __m512 mi = _mm512_add_ps(_mm512_mul_ps(c->b1, _mm512_loadu_ps(m + i)),
					_mm512_mul_ps(c->omb1, gi));
	const __m512 vi = _mm512_add_ps(_mm512_mul_ps(c->b2, _mm512_loadu_ps(v + i)),
					_mm512_mul_ps(c->omb2, _mm512_mul_ps(gi, gi)));
	_mm512_storeu_ps(m + i, mi);
	_mm512_storeu_ps(v + i, vi);
	*xm = _mm512_max_ps(q8_abs_avx512(mi), *xm); /* keeps xm when mi is NaN */
	*xv = _mm512_max_ps(q8_abs_avx512(vi), *xv);
	if (p) {
		const __m512 u = _mm512_div_ps(mi, _mm512_add_ps(_mm512_sqrt_ps(vi), c->eps_hat));
		const __m512 pi = _mm512_sub_ps(_mm512_loadu_ps(p + i), _mm512_mul_ps(c->step, u));
		_mm512_storeu_ps(p + i, _mm512_mul_ps(pi, c->decay));
	}
}

/* Inlined into its two callers, so `if (p)` is decided at compile time. */
static inline __attribute__((always_inline, target("avx512f"))) void moments_avx512(
	float *restrict p, float *restrict m, float *restrict v, const float *restrict g, size_t n,
	const struct adam8_consts *k, float *am, float *av)
{
	const struct adam8_zmm c = adam8_zmm(k);
	__m512 xm = _mm512_setzero_ps(), xv = _mm512_setzero_ps();
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		moments16_avx512(p, m, v, g, i, &c, &xm, &xv);
	float tm, tv;
	moments_tail(p, m, v, g, i, n, k, &tm, &tv);
	*am = q8_hmax_avx512(xm, tm);
	*av = q8_hmax_avx512(xv, tv);
}

/* one call's constants in AVX2 registers */
struct adam8_ymm {
	__m256 gs, b1, omb1, b2, omb2, step, eps_hat, decay;
};

static inline __attribute__((always_inline, target("avx2"))) struct adam8_ymm
adam8_ymm(const struct adam8_consts *k)
{
	return (struct adam8_ymm){ _mm256_set1_ps(k->gs),      _mm256_set1_ps(k->b1),
				   _mm256_set1_ps(k->omb1),    _mm256_set1_ps(k->b2),
				   _mm256_set1_ps(k->omb2),    _mm256_set1_ps(k->step),
				   _mm256_set1_ps(k->eps_hat), _mm256_set1_ps(k->decay) };
}

/* moments16_avx512 for elements i..i+7 in AVX2 registers: the same fp32
 * operations in the same order, so the same bits */
static inline __attribute__((always_inline, target("avx2"))) void moments8_avx2(
	float *restrict p, float *restrict m, float *restrict v, const float *restrict g, size_t i,
	const struct adam8_ymm *c, __m256 *xm, __m256 *xv)
{
	const __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), c->gs);
	const __m256 mi = _mm256_add_ps(_mm256_mul_ps(c->b1, _mm256_loadu_ps(m + i)),
					_mm256_mul_ps(c->omb1, gi));
	const __m256 vi = _mm256_add_ps(_mm256_mul_ps(c->b2, _mm256_loadu_ps(v + i)),
					_mm256_mul_ps(c->omb2, _mm256_mul_ps(gi, gi)));
	_mm256_storeu_ps(m + i, mi);
	_mm256_storeu_ps(v + i, vi);
	*xm = _mm256_max_ps(q8_abs_avx2(mi), *xm); /* keeps xm when mi is NaN */
	*xv = _mm256_max_ps(q8_abs_avx2(vi), *xv);
	if (p) {
		const __m256 u = _mm256_div_ps(mi, _mm256_add_ps(_mm256_sqrt_ps(vi), c->eps_hat));
		const __m256 pi = _mm256_sub_ps(_mm256_loadu_ps(p + i), _mm256_mul_ps(c->step, u));
		_mm256_storeu_ps(p + i, _mm256_mul_ps(pi, c->decay));
	}
}

static inline __attribute__((always_inline, target("avx2"))) void moments_avx2(
	float *restrict p, float *restrict m, float *restrict v, const float *restrict g, size_t n,
	const struct adam8_consts *k, float *am, float *av)
{
	const struct adam8_ymm c = adam8_ymm(k);
	__m256 xm = _mm256_setzero_ps(), xv = _mm256_setzero_ps();
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		moments8_avx2(p, m, v, g, i, &c, &xm, &xv);
	float tm, tv;
	moments_tail(p, m, v, g, i, n, k, &tm, &tv);
	*am = q8_hmax_avx2(xm, tm);
	*av = q8_hmax_avx2(xv, tv);
}

__attribute__((target("avx2"))) static void moments_absmax_avx2(float *m, float *v, const float *g,
								size_t n,
								const struct adam8_consts *k,
								float *am, float *av)
{
	moments_avx2(NULL, m, v, g, n, k, am, av);
}

__attribute__((target("avx2"))) static void moments_update_absmax_avx2(
	float *p, float *m, float *v, const float *g, size_t n, const struct adam8_consts *k,
	float *am, float *av)
{
	moments_avx2(p, m, v, g, n, k, am, av);
}

__attribute__((target("avx512f"))) static void moments_absmax_avx512(
	float *m, float *v, const float *g, size_t n, const struct adam8_consts *k, float *am,
	float *av)
{
	moments_avx512(NULL, m, v, g, n, k, am, av);
}

__attribute__((target("avx512f"))) static void moments_update_absmax_avx512(
	float *p, float *m, float *v, const float *g, size_t n, const struct adam8_consts *k,
	float *am, float *av)
{
	moments_avx512(p, m, v, g, n, k, am, av);
}

/* The new moments in m, v and their absmax in *am, *av; with p, also the
 * parameter update. */
static void moments_absmax(const struct q8_kernels *q, float *p, float *m, float *v,
			   const float *g, size_t n, const struct adam8_consts *k, float *am,
			   float *av)
{
	if (q->simd >= Q8_AVX512) {
		if (p)
			moments_update_absmax_avx512(p, m, v, g, n, k, am, av);
		else
			moments_absmax_avx512(m, v, g, n, k, am, av);
		return;
	}
	if (q->simd == Q8_AVX2) {
		if (p)
			moments_update_absmax_avx2(p, m, v, g, n, k, am, av);
		else
			moments_absmax_avx2(m, v, g, n, k, am, av);
		return;
	}
	moments(m, v, g, n, k);
	if (p)
		update(p, m, v, n, k);
	*am = q->absmax(m, n);
	*av = q->absmax(v, n);
}

/* ---- the pipelined step ----------------------------------------------------------
 *
 * Within a block the passes run one after another: decode, the moments and
 * the update (whose division and square root per element keep the divider
 * busy: 0.34 of 1.13 ns per element on one core of the Xeon VM), then the
 * encode (whose table gathers, 0.30 ns, keep the load ports busy). Over a
 * thread's run of whole blocks the encode of block b-1 can wait for the
 * moments loop of block b: one loop does both (moments_encode_*), and the
 * two units work at once. On the 2-core Xeon VM (bench/q8_stages, one
 * thread in cache) the tuned step went from 1.13 to 0.99 ns per element, and
 * the avx512 one from 1.34 to 1.20-1.22 (q8-stages.txt in
 * bench/results/optim-20261125b-xeon2-pipeline/). Same operations on each
 * element, so the same bits (tests/test_quant.c compares every variant with
 * the replay). */

/* the block before: its codes, its final moments and their scales */
struct adam8_prev {
	uint8_t *mc, *vc;
	const float *m, *v;
	float sm, sv;
};

typedef void (*adam8_fused_fn)(float *p, float *m, float *v, const float *g, size_t n,
			       const struct adam8_consts *k, float *am, float *av,
			       const struct adam8_prev *pb, const struct q8_lut *lut_m,
			       const struct q8_lut *lut_v);

/* moments_avx512 with p over n elements (a multiple of 16), and the avx512
 * encoder's codes of the previous block's n moments, in one loop */
__attribute__((target("avx512f"))) static void moments_encode_avx512(
	float *p, float *m, float *v, const float *g, size_t n, const struct adam8_consts *k,
	float *am, float *av, const struct adam8_prev *pb, const struct q8_lut *lut_m,
	const struct q8_lut *lut_v)
{
	const struct adam8_zmm c = adam8_zmm(k);
	const struct q8_avx512 qm = q8_avx512_setup(lut_m), qv = q8_avx512_setup(lut_v);
	const __m512 sm = _mm512_set1_ps(pb->sm), sv = _mm512_set1_ps(pb->sv);
	__m512 xm = _mm512_setzero_ps(), xv = _mm512_setzero_ps();
	for (size_t i = 0; i < n; i += 16) {
		moments16_avx512(p, m, v, g, i, &c, &xm, &xv);
		q8_encode16_avx512(pb->mc + i, _mm512_mul_ps(_mm512_loadu_ps(pb->m + i), sm), &qm);
		q8_encode16_avx512(pb->vc + i, _mm512_mul_ps(_mm512_loadu_ps(pb->v + i), sv), &qv);
	}
	*am = q8_hmax_avx512(xm, 0.0f);
	*av = q8_hmax_avx512(xv, 0.0f);
}

/* the same in AVX2 registers, with the avx2 encoder's codes */
__attribute__((target("avx2"))) static void moments_encode_avx2(
	float *p, float *m, float *v, const float *g, size_t n, const struct adam8_consts *k,
	float *am, float *av, const struct adam8_prev *pb, const struct q8_lut *lut_m,
	const struct q8_lut *lut_v)
{
	const struct adam8_ymm c = adam8_ymm(k);
	const struct q8_avx2 qm = q8_avx2_setup(lut_m), qv = q8_avx2_setup(lut_v);
	const __m256 sm = _mm256_set1_ps(pb->sm), sv = _mm256_set1_ps(pb->sv);
	__m256 xm = _mm256_setzero_ps(), xv = _mm256_setzero_ps();
	for (size_t i = 0; i < n; i += 16) {
		moments8_avx2(p, m, v, g, i, &c, &xm, &xv);
		moments8_avx2(p, m, v, g, i + 8, &c, &xm, &xv);
		q8_store16_avx2(pb->mc + i,
				q8_encode8_avx2(_mm256_mul_ps(_mm256_loadu_ps(pb->m + i), sm), &qm),
				q8_encode8_avx2(_mm256_mul_ps(_mm256_loadu_ps(pb->m + i + 8), sm), &qm));
		q8_store16_avx2(pb->vc + i,
				q8_encode8_avx2(_mm256_mul_ps(_mm256_loadu_ps(pb->v + i), sv), &qv),
				q8_encode8_avx2(_mm256_mul_ps(_mm256_loadu_ps(pb->v + i + 8), sv), &qv));
	}
	*am = q8_hmax_avx2(xm, 0.0f);
	*av = q8_hmax_avx2(xv, 0.0f);
}

/* The fused loop for variant q's encoder, NULL where there is none (the
 * scalar variant; the VBMI encoder, which works 64 values at a time). */
static adam8_fused_fn adam8_fused_for(const struct q8_kernels *q)
{
	if (q->simd >= Q8_AVX512)
		return q->encode == q8_kernels_get(Q8_AVX512)->encode ? moments_encode_avx512 : NULL;
	return q->simd == Q8_AVX2 ? moments_encode_avx2 : NULL;
}

/* Whole blocks b_lo..b_hi-1 of `block` elements (a multiple of 16, at most
 * Q8_PF_MAX_BLOCK), pipelined: block b is decoded, then its moments and update
 * run in one loop with block b-1's encode; the first block's moments run alone
 * and the last block is encoded after the loop. */
static void adam8_pipelined(const struct q8_kernels *q, adam8_fused_fn fused, float *p,
			    uint8_t *m_codes, uint8_t *v_codes, float *m_absmax, float *v_absmax,
			    const float *g, size_t n, size_t block, size_t b_lo, size_t b_hi,
			    const struct adam8_consts *k, const struct q8_lut *lut_m,
			    const struct q8_lut *lut_v)
{
	float mb[2][Q8_PF_MAX_BLOCK], vb[2][Q8_PF_MAX_BLOCK];
	struct adam8_prev pb = { 0 };
	for (size_t b = b_lo; b < b_hi; b++) {
		const size_t b0 = b * block;
		float *m = mb[b & 1], *v = vb[b & 1];
		q8_prefetch_block(p, g, m_codes, v_codes, b0, block, n);
		q->decode(m, m_codes + b0, block, m_absmax[b], lut_m);
		q->decode(v, v_codes + b0, block, v_absmax[b], lut_v);
		float am, av;
		if (b == b_lo)
			moments_absmax(q, p + b0, m, v, g + b0, block, k, &am, &av);
		else
			fused(p + b0, m, v, g + b0, block, k, &am, &av, &pb, lut_m, lut_v);
		m_absmax[b] = am;
		v_absmax[b] = av;
		pb = (struct adam8_prev){ m_codes + b0, v_codes + b0, m, v, ops_q8_scale(am),
					  ops_q8_scale(av) };
	}
	if (b_hi > b_lo) {
		q->encode(pb.mc, pb.m, block, pb.sm, lut_m);
		q->encode(pb.vc, pb.v, block, pb.sv, lut_v);
	}
}

/* ---- the step -------------------------------------------------------------------- */

/* Block b alone, of any length, its passes one after another (mb, vb:
 * Q8_CHUNK floats each). */
static void adam8_block(const struct q8_kernels *q, float *p, uint8_t *m_codes, uint8_t *v_codes,
			float *m_absmax, float *v_absmax, const float *g, size_t n, size_t block,
			size_t b, const struct adam8_consts *k, const struct q8_lut *lut_m,
			const struct q8_lut *lut_v, float *mb, float *vb)
{
	const size_t b0 = b * block, len = n - b0 < block ? n - b0 : block;
	const float am_old = m_absmax[b], av_old = v_absmax[b];
	float am = 0.0f, av = 0.0f;
	/* Blocks over Q8_CHUNK: a first pass only for the absmax, the update
	 * recomputed (same bits) in the second. */
	if (len > Q8_CHUNK)
		for (size_t c0 = 0; c0 < len; c0 += Q8_CHUNK) {
			size_t cl = len - c0 < Q8_CHUNK ? len - c0 : Q8_CHUNK;
			q->decode(mb, m_codes + b0 + c0, cl, am_old, lut_m);
			q->decode(vb, v_codes + b0 + c0, cl, av_old, lut_v);
			float x, y;
			moments_absmax(q, NULL, mb, vb, g + b0 + c0, cl, k, &x, &y);
			am = x > am ? x : am;
			av = y > av ? y : av;
		}
	for (size_t c0 = 0; c0 < len; c0 += Q8_CHUNK) {
		size_t cl = len - c0 < Q8_CHUNK ? len - c0 : Q8_CHUNK;
		q8_prefetch_block(p, g, m_codes, v_codes, b0 + c0, cl, n);
		q->decode(mb, m_codes + b0 + c0, cl, am_old, lut_m);
		q->decode(vb, v_codes + b0 + c0, cl, av_old, lut_v);
		float x, y;
		moments_absmax(q, p + b0 + c0, mb, vb, g + b0 + c0, cl, k, &x, &y);
		if (len <= Q8_CHUNK)
			am = x, av = y;
		q->encode(m_codes + b0 + c0, mb, cl, ops_q8_scale(am), lut_m);
		q->encode(v_codes + b0 + c0, vb, cl, ops_q8_scale(av), lut_v);
	}
	m_absmax[b] = am;
	v_absmax[b] = av;
}

void cpu_adamw8_step_simd(enum q8_simd s, float *p, uint8_t *m_codes, uint8_t *v_codes,
			  float *m_absmax, float *v_absmax, const float *g, size_t n,
			  const struct st_adamw8_args *a)
{
	const struct q8_kernels *q = q8_kernels_get(s);
	const struct adam8_consts k = adam8_consts(a);
	const size_t block = (size_t)a->block, nblocks = (n + block - 1) / block;
	/* read-only in the threads; the second lookup cannot evict the first */
	const struct q8_lut *lut_m = q8_lut_get(a->map_m), *lut_v = q8_lut_get(a->map_v);
	/* The whole blocks pipelined where the variant has a fused loop, each
	 * thread a run of consecutive blocks; a partial last block after them.
	 * Only blocks the prefetch covers (up to 256): at 128M parameters,
	 * blocks of 512 and 1024 ran 12-19% slower pipelined than not on the
	 * Xeon VM (faster in cache), 2048 2-4% slower, and prefetching the next
	 * block made that -8..+5% (bench/results/optim-20261125b-xeon2-pipeline/
	 * pipeline-blocks.txt). */
	const adam8_fused_fn fused = adam8_fused_for(q);
	const size_t nwhole = n / block;
	size_t first = 0;
	if (fused && block % 16 == 0 && block <= Q8_PF_MAX_BLOCK && nwhole > 1) {
#pragma omp parallel if (n >= CPU_PAR_MIN)
		{
			const size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
			adam8_pipelined(q, fused, p, m_codes, v_codes, m_absmax, v_absmax, g, n, block,
					nwhole * t / nt, nwhole * (t + 1) / nt, &k, lut_m, lut_v);
		}
		first = nwhole;
	}
#pragma omp parallel if (n >= CPU_PAR_MIN && nblocks - first > 1)
	{
		float mb[Q8_CHUNK], vb[Q8_CHUNK];
#pragma omp for schedule(static)
		for (size_t b = first; b < nblocks; b++)
			adam8_block(q, p, m_codes, v_codes, m_absmax, v_absmax, g, n, block, b, &k,
				    lut_m, lut_v, mb, vb);
	}
}

void cpu_adamw8_step(float *p, uint8_t *m_codes, uint8_t *v_codes, float *m_absmax,
		     float *v_absmax, const float *g, size_t n, const struct st_adamw8_args *a)
{
	cpu_adamw8_step_simd(q8_simd_pick(), p, m_codes, v_codes, m_absmax, v_absmax, g, n, a);
}
