/* Internal to the CPU backend: the per-element and per-vector pieces of 8-bit
 * block-wise (de)quantization, inlined into the fused kernels' loops
 * (quant8.c, adam8.c, sgd8.c). See quant8.h for the table they read and the
 * rounding they must reproduce.
 *
 * Table loads, four per parameter in the fused AdamW step:
 *   AVX2: built from scalar loads (vmovd / vpinsrd), not vector gathers: on
 *     Zen 3 a ymm gather costs 10-16 cycles for 8 elements, the scalar loads
 *     about 6.
 *   AVX-512 decode: the 256-entry map sits in 16 registers, and 8 two-table
 *     permutes (32 entries each) plus a 3-level blend on the code's top bits
 *     pick the values, with no memory access per element.
 *   AVX-512 encode: the bucket table (hundreds of entries) is read by a
 *     vpgatherdd.
 *   Measured on the 2-core Zen 5 build machine, one thread, in L1, per
 *   element: decode 0.14-0.15 ns against 0.28-0.34 for scalar loads (and
 *   0.34-0.39 for a gather), encode 0.42-0.50 against 0.59-0.65 ns. */
#ifndef ST_OPS_CPU_QUANT8_SIMD_H
#define ST_OPS_CPU_QUANT8_SIMD_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/quant8.h"

#define Q8_FN static inline __attribute__((always_inline))
#define Q8_FN_AVX2 static inline __attribute__((always_inline, target("avx2")))
#define Q8_FN_AVX512 static inline __attribute__((always_inline, target("avx512f")))

/* ---- scalar ---------------------------------------------------------------------- */

/* bucket of |x| given its bits u (sign cleared): see quant8.h */
Q8_FN int q8_bucket(uint32_t u, int shift, int nb)
{
	int32_t a = ((int32_t)(u - Q8_TINY_BITS) >> shift) + 1; /* < 1 below 2^-23 */
	return a < 0 ? 0 : a > nb - 1 ? nb - 1 : a;
}

/* the code of x (already scaled by its block's 1 / absmax) */
Q8_FN uint8_t q8_code(const struct q8_lut *t, float x)
{
	uint32_t bits;
	memcpy(&bits, &x, sizeof bits);
	const uint32_t neg = bits >> 31, mask = (1u << t->shift) - 1;
	const int key = q8_bucket(bits & 0x7fffffffu, t->shift, t->nb) + (neg ? t->nb : 0);
	int c;
	if (t->packed) {
		uint32_t e = t->entry[key], low = (bits & mask) ^ (neg ? mask : 0);
		c = (int)(e >> 24) + (low > (e & 0xffffffu));
	} else {
		c = (int)t->entry[key];
		for (int j = 0; j <= t->extra; j++)
			c += x > t->thr[c];
	}
	return x != x ? (uint8_t)t->zero : (uint8_t)c;
}

/* max(|x|, m), a NaN x never wins (as vmaxps(|x|, m) keeps m) */
Q8_FN float q8_absmax1(float x, float m)
{
	float a = x < 0 ? -x : x; /* |-0| may stay -0: never > m >= +0 either way */
	return a > m ? a : m;
}

/* ---- AVX2 ------------------------------------------------------------------------ */

/* map[codes[0..7]] */
Q8_FN_AVX2 __m256 q8_lookup8_avx2(const uint8_t *codes, const float *map)
{
	uint64_t w;
	memcpy(&w, codes, sizeof w);
	return _mm256_setr_ps(map[w & 255], map[(w >> 8) & 255], map[(w >> 16) & 255],
			      map[(w >> 24) & 255], map[(w >> 32) & 255], map[(w >> 40) & 255],
			      map[(w >> 48) & 255], map[w >> 56]);
}

/* The table's constants in registers, set up once per loop. */
struct q8_avx2 {
	__m256i low_mask, top, nbv, base;
	__m128i shift;
	const struct q8_lut *t;
};

Q8_FN_AVX2 struct q8_avx2 q8_avx2_setup(const struct q8_lut *t)
{
	struct q8_avx2 q = {
		.low_mask = _mm256_set1_epi32((1 << t->shift) - 1),
		.top = _mm256_set1_epi32(t->nb - 1),
		.nbv = _mm256_set1_epi32(t->nb),
		.base = _mm256_set1_epi32((int)(Q8_TINY_BITS - (1u << t->shift))),
		.shift = _mm_cvtsi32_si128(t->shift),
		.t = t,
	};
	return q;
}

/* codes of 8 values already scaled by their 1 / absmax, as int32 lanes.
 * Bucket: (max(|bits|, base) - base) >> shift, base = 2^-23's bits minus one
 * bucket width, equals q8_bucket's clamp-below; then min with the top. */
Q8_FN_AVX2 __m256i q8_encode8_avx2(__m256 v, const struct q8_avx2 *q)
{
	const struct q8_lut *t = q->t;
	__m256i bits = _mm256_castps_si256(v);
	__m256i neg = _mm256_srai_epi32(bits, 31);
	__m256i u = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
	__m256i a = _mm256_srl_epi32(_mm256_sub_epi32(_mm256_max_epu32(u, q->base), q->base), q->shift);
	__m256i key = _mm256_add_epi32(_mm256_min_epi32(a, q->top), _mm256_and_si256(neg, q->nbv));
	__m256i c;
	if (t->packed) {
		/* The keys reach the scalar loads as four 64-bit words (vmovq,
		 * vpextrq), not through a store and eight reloads: the encoder
		 * ran at 0.60 instead of 0.70 ns per value on the Zen 3 VM. */
		const uint32_t *en = t->entry;
		const __m128i klo = _mm256_castsi256_si128(key), khi = _mm256_extracti128_si256(key, 1);
		const uint64_t k01 = (uint64_t)_mm_cvtsi128_si64(klo);
		const uint64_t k23 = (uint64_t)_mm_extract_epi64(klo, 1);
		const uint64_t k45 = (uint64_t)_mm_cvtsi128_si64(khi);
		const uint64_t k67 = (uint64_t)_mm_extract_epi64(khi, 1);
		__m256i e = _mm256_setr_epi32((int)en[(uint32_t)k01], (int)en[k01 >> 32],
					      (int)en[(uint32_t)k23], (int)en[k23 >> 32],
					      (int)en[(uint32_t)k45], (int)en[k45 >> 32],
					      (int)en[(uint32_t)k67], (int)en[k67 >> 32]);
		__m256i low = _mm256_xor_si256(_mm256_and_si256(bits, q->low_mask),
					       _mm256_and_si256(neg, q->low_mask));
		/* a true compare is all ones, -1: subtracting it adds 1 */
		c = _mm256_sub_epi32(_mm256_srli_epi32(e, 24),
				     _mm256_cmpgt_epi32(low, _mm256_and_si256(e, _mm256_set1_epi32(0xffffff))));
	} else {
		c = _mm256_i32gather_epi32((const int *)t->entry, key, 4);
		for (int j = 0; j <= t->extra; j++) {
			__m256 th = _mm256_i32gather_ps(t->thr, c, 4);
			c = _mm256_sub_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(v, th, _CMP_GT_OQ)));
		}
	}
	__m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
	return _mm256_blendv_epi8(c, _mm256_set1_epi32(t->zero), _mm256_castps_si256(nan));
}

/* 16 int32 codes (two vectors) to 16 bytes */
Q8_FN_AVX2 void q8_store16_avx2(uint8_t *dst, __m256i c0, __m256i c1)
{
	__m256i w = _mm256_packus_epi32(c0, c1); /* per lane: c0[0..3] c1[0..3] | c0[4..7] c1[4..7] */
	__m128i b = _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
	/* b = c0[0..3] c1[0..3] c0[4..7] c1[4..7]: swap the middle dwords */
	_mm_storeu_si128((__m128i *)dst, _mm_shuffle_epi32(b, _MM_SHUFFLE(3, 1, 2, 0)));
}

Q8_FN_AVX2 __m256 q8_abs_avx2(__m256 x)
{
	return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
}

Q8_FN_AVX2 float q8_hmax_avx2(__m256 m, float r)
{
	float lanes[8];
	_mm256_storeu_ps(lanes, m);
	for (int l = 0; l < 8; l++)
		r = lanes[l] > r ? lanes[l] : r;
	return r;
}

/* ---- AVX-512 (AVX512F only) -------------------------------------------------------- */

/* A 256-entry map in registers, loaded once per loop. */
struct q8_map512 {
	__m512 t[16];
};

Q8_FN_AVX512 struct q8_map512 q8_map512_load(const float *map)
{
	struct q8_map512 m;
	for (int k = 0; k < 16; k++)
		m.t[k] = _mm512_loadu_ps(map + 16 * k);
	return m;
}

/* map[codes[0..15]]: permutex2var takes the code's low 5 bits within each
 * pair of registers (entries 32j .. 32j + 31); bits 5, 6, 7 choose the pair. */
Q8_FN_AVX512 __m512 q8_lookup16_avx512(const uint8_t *codes, const struct q8_map512 *m)
{
	const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)codes));
	__m512 r[8];
	for (int j = 0; j < 8; j++)
		r[j] = _mm512_permutex2var_ps(m->t[2 * j], idx, m->t[2 * j + 1]);
	const __mmask16 b5 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(32));
	const __mmask16 b6 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(64));
	const __mmask16 b7 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(128));
	for (int j = 0; j < 4; j++)
		r[j] = _mm512_mask_blend_ps(b5, r[2 * j], r[2 * j + 1]);
	for (int j = 0; j < 2; j++)
		r[j] = _mm512_mask_blend_ps(b6, r[2 * j], r[2 * j + 1]);
	return _mm512_mask_blend_ps(b7, r[0], r[1]);
}

struct q8_avx512 {
	__m512i low_mask, top, nbv, base;
	__m128i shift;
	const struct q8_lut *t;
};

Q8_FN_AVX512 struct q8_avx512 q8_avx512_setup(const struct q8_lut *t)
{
	struct q8_avx512 q = {
		.low_mask = _mm512_set1_epi32((1 << t->shift) - 1),
		.top = _mm512_set1_epi32(t->nb - 1),
		.nbv = _mm512_set1_epi32(t->nb),
		.base = _mm512_set1_epi32((int)(Q8_TINY_BITS - (1u << t->shift))),
		.shift = _mm_cvtsi32_si128(t->shift),
		.t = t,
	};
	return q;
}

/* as q8_encode8_avx2, 16 lanes, stored as 16 bytes */
Q8_FN_AVX512 void q8_encode16_avx512(uint8_t *dst, __m512 v, const struct q8_avx512 *q)
{
	const struct q8_lut *t = q->t;
	const __m512i one = _mm512_set1_epi32(1);
	__m512i bits = _mm512_castps_si512(v);
	__m512i neg = _mm512_srai_epi32(bits, 31);
	__m512i u = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
	__m512i a = _mm512_srl_epi32(_mm512_sub_epi32(_mm512_max_epu32(u, q->base), q->base), q->shift);
	__m512i key = _mm512_add_epi32(_mm512_min_epi32(a, q->top), _mm512_and_si512(neg, q->nbv));
	__m512i c;
	if (t->packed) {
		__m512i e = _mm512_i32gather_epi32(key, (const void *)t->entry, 4);
		__m512i low = _mm512_xor_si512(_mm512_and_si512(bits, q->low_mask),
					       _mm512_and_si512(neg, q->low_mask));
		__mmask16 gt = _mm512_cmpgt_epi32_mask(low, _mm512_and_si512(e, _mm512_set1_epi32(0xffffff)));
		c = _mm512_srli_epi32(e, 24);
		c = _mm512_mask_add_epi32(c, gt, c, one);
	} else {
		c = _mm512_i32gather_epi32(key, (const void *)t->entry, 4);
		for (int j = 0; j <= t->extra; j++) {
			__m512 th = _mm512_i32gather_ps(c, t->thr, 4);
			c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(v, th, _CMP_GT_OQ), c, one);
		}
	}
	c = _mm512_mask_mov_epi32(c, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(t->zero));
	_mm_storeu_si128((__m128i *)dst, _mm512_cvtepi32_epi8(c));
}

Q8_FN_AVX512 __m512 q8_abs_avx512(__m512 x)
{
	return _mm512_castsi512_ps(
		_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
}

Q8_FN_AVX512 float q8_hmax_avx512(__m512 m, float r)
{
	float lanes[16];
	_mm512_storeu_ps(lanes, m);
	for (int l = 0; l < 16; l++)
		r = lanes[l] > r ? lanes[l] : r;
	return r;
}

#endif
