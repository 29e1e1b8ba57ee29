/* The avx512vbmi variant of the 8-bit block-wise (de)quantizer (quant8.h):
 * AVX-512 F + BW + VBMI. Both table reads of the fused step run on 64 values
 * per instruction from tables held in registers, with no gather:
 *
 *   decode: the map as 4 byte planes (16 registers). Two vpermi2b per plane
 *     (128 entries each) and a blend on the code's top bit give byte j of
 *     map[code] for 64 codes; unpacking the 4 planes assembles the floats.
 *   encode: the register table of quant8.h (rsub, rshift, rcode). The key
 *     comes from the top 16 bits of x, 32 values per instruction; the
 *     bucket's code c0 from 4 vpermi2b over the 512 keys; thr[c0] is
 *     assembled from 4 byte planes like the decoder's floats, for the one
 *     compare x > thr[c0].
 *
 * Unpacking interleaves within 128-bit lanes: dword vector q of the result
 * holds byte positions 16L + 4q + j (lane L, j < 4). The codes are first
 * permuted (order_idx) so that those positions hold elements 16q + 4L + j,
 * and the floats come out in element order.
 *
 * The fp32 operations are the other variants' (quant8.c's header: one IEEE
 * product x * scale, exact compares, exact products), so the codes and
 * values are the same bits. Maps the register table cannot hold (rok == 0),
 * the lanes whose x * scale is inf or NaN, and tails under 64 elements take
 * the avx512 variant's code. Measured on the 2-core Zen 5 build machine: see
 * the README (bench/q8_stages). */
#pragma GCC optimize("fp-contract=off")
/* Loops start on a cache line. In one build on the Zen 5 VM the encoder's
 * loop, where the link happened to place it, ran at 0.31 ns per value
 * instead of 0.22; aligned, it ran at 0.22 in every build tried. */
#pragma GCC optimize("align-loops=64")
#include "ops/cpu/quant8.h"
#include "ops/cpu/quant8_simd.h"

#define VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))
#define VBMI_INLINE \
	static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vbmi")))

/* Byte position p takes element 16((p >> 2) & 3) + 4(p >> 4) + (p & 3). */
#define ORD(p) (uint8_t)(16 * (((p) >> 2) & 3) + 4 * ((p) >> 4) + ((p)&3))
#define ORD4(p) ORD(p), ORD(p + 1), ORD(p + 2), ORD(p + 3)
#define ORD16(p) ORD4(p), ORD4(p + 4), ORD4(p + 8), ORD4(p + 12)
static const uint8_t order_idx[64] __attribute__((aligned(64))) = { ORD16(0), ORD16(16), ORD16(32),
								    ORD16(48) };

/* Word i takes the high half of float i of a 32-float pair of vectors. */
#define ODD(i) (uint16_t)(2 * (i) + 1)
#define ODD4(i) ODD(i), ODD(i + 1), ODD(i + 2), ODD(i + 3)
#define ODD16(i) ODD4(i), ODD4(i + 4), ODD4(i + 8), ODD4(i + 12)
static const uint16_t odd_idx[32] __attribute__((aligned(64))) = { ODD16(0), ODD16(16) };

/* A 256-entry table of 32-bit values as 4 byte planes, each in 4 registers. */
struct planes {
	__m512i b[4][4];
};

VBMI_INLINE struct planes planes_load(const uint8_t bytes[4][256])
{
	struct planes p;
	for (int j = 0; j < 4; j++)
		for (int k = 0; k < 4; k++)
			p.b[j][k] = _mm512_loadu_si512(bytes[j] + 64 * k);
	return p;
}

/* table[c] for 64 codes already permuted by order_idx, as 4 vectors of 16
 * values in element order */
VBMI_INLINE void planes_lookup(const struct planes *p, __m512i c, __m512i out[4])
{
	const __mmask64 top = _mm512_movepi8_mask(c);
	__m512i r[4];
	for (int j = 0; j < 4; j++)
		r[j] = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(p->b[j][0], c, p->b[j][1]),
					      _mm512_permutex2var_epi8(p->b[j][2], c, p->b[j][3]));
	const __m512i w01l = _mm512_unpacklo_epi8(r[0], r[1]), w01h = _mm512_unpackhi_epi8(r[0], r[1]);
	const __m512i w23l = _mm512_unpacklo_epi8(r[2], r[3]), w23h = _mm512_unpackhi_epi8(r[2], r[3]);
	out[0] = _mm512_unpacklo_epi16(w01l, w23l);
	out[1] = _mm512_unpackhi_epi16(w01l, w23l);
	out[2] = _mm512_unpacklo_epi16(w01h, w23h);
	out[3] = _mm512_unpackhi_epi16(w01h, w23h);
}

VBMI static void decode_vbmi(float *x, const uint8_t *codes, size_t n, float absmax,
			     const struct q8_lut *t)
{
	const struct planes p = planes_load(t->map_bytes);
	const __m512i order = _mm512_load_si512(order_idx);
	const __m512 s = _mm512_set1_ps(absmax);
	size_t i = 0;
	for (; i + 64 <= n; i += 64) {
		__m512i v[4];
		planes_lookup(&p, _mm512_permutexvar_epi8(order, _mm512_loadu_si512(codes + i)), v);
		for (int q = 0; q < 4; q++)
			_mm512_storeu_ps(x + i + 16 * q, _mm512_mul_ps(_mm512_castsi512_ps(v[q]), s));
	}
	/* The last n % 64 values. Not called when there are none: the avx512
	 * decoder loads its own table first, and that load for nothing was 40%
	 * of this decoder's time on a 256-value block. */
	if (i < n)
		q8_kernels_get(Q8_AVX512)->decode(x + i, codes + i, n - i, absmax, t);
}

static float absmax_vbmi(const float *x, size_t n)
{
	return q8_kernels_get(Q8_AVX512)->absmax(x, n);
}

/* rsub and rshift, 64 entries each, in registers */
struct rtab {
	__m512i sub0, sub1, sh0, sh1;
};

/* The register table's key (< 512) of 32 values given their top 16 bits w,
 * and the lanes whose exponent is all ones (inf, NaN). */
VBMI_INLINE __m512i rkey32(__m512i w, const struct rtab *r, __mmask32 *special)
{
	__m512i a = _mm512_and_si512(w, _mm512_set1_epi16(0x7fff));
	*special = _mm512_cmpge_epu16_mask(a, _mm512_set1_epi16(0x7f80));
	a = _mm512_min_epu16(_mm512_max_epu16(a, _mm512_set1_epi16(Q8_R_EMIN << 7)),
			     _mm512_set1_epi16(Q8_R_EMAX << 7));
	/* index = the sign (w's bit 15) in bit 5, the exponent's low bits below
	 * it: bitwise select (0xd8: C ? B : A) */
	const __m512i i = _mm512_ternarylogic_epi32(_mm512_srli_epi16(a, 7), _mm512_srli_epi16(w, 10),
						    _mm512_set1_epi16(0x20), 0xd8);
	const __m512i sub = _mm512_permutex2var_epi16(r->sub0, i, r->sub1);
	const __m512i sh = _mm512_permutex2var_epi16(r->sh0, i, r->sh1);
	return _mm512_srlv_epi16(_mm512_sub_epi16(a, sub), sh);
}

VBMI static void encode_vbmi(uint8_t *codes, const float *x, size_t n, float scale,
			     const struct q8_lut *t)
{
	const struct q8_kernels *avx512 = q8_kernels_get(Q8_AVX512);
	if (!t->rok) {
		avx512->encode(codes, x, n, scale, t);
		return;
	}
	const __m512 vs = _mm512_set1_ps(scale);
	const struct planes p = planes_load(t->thr_bytes);
	__m512i ct[8];
	for (int k = 0; k < 8; k++)
		ct[k] = _mm512_loadu_si512(t->rcode + 64 * k);
	const struct rtab r = {
		_mm512_loadu_si512(t->rsub), _mm512_loadu_si512(t->rsub + 32),
		_mm512_loadu_si512(t->rshift), _mm512_loadu_si512(t->rshift + 32),
	};
	const __m512i order = _mm512_load_si512(order_idx), odd = _mm512_load_si512(odd_idx);
	size_t i = 0;
	for (; i + 64 <= n; i += 64) {
		__m512 y[4];
		for (int q = 0; q < 4; q++)
			y[q] = _mm512_mul_ps(_mm512_loadu_ps(x + i + 16 * q), vs);
		__mmask32 sp0, sp1;
		const __m512i k0 = rkey32(_mm512_permutex2var_epi16(_mm512_castps_si512(y[0]), odd,
								     _mm512_castps_si512(y[1])),
					  &r, &sp0);
		const __m512i k1 = rkey32(_mm512_permutex2var_epi16(_mm512_castps_si512(y[2]), odd,
								     _mm512_castps_si512(y[3])),
					  &r, &sp1);
		/* c0 = rcode[key]: key bit 7 picks within a 256-key half, bit 8 the half */
		const __m512i kb = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(k0)),
						      _mm512_cvtepi16_epi8(k1), 1);
		const __m512i b8 = _mm512_set1_epi16(0x100);
		const __mmask64 half = _mm512_kunpackd(_mm512_test_epi16_mask(k1, b8),
						       _mm512_test_epi16_mask(k0, b8));
		const __mmask64 b7 = _mm512_movepi8_mask(kb);
		const __m512i lo = _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(ct[0], kb, ct[1]),
							  _mm512_permutex2var_epi8(ct[2], kb, ct[3]));
		const __m512i hi = _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(ct[4], kb, ct[5]),
							  _mm512_permutex2var_epi8(ct[6], kb, ct[7]));
		__m512i c = _mm512_mask_blend_epi8(half, lo, hi);
		/* + (x > thr[c0]) */
		__m512i th[4];
		planes_lookup(&p, _mm512_permutexvar_epi8(order, c), th);
		__mmask16 gt[4];
		for (int q = 0; q < 4; q++)
			gt[q] = _mm512_cmp_ps_mask(y[q], _mm512_castsi512_ps(th[q]), _CMP_GT_OQ);
		const __mmask64 up = _mm512_kunpackd(_mm512_kunpackw(gt[3], gt[2]),
						     _mm512_kunpackw(gt[1], gt[0]));
		c = _mm512_mask_add_epi8(c, up, c, _mm512_set1_epi8(1));
		_mm512_storeu_si512(codes + i, c);
		for (uint64_t sp = (uint64_t)sp1 << 32 | sp0; sp; sp &= sp - 1) {
			const int l = __builtin_ctzll(sp);
			codes[i + (size_t)l] = q8_code(t, x[i + (size_t)l] * scale);
		}
	}
	if (i < n) /* the last n % 64 values */
		avx512->encode(codes + i, x + i, n - i, scale, t);
}

const struct q8_kernels q8_kernels_vbmi = { Q8_AVX512VBMI, decode_vbmi, absmax_vbmi, encode_vbmi };
