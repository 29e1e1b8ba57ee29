/* The 8-bit block-wise (de)quantizer of the fused 8-bit optimizers: lookup
 * table, run-time ISA dispatch, and the scalar, AVX2 and AVX-512 versions of
 * decode / absmax / encode. See quant8.h for the contract.
 *
 * Encoding x (already divided by its block's absmax), all variants:
 *   bucket = sign, then |x| < 2^-22, or (binade, top `mbits` mantissa bits)
 *   for 2^-22 <= |x| < 2, or |x| >= 2 (inf, NaN bits land here too)
 *   code   = code[bucket] + (x > bthr[bucket])        (one compare)
 *            (+ `extra` more compares x > thr[code] for maps that need them)
 *   NaN    -> the code of 0.
 * This is quant_nearest's answer because code[bucket] is the code of the
 * bucket's smallest float, and at most 1 + extra midpoints fall inside a
 * bucket. For the dynamic maps (neighbouring entries at least 1.4% of the
 * decade's top apart) mbits = 6 (signed) and 7 (unsigned) give one compare.
 *
 * The variants do the same IEEE operations (one fp32 division x / absmax per
 * element, exact compares, exact products map[c] * absmax) and differ only in
 * width, so their results are bit-identical. Max of |x| is exact and order-
 * independent once NaN is ignored, so the lane order of the reduction does
 * not matter either. */
#pragma GCC optimize("fp-contract=off") /* no a*b+c fusion in any variant */
#include "ops/cpu/quant8.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- dispatch ---------------------------------------------------------------- */

int q8_simd_supported(enum q8_simd s)
{
	__builtin_cpu_init();
	switch (s) {
	case Q8_SCALAR:
		return 1;
	case Q8_AVX2:
		return __builtin_cpu_supports("avx2");
	case Q8_AVX512:
		return __builtin_cpu_supports("avx512f");
	}
	return 0;
}

const char *q8_simd_name(enum q8_simd s)
{
	return s == Q8_AVX512 ? "avx512" : s == Q8_AVX2 ? "avx2" : "scalar";
}

enum q8_simd q8_simd_pick(void)
{
	enum q8_simd best = q8_simd_supported(Q8_AVX512) ? Q8_AVX512
			    : q8_simd_supported(Q8_AVX2) ? Q8_AVX2
							 : Q8_SCALAR;
	const char *env = getenv("STRATA_SIMD");
	if (env)
		for (int s = Q8_SCALAR; s <= Q8_AVX512; s++)
			if (!strcmp(env, q8_simd_name((enum q8_simd)s)) &&
			    q8_simd_supported((enum q8_simd)s))
				return (enum q8_simd)s;
	return best;
}

/* ---- lookup table -------------------------------------------------------------- */

static float f_of_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* number of k in 0..254 with x > thr[k], thr sorted, thr[255] = +inf */
static int count_above(const float thr[256], float x)
{
	int c = 0;
	for (int s = 128; s > 0; s >>= 1) /* reads thr[c + s - 1] <= thr[254] */
		if (x > thr[c + s - 1])
			c += s;
	return c;
}

/* bucket of |x| given its bits u (sign cleared): see the file comment */
static int bucket_of(uint32_t u, int shift, int nb)
{
	int32_t a = ((int32_t)(u - Q8_TINY_BITS) >> shift) + 1; /* < 1 below 2^-22 */
	return a < 0 ? 0 : a > nb - 1 ? nb - 1 : a;
}

void q8_lut_build(struct q8_lut *t, const float map[256])
{
	for (int k = 0; k < 255; k++) {
		double mid = ((double)map[k] + (double)map[k + 1]) * 0.5; /* exact: see quantmap.c */
		float f = (float)mid;
		if ((double)f > mid)
			f = nextafterf(f, -INFINITY);
		t->thr[k] = f;
	}
	t->thr[255] = INFINITY;
	t->zero = count_above(t->thr, 0.0f);

	/* The fewest mantissa bits for which no bucket holds two midpoints:
	 * midpoints are sorted and buckets are intervals, so two midpoints share
	 * a bucket iff two neighbouring ones do. */
	int mbits = Q8_MBITS_MAX;
	for (int mb = 4; mb < Q8_MBITS_MAX; mb++) {
		int shift = 23 - mb, nb = 2 + (23 << mb), shared = 0;
		for (int k = 0; k + 1 < 255 && !shared; k++) {
			uint32_t a, b;
			memcpy(&a, &t->thr[k], 4);
			memcpy(&b, &t->thr[k + 1], 4);
			shared = (a >> 31) == (b >> 31) &&
				 bucket_of(a & 0x7fffffffu, shift, nb) == bucket_of(b & 0x7fffffffu, shift, nb);
		}
		if (!shared) {
			mbits = mb;
			break;
		}
	}
	t->shift = 23 - mbits;
	t->nb = 2 + (23 << mbits);

	/* Bucket a (positive) holds the floats with bits lo..hi. The code of any
	 * x in it is count(lo) plus the midpoints thr[k] with lo <= thr[k] < x. */
	const int nb = t->nb, last = nb - 1;
	int most = 0;
	for (int a = 0; a < nb; a++) {
		uint32_t lo = a == 0 ? 0 : a == last ? 0x40000000u : Q8_TINY_BITS + ((uint32_t)(a - 1) << t->shift);
		uint32_t hi = a == 0 ? Q8_TINY_BITS - 1 : a == last ? 0x7f800000u : lo + (1u << t->shift) - 1;
		for (int neg = 0; neg < 2; neg++) {
			float x0 = neg ? -f_of_bits(hi) : f_of_bits(lo);
			float x1 = neg ? -f_of_bits(lo) : f_of_bits(hi);
			int c0 = count_above(t->thr, x0), c1 = count_above(t->thr, x1);
			int key = a + (neg ? nb : 0);
			t->code[key] = (uint8_t)c0;
			t->bthr[key] = t->thr[c0];
			most = c1 - c0 > most ? c1 - c0 : most;
		}
	}
	memset(t->code + 2 * nb, 0, 4);
	t->extra = most > 1 ? most - 1 : 0;
}

/* ---- scalar -------------------------------------------------------------------- */

static inline uint8_t code_scalar(const struct q8_lut *t, float x)
{
	uint32_t bits;
	memcpy(&bits, &x, sizeof bits);
	int key = bucket_of(bits & 0x7fffffffu, t->shift, t->nb) + (bits >> 31 ? t->nb : 0);
	int c = t->code[key] + (x > t->bthr[key]);
	for (int j = 0; j < t->extra; j++)
		c += x > t->thr[c];
	return x != x ? (uint8_t)t->zero : (uint8_t)c;
}

static void decode_scalar(float *x, const uint8_t *codes, size_t n, float absmax,
			  const float map[256])
{
	for (size_t i = 0; i < n; i++)
		x[i] = map[codes[i]] * absmax;
}

static float absmax_scalar(const float *x, size_t n)
{
	float m = 0.0f;
	for (size_t i = 0; i < n; i++) {
		float a = fabsf(x[i]);
		m = a > m ? a : m; /* a NaN never wins: vmaxps(a, m) keeps m too */
	}
	return m;
}

static void encode_scalar(uint8_t *codes, const float *x, size_t n, float absmax,
			  const struct q8_lut *t)
{
	const float div = absmax > 0.0f ? absmax : 1.0f;
	for (size_t i = 0; i < n; i++)
		codes[i] = code_scalar(t, x[i] / div);
}

/* ---- AVX2 ------------------------------------------------------------------------ */

#define AVX2 __attribute__((target("avx2")))

AVX2 static void decode_avx2(float *x, const uint8_t *codes, size_t n, float absmax,
			     const float map[256])
{
	const __m256 s = _mm256_set1_ps(absmax);
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(codes + i)));
		_mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_i32gather_ps(map, idx, 4), s));
	}
	decode_scalar(x + i, codes + i, n - i, absmax, map);
}

AVX2 static float absmax_avx2(const float *x, size_t n)
{
	const __m256 sign = _mm256_set1_ps(-0.0f);
	__m256 m = _mm256_setzero_ps();
	size_t i = 0;
	for (; i + 8 <= n; i += 8) /* vmaxps(a, m) returns m when a is NaN */
		m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), m);
	float lanes[8];
	_mm256_storeu_ps(lanes, m);
	float r = absmax_scalar(x + i, n - i);
	for (int l = 0; l < 8; l++)
		r = lanes[l] > r ? lanes[l] : r;
	return r;
}

AVX2 static void encode_avx2(uint8_t *codes, const float *x, size_t n, float absmax,
			     const struct q8_lut *t)
{
	const float div = absmax > 0.0f ? absmax : 1.0f;
	const __m256 vdiv = _mm256_set1_ps(div);
	const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), tiny = _mm256_set1_epi32((int)Q8_TINY_BITS);
	const __m256i one = _mm256_set1_epi32(1), zero = _mm256_setzero_si256();
	const __m256i top = _mm256_set1_epi32(t->nb - 1), nbv = _mm256_set1_epi32(t->nb);
	const __m256i byte = _mm256_set1_epi32(0xff), zcode = _mm256_set1_epi32(t->zero);
	const __m128i shift = _mm_cvtsi32_si128(t->shift);
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_div_ps(_mm256_loadu_ps(x + i), vdiv);
		__m256i bits = _mm256_castps_si256(v);
		__m256i a = _mm256_sra_epi32(_mm256_sub_epi32(_mm256_and_si256(bits, abs_mask), tiny), shift);
		a = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(a, one), zero), top);
		__m256i key = _mm256_add_epi32(a, _mm256_and_si256(_mm256_srai_epi32(bits, 31), nbv));
		__m256i c = _mm256_and_si256(_mm256_i32gather_epi32((const int *)t->code, key, 1), byte);
		__m256 th = _mm256_i32gather_ps(t->bthr, key, 4);
		/* a true compare is all ones, -1: subtracting it adds 1 */
		c = _mm256_sub_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(v, th, _CMP_GT_OQ)));
		for (int j = 0; j < t->extra; j++) {
			th = _mm256_i32gather_ps(t->thr, c, 4);
			c = _mm256_sub_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(v, th, _CMP_GT_OQ)));
		}
		__m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
		c = _mm256_blendv_epi8(c, zcode, _mm256_castps_si256(nan));
		__m128i w = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
		_mm_storel_epi64((__m128i *)(codes + i), _mm_packus_epi16(w, w));
	}
	for (; i < n; i++)
		codes[i] = code_scalar(t, x[i] / div);
}

/* ---- AVX-512 (AVX512F only) -------------------------------------------------------- */

#define AVX512 __attribute__((target("avx512f")))

AVX512 static void decode_avx512(float *x, const uint8_t *codes, size_t n, float absmax,
				 const float map[256])
{
	const __m512 s = _mm512_set1_ps(absmax);
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(codes + i)));
		_mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_i32gather_ps(idx, map, 4), s));
	}
	decode_scalar(x + i, codes + i, n - i, absmax, map);
}

AVX512 static float absmax_avx512(const float *x, size_t n)
{
	const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
	__m512 m = _mm512_setzero_ps();
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m512 a = _mm512_castsi512_ps(
			_mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + i)), abs_mask));
		m = _mm512_max_ps(a, m); /* returns m when a is NaN */
	}
	float lanes[16];
	_mm512_storeu_ps(lanes, m);
	float r = absmax_scalar(x + i, n - i);
	for (int l = 0; l < 16; l++)
		r = lanes[l] > r ? lanes[l] : r;
	return r;
}

AVX512 static void encode_avx512(uint8_t *codes, const float *x, size_t n, float absmax,
				 const struct q8_lut *t)
{
	const float div = absmax > 0.0f ? absmax : 1.0f;
	const __m512 vdiv = _mm512_set1_ps(div);
	const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), tiny = _mm512_set1_epi32((int)Q8_TINY_BITS);
	const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
	const __m512i top = _mm512_set1_epi32(t->nb - 1), nbv = _mm512_set1_epi32(t->nb);
	const __m512i byte = _mm512_set1_epi32(0xff), zcode = _mm512_set1_epi32(t->zero);
	const __m128i shift = _mm_cvtsi32_si128(t->shift);
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m512 v = _mm512_div_ps(_mm512_loadu_ps(x + i), vdiv);
		__m512i bits = _mm512_castps_si512(v);
		__m512i a = _mm512_sra_epi32(_mm512_sub_epi32(_mm512_and_si512(bits, abs_mask), tiny), shift);
		a = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(a, one), zero), top);
		__m512i key = _mm512_add_epi32(a, _mm512_and_si512(_mm512_srai_epi32(bits, 31), nbv));
		__m512i c = _mm512_and_si512(_mm512_i32gather_epi32(key, (const void *)t->code, 1), byte);
		__m512 th = _mm512_i32gather_ps(key, t->bthr, 4);
		c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(v, th, _CMP_GT_OQ), c, one);
		for (int j = 0; j < t->extra; j++) {
			th = _mm512_i32gather_ps(c, t->thr, 4);
			c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(v, th, _CMP_GT_OQ), c, one);
		}
		c = _mm512_mask_mov_epi32(c, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), zcode);
		_mm_storeu_si128((__m128i *)(codes + i), _mm512_cvtepi32_epi8(c));
	}
	for (; i < n; i++)
		codes[i] = code_scalar(t, x[i] / div);
}

/* ---- table ------------------------------------------------------------------------- */

static const struct q8_kernels kernels[3] = {
	{ Q8_SCALAR, decode_scalar, absmax_scalar, encode_scalar },
	{ Q8_AVX2, decode_avx2, absmax_avx2, encode_avx2 },
	{ Q8_AVX512, decode_avx512, absmax_avx512, encode_avx512 },
};

const struct q8_kernels *q8_kernels_get(enum q8_simd s)
{
	return &kernels[s];
}
