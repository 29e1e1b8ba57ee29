/* The 8-bit block-wise (de)quantizer of the fused 8-bit optimizers: lookup
 * table, run-time ISA dispatch, and the scalar, AVX2 and AVX-512 versions of
 * decode / absmax / encode. See quant8.h for the contract.
 *
 * Encoding x (already scaled by its block's 1 / absmax), all variants:
 *   bucket = sign, then |x| < 2^-23, or (binade, top `mbits` mantissa bits)
 *   for 2^-23 <= |x| < 2, or |x| >= 2 (inf, NaN bits land here too)
 *   code   = code[bucket] + (x > bthr[bucket])        (one compare)
 *            (+ `extra` more compares x > thr[code] for maps that need them)
 *   NaN    -> the code of 0.
 * This is quant_nearest's answer because code[bucket] is the code of the
 * bucket's smallest float, and at most 1 + extra midpoints fall inside a
 * bucket. For the dynamic maps (neighbouring entries at least 1.4% of the
 * decade's top apart) mbits = 6 (signed) and 7 (unsigned) give one compare.
 *
 * The variants do the same IEEE operations (one fp32 product x * scale per
 * element, scale = ops_q8_scale(absmax) from the caller, exact compares, exact
 * products map[c] * absmax) and differ only in
 * width, so their results are bit-identical. Max of |x| is exact and order-
 * independent once NaN is ignored, so the lane order of the reduction does
 * not matter either. */
#pragma GCC optimize("fp-contract=off") /* no a*b+c fusion in any variant */
#include "ops/cpu/quant8.h"
#include "ops/cpu/quant8_simd.h"
#include "util/check.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
	case Q8_AVX512VBMI:
	case Q8_TUNED:
		return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		       __builtin_cpu_supports("avx512vbmi");
	case Q8_NSIMD:
		break;
	}
	return 0;
}

const char *q8_simd_name(enum q8_simd s)
{
	static const char *const names[Q8_NSIMD] = { "scalar", "avx2", "avx512", "avx512vbmi",
						     "tuned" };
	return s >= Q8_SCALAR && s < Q8_NSIMD ? names[s] : "?";
}

/* Seconds per pass of variant s's decoder (which = 0) or encoder (1) over n
 * values in 256-value blocks, the fused steps' pattern; best of `rounds`. */
static double time_piece(enum q8_simd s, int which, const struct q8_lut *t, float *x, uint8_t *c,
			 size_t n, int rounds)
{
	const struct q8_kernels *k = q8_kernels_get(s);
	double best = 1e30;
	for (int r = 0; r < rounds; r++) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		for (size_t i = 0; i < n; i += 256)
			if (which)
				k->encode(c + i, x + i, 256, 2.0f, t);
			else
				k->decode(x + i, c + i, 256, 0.5f, t);
		clock_gettime(CLOCK_MONOTONIC, &b);
		const double dt = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
		best = dt < best ? dt : best;
	}
	return best;
}

/* The tuned variant: avx512's or avx512vbmi's decoder and encoder, each the
 * faster one here. VBMI trades gathers and float permutes for byte permutes:
 * on AMD Zen 5 both of its pieces are faster (1.5x, 2x); on the Intel Xeon
 * measured its decoder was up to 2x faster and its encoder 1.2-1.7x slower
 * (README, "Optimizer step"). Measured once per process, about 0.2 ms; all
 * variants give the same bits, so the choice only moves the speed. */
static struct q8_kernels tuned;
static char tuned_desc[64];

static void tune(void)
{
	enum { N = 8192 };
	const struct q8_kernels *a = q8_kernels_get(Q8_AVX512), *v = &q8_kernels_vbmi;
	tuned = (struct q8_kernels){ Q8_TUNED, a->decode, a->absmax, a->encode };
	/* A linear map, off-centre so that no midpoint is 0: like the dynamic
	 * maps (which live in optim/, above this layer) it takes the one-gather
	 * packed table and fits the register table (checked below), and the
	 * pieces' speed depends on nothing else of the map. */
	float map[256];
	for (int k = 0; k < 256; k++)
		map[k] = -0.99f + (float)k * (1.99f / 255.0f);
	struct q8_lut *t = malloc(sizeof *t);
	float *x = malloc(N * sizeof *x);
	uint8_t *c = malloc(N);
	if (t && x && c) {
		q8_lut_build(t, map);
		for (size_t i = 0; i < N; i++)
			c[i] = (uint8_t)(i * 2654435761u >> 24);
		double ta[2] = { 0, 0 }, tv[2] = { 0, 0 };
		for (int r = 0; r < 3; r++) /* interleaved against drift */
			for (int w = 0; w < 2; w++) {
				ta[w] += time_piece(Q8_AVX512, w, t, x, c, N, 3);
				tv[w] += time_piece(Q8_AVX512VBMI, w, t, x, c, N, 3);
			}
		if (tv[0] < ta[0])
			tuned.decode = v->decode;
		if (tv[1] < ta[1] && t->rok && t->packed)
			tuned.encode = v->encode;
	}
	free(t), free(x), free(c);
	snprintf(tuned_desc, sizeof tuned_desc, "decode %s, encode %s",
		 tuned.decode == v->decode ? "avx512vbmi" : "avx512",
		 tuned.encode == v->encode ? "avx512vbmi" : "avx512");
}

static const struct q8_kernels *tuned_get(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, tune);
	return &tuned;
}

const char *q8_simd_describe(enum q8_simd s)
{
	return s == Q8_TUNED ? (tuned_get(), tuned_desc) : q8_simd_name(s);
}

enum q8_simd q8_simd_pick(void)
{
	enum q8_simd best = Q8_SCALAR;
	for (int s = Q8_SCALAR; s < Q8_NSIMD; s++)
		if (q8_simd_supported((enum q8_simd)s))
			best = (enum q8_simd)s;
	const char *env = getenv("STRATA_SIMD");
	if (!env)
		return best;
	for (int s = Q8_SCALAR; s < Q8_NSIMD; s++)
		if (!strcmp(env, q8_simd_name((enum q8_simd)s)) && q8_simd_supported((enum q8_simd)s))
			return (enum q8_simd)s;
	/* once per process: this runs at every step */
	static int warned;
	if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED)) {
		char have[96] = ""; /* the variants this CPU runs */
		for (int s = Q8_SCALAR; s < Q8_NSIMD; s++)
			if (q8_simd_supported((enum q8_simd)s))
				snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s",
					 *have ? ", " : "", q8_simd_name((enum q8_simd)s));
		st_log_warn("STRATA_SIMD=%s is not a variant this CPU runs (it runs %s): using %s", env,
			    have, q8_simd_name(best));
	}
	return best;
}

/* ---- lookup table -------------------------------------------------------------- */

/* number of k in 0..254 with x > thr[k], thr sorted, thr[255] = +inf */
static int count_above(const float thr[256], float x)
{
	int c = 0;
	for (int s = 128; s > 0; s >>= 1) /* reads thr[c + s - 1] <= thr[254] */
		if (x > thr[c + s - 1])
			c += s;
	return c;
}

static uint32_t bits_of(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof u);
	return u;
}

static float float_of(uint32_t u)
{
	float x;
	memcpy(&x, &u, sizeof x);
	return x;
}

/* Bucket j of 2^n in binade e of sign s, as the floats lo..hi of x (x's
 * order); the clamped ends reach 0 and the largest finite float. */
static void rlut_bucket(int s, int e, int n, int j, float *lo, float *hi)
{
	const int sh = 7 - n;
	uint32_t ulo = (uint32_t)(e << 7 | j << sh) << 16;
	uint32_t uhi = (uint32_t)(e << 7 | (((j + 1) << sh) - 1)) << 16 | 0xffffu;
	if (e == Q8_R_EMIN && j == 0)
		ulo = 0;
	if (e == Q8_R_EMAX)
		uhi = 0x7f7fffffu;
	*lo = s ? -float_of(uhi) : float_of(ulo);
	*hi = s ? -float_of(ulo) : float_of(uhi);
}

/* The register table (struct q8_lut, rok..rcode). Per sign and binade, the
 * fewest mantissa bits n that leave at most one midpoint per bucket, so that
 * code = c0 + (x > thr[c0]) with c0 the code of the bucket's smallest x:
 * thr[c0] is then the first midpoint >= that x, the one inside the bucket if
 * any. Needs thr[] sorted (q8_lut_build). Binade Q8_R_EMAX gets one bucket
 * (every larger |x| is clamped into it); |x| of inf and NaN bits are left to
 * the encoder's scalar fix-up. */
static void rlut_build(struct q8_lut *t)
{
	memset(t->rsub, 0, sizeof t->rsub);
	memset(t->rshift, 0, sizeof t->rshift);
	t->rok = t->rkeys = 0;
	int base = 0;
	for (int s = 0; s < 2; s++)
		for (int e = Q8_R_EMIN; e <= Q8_R_EMAX; e++) {
			int n = 0;
			for (; n <= (e == Q8_R_EMAX ? 0 : 7); n++) {
				int fits = 1;
				for (int j = 0; j < 1 << n && fits; j++) {
					float lo, hi;
					rlut_bucket(s, e, n, j, &lo, &hi);
					fits = count_above(t->thr, hi) - count_above(t->thr, lo) <= 1;
				}
				if (fits)
					break;
			}
			if (n > (e == Q8_R_EMAX ? 0 : 7) || base + (1 << n) > 512)
				return; /* too dense for 7 bits, or too many keys */
			const int i = s << 5 | (e & 31), sh = 7 - n;
			t->rshift[i] = (uint16_t)sh;
			t->rsub[i] = (uint16_t)((e << 7) - (base << sh));
			for (int j = 0; j < 1 << n; j++) {
				float lo, hi;
				rlut_bucket(s, e, n, j, &lo, &hi);
				t->rcode[base + j] = (uint8_t)count_above(t->thr, lo);
			}
			base += 1 << n;
		}
	memset(t->rcode + base, 0, sizeof t->rcode - (size_t)base);
	t->rkeys = base;
	t->rok = 1;
}

/* bucket `key` starts at code c; tlow: see struct q8_lut */
static void lut_set(struct q8_lut *t, int key, int c, uint32_t tlow)
{
	t->entry[key] = (uint32_t)c << 24 | tlow;
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
		int shift = 23 - mb, nb = 2 + (Q8_BINADES << mb), shared = 0;
		for (int k = 0; k + 1 < 255 && !shared; k++) {
			uint32_t a = bits_of(t->thr[k]), b = bits_of(t->thr[k + 1]);
			shared = (a >> 31) == (b >> 31) &&
				 q8_bucket(a & 0x7fffffffu, shift, nb) == q8_bucket(b & 0x7fffffffu, shift, nb);
		}
		if (!shared) {
			mbits = mb;
			break;
		}
	}
	t->shift = 23 - mbits;
	t->nb = 2 + (Q8_BINADES << mbits);

	/* Bucket b (of |x|) holds the floats with bits lo..hi. For x in it the
	 * code is c0 = count(the bucket's smallest float) plus the midpoints
	 * crossed inside the bucket. Midpoints are sorted, so walking them fills
	 * the buckets in order: positive x upwards from the first midpoint >= 0,
	 * negative x from the last midpoint < 0 downwards (growing |x|). */
	const int nb = t->nb;
	const uint32_t mask = (1u << t->shift) - 1;
	int npos = 0; /* midpoints below npos are negative */
	while (npos < 255 && t->thr[npos] < 0.0f)
		npos++;
	int most = 0, edge = 0;
	/* positive x: c0 = npos + the midpoints >= 0 in lower buckets */
	int b = 0;
	for (int k = npos; k < 255;) {
		const int bk = q8_bucket(bits_of(t->thr[k]), t->shift, nb);
		int cnt = 1;
		while (k + cnt < 255 && q8_bucket(bits_of(t->thr[k + cnt]), t->shift, nb) == bk)
			cnt++;
		for (; b < bk; b++)
			lut_set(t, b, k, mask);
		/* thr[k] is in the bucket: same exponent and top mantissa bits as
		 * x, so x > thr[k] iff x's low bits are larger */
		lut_set(t, bk, k, bits_of(t->thr[k]) & mask);
		b = bk + 1;
		most = cnt > most ? cnt : most;
		edge |= bk == 0 || bk == nb - 1;
		k += cnt;
	}
	for (; b < nb; b++)
		lut_set(t, b, 255, mask);
	/* negative x (-0 included): c0 = the midpoints in higher buckets of |x|;
	 * the first one crossed as x grows is the most negative in the bucket,
	 * and for negative floats larger x has smaller low bits: complemented */
	b = 0;
	for (int k = npos - 1; k >= 0;) {
		const int bk = q8_bucket(bits_of(t->thr[k]) & 0x7fffffffu, t->shift, nb);
		int cnt = 1;
		while (k - cnt >= 0 &&
		       q8_bucket(bits_of(t->thr[k - cnt]) & 0x7fffffffu, t->shift, nb) == bk)
			cnt++;
		for (; b < bk; b++)
			lut_set(t, nb + b, k + 1, mask);
		const int c0 = k + 1 - cnt;
		lut_set(t, nb + bk, c0, (bits_of(t->thr[c0]) & mask) ^ mask);
		b = bk + 1;
		most = cnt > most ? cnt : most;
		edge |= bk == 0 || bk == nb - 1;
		k -= cnt;
	}
	for (; b < nb; b++)
		lut_set(t, nb + b, 0, mask);
	/* Packed needs at most one midpoint per bucket, and none in the first
	 * and last buckets, which span more than one set of top bits. */
	t->packed = most <= 1 && !edge;
	t->extra = most > 1 ? most - 1 : 0;
	if (!t->packed)
		for (int k = 0; k < 2 * nb; k++)
			t->entry[k] >>= 24;
	rlut_build(t);
	memcpy(t->map, map, sizeof t->map);
	for (int k = 0; k < 256; k++)
		for (int j = 0; j < 4; j++) {
			t->thr_bytes[j][k] = (uint8_t)(bits_of(t->thr[k]) >> (8 * j));
			t->map_bytes[j][k] = (uint8_t)(bits_of(map[k]) >> (8 * j));
		}
}

const struct q8_lut *q8_lut_get(const float map[256])
{
	static _Thread_local struct q8_lut cache[2];
	static _Thread_local int used[2], next; /* next: the least recently used */
	for (int k = 0; k < 2; k++)
		if (used[k] && !memcmp(cache[k].map, map, sizeof cache[k].map)) {
			next = k ^ 1;
			return &cache[k];
		}
	struct q8_lut *t = &cache[next];
	used[next] = 1;
	next ^= 1;
	q8_lut_build(t, map);
	return t;
}

/* ---- scalar -------------------------------------------------------------------- */

static void decode_scalar(float *x, const uint8_t *codes, size_t n, float absmax,
			  const struct q8_lut *t)
{
	for (size_t i = 0; i < n; i++)
		x[i] = t->map[codes[i]] * absmax;
}

static float absmax_scalar(const float *x, size_t n)
{
	float m = 0.0f;
	for (size_t i = 0; i < n; i++)
		m = q8_absmax1(x[i], m);
	return m;
}

static void encode_scalar(uint8_t *codes, const float *x, size_t n, float scale,
			  const struct q8_lut *t)
{
	for (size_t i = 0; i < n; i++)
		codes[i] = q8_code(t, x[i] * scale);
}

/* ---- AVX2 ------------------------------------------------------------------------ */

__attribute__((target("avx2"))) static void decode_avx2(float *x, const uint8_t *codes, size_t n,
							float absmax, const struct q8_lut *t)
{
	const __m256 s = _mm256_set1_ps(absmax);
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i, _mm256_mul_ps(q8_lookup8_avx2(codes + i, t->map), s));
	decode_scalar(x + i, codes + i, n - i, absmax, t);
}

__attribute__((target("avx2"))) static float absmax_avx2(const float *x, size_t n)
{
	__m256 m = _mm256_setzero_ps();
	size_t i = 0;
	for (; i + 8 <= n; i += 8) /* vmaxps(a, m) returns m when a is NaN */
		m = _mm256_max_ps(q8_abs_avx2(_mm256_loadu_ps(x + i)), m);
	return q8_hmax_avx2(m, absmax_scalar(x + i, n - i));
}

__attribute__((target("avx2"))) static void encode_avx2(uint8_t *codes, const float *x, size_t n,
							float scale, const struct q8_lut *t)
{
	const __m256 s = _mm256_set1_ps(scale);
	const struct q8_avx2 q = q8_avx2_setup(t);
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256i c0 = q8_encode8_avx2(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), &q);
		__m256i c1 = q8_encode8_avx2(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), s), &q);
		q8_store16_avx2(codes + i, c0, c1);
	}
	for (; i < n; i++)
		codes[i] = q8_code(t, x[i] * scale);
}

/* ---- AVX-512 (AVX512F only) -------------------------------------------------------- */

__attribute__((target("avx512f"))) static void decode_avx512(float *x, const uint8_t *codes,
							     size_t n, float absmax,
							     const struct q8_lut *t)
{
	const __m512 s = _mm512_set1_ps(absmax);
	const struct q8_map512 m = q8_map512_load(t->map);
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(x + i, _mm512_mul_ps(q8_lookup16_avx512(codes + i, &m), s));
	decode_scalar(x + i, codes + i, n - i, absmax, t);
}

__attribute__((target("avx512f"))) static float absmax_avx512(const float *x, size_t n)
{
	__m512 m = _mm512_setzero_ps();
	size_t i = 0;
	for (; i + 16 <= n; i += 16) /* returns m when the first operand is NaN */
		m = _mm512_max_ps(q8_abs_avx512(_mm512_loadu_ps(x + i)), m);
	return q8_hmax_avx512(m, absmax_scalar(x + i, n - i));
}

__attribute__((target("avx512f"))) static void encode_avx512(uint8_t *codes, const float *x,
							     size_t n, float scale,
							     const struct q8_lut *t)
{
	const __m512 s = _mm512_set1_ps(scale);
	const struct q8_avx512 q = q8_avx512_setup(t);
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		q8_encode16_avx512(codes + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), s), &q);
	for (; i < n; i++)
		codes[i] = q8_code(t, x[i] * scale);
}

/* ---- table ------------------------------------------------------------------------- */

static const struct q8_kernels kernels[3] = {
	{ Q8_SCALAR, decode_scalar, absmax_scalar, encode_scalar },
	{ Q8_AVX2, decode_avx2, absmax_avx2, encode_avx2 },
	{ Q8_AVX512, decode_avx512, absmax_avx512, encode_avx512 },
};

const struct q8_kernels *q8_kernels_get(enum q8_simd s)
{
	return s == Q8_AVX512VBMI ? &q8_kernels_vbmi : s == Q8_TUNED ? tuned_get() : &kernels[s];
}
