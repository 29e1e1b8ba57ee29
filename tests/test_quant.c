/* 8-bit optimizer tests: the dynamic maps against their definition, the
 * nearest-entry rule against brute force, block-wise quantization error
 * against float64 on several distributions, and the fused adamw8/sgd8 kernels
 * against an unfused replay built from the scalar reference helpers
 * (dequant_blockwise -> fp32 update in ops.h's order -> quant_blockwise),
 * required to match EXACTLY, for every SIMD variant the CPU has and for 1 and
 * 2 threads.
 *
 * The replay below must round like the kernels, so this file, like them, is
 * compiled without FMA contraction (the pragma; gcc contracts a*b+c across
 * statements by default in gnu11 mode). */
#pragma GCC optimize("fp-contract=off")
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/quant8.h"
#include "ops/ops.h"
#include "jsonutil.h"
#include "optim/quantmap.h"
#include "testutil.h"

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	cr_assert(p);
	return p;
}

/* The variants this CPU can run (the test reports the ones it skips). */
static int simd_list(enum q8_simd out[Q8_NSIMD])
{
	/* Criterion 2.4 exits non-zero once anything is logged as a warning, so
	 * the skip is reported as info, once per test. */
	static int said;
	int n = 0;
	for (int s = Q8_SCALAR; s < Q8_NSIMD; s++)
		if (q8_simd_supported((enum q8_simd)s))
			out[n++] = (enum q8_simd)s;
		else if (!said++)
			cr_log_info("SIMD variant %s not supported by this CPU: skipped",
				    q8_simd_name((enum q8_simd)s));
	return n;
}

/* ---- maps ----------------------------------------------------------------------- */

/* Entry j of decade i (0..6) from the construction rule, written differently
 * from quantmap.c: the mean of linspace points j and j+1 in closed form. */
static int32_t bits_of(float x)
{
	int32_t b;
	memcpy(&b, &x, sizeof b);
	return b;
}

static double decade_entry(int i, int j, int is_signed)
{
	int k = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
	return pow(10.0, i - 6) * (0.1 + 0.9 * (2.0 * j + 1.0) / (2.0 * (k - 1)));
}

/* strata's maps against bitsandbytes' own (tests/data/bnb_maps.json, written
 * by scripts/bnb_maps.py --write from create_dynamic_map): the same order,
 * every entry within 2 ulp, and exactly the 72 signed and 100 unsigned
 * entries the README says differ (bitsandbytes rounds at each fp32 step,
 * strata once). Nearest-entry codes of values spread over every decade
 * agree but for values within a few ulp of a moved midpoint. */
Test(quant, maps_match_bitsandbytes)
{
	cJSON *root = tu_read_json("tests/data/bnb_maps.json");
	const char *names[2] = {"unsigned", "signed"};
	const int want_diff[2] = {100, 72};
	for (int is_signed = 0; is_signed < 2; is_signed++) {
		const cJSON *arr = cJSON_GetObjectItem(root, names[is_signed]);
		cr_assert_eq(cJSON_GetArraySize(arr), 256, "%s: bitsandbytes' map size", names[is_signed]);
		float ours[256], theirs[256];
		quantmap_dynamic(ours, is_signed);
		int differ = 0, worst = 0;
		for (int k = 0; k < 256; k++) {
			theirs[k] = (float)strtod(cJSON_GetArrayItem(arr, k)->valuestring, NULL);
			const int ulps = abs(bits_of(ours[k]) - bits_of(theirs[k]));
			differ += ulps != 0;
			worst = ulps > worst ? ulps : worst;
			if (k > 0)
				cr_expect(theirs[k - 1] < theirs[k], "%s: bitsandbytes' map unsorted at %d",
					  names[is_signed], k);
		}
		cr_expect_leq(worst, 2, "%s: an entry %d ulp from bitsandbytes'", names[is_signed], worst);
		cr_expect_eq(differ, want_diff[is_signed], "%s: %d entries differ", names[is_signed],
			     differ);
		/* |x| = 10^e for e uniform in [-7.5, 0]: every decade of the map */
		uint64_t st = 0x9e3779b97f4a7c15ull + (uint64_t)is_signed;
		long codes_differ = 0;
		const long n = 1000000;
		for (long i = 0; i < n; i++) {
			st = st * 6364136223846793005ull + 1442695040888963407ull;
			const double u = (double)(st >> 11) / 9007199254740992.0;
			float x = (float)pow(10.0, -7.5 * u);
			if (is_signed && (st >> 7 & 1))
				x = -x;
			codes_differ += quant_nearest(ours, x) != quant_nearest(theirs, x);
		}
		cr_expect_leq(codes_differ, n / 100000, "%s: %ld of %ld codes differ from bitsandbytes'",
			      names[is_signed], codes_differ, n);
		cr_log_info("%s map: %d entries differ (at most %d ulp), %ld of %ld codes", names[is_signed],
			    differ, worst, codes_differ, n);
	}
	cJSON_Delete(root);
}

Test(quant, maps_match_definition)
{
	float s[256], u[256];
	quantmap_dynamic(s, 1);
	quantmap_dynamic(u, 0);
	for (int k = 0; k < 255; k++) {
		cr_expect(s[k] < s[k + 1], "signed map not increasing at %d", k);
		cr_expect(u[k] < u[k + 1], "unsigned map not increasing at %d", k);
	}
	cr_expect(s[0] > -1.0f && s[127] == 0.0f && s[255] == 1.0f,
		  "signed ends: %g %g %g", s[0], s[127], s[255]);
	cr_expect(s[0] == -0.99296875f && s[254] == 0.99296875f, "signed extremes %.9g %.9g", s[0],
		  s[254]);
	cr_expect(u[0] == 0.0f && u[255] == 1.0f && u[254] == 0.996484375f, "unsigned ends");
	cr_expect(s[128] == 5.5e-7f && u[1] == 3.25e-7f && u[2] == 7.75e-7f, "smallest entries");
	/* negatives mirror the positives (all but 1.0) */
	for (int j = 0; j < 127; j++)
		cr_expect(s[126 - j] == -s[128 + j], "signed symmetry at %d", j);
	/* every positive entry: decade i starts after the 2^i - 1 (signed) or
	 * 2^(i+1) - 2 (unsigned) entries of the lower decades. The closed form
	 * here and quantmap.c's linspace differ in the last double bits at most,
	 * which measured does not move any fp32 rounding: exact equality. */
	int worst_s = 0, worst_u = 0;
	for (int i = 0; i < 7; i++)
		for (int j = 0; j < (1 << i); j++) {
			float ref = (float)decade_entry(i, j, 1);
			int ulps = abs(bits_of(s[128 + (1 << i) - 1 + j]) - bits_of(ref));
			worst_s = ulps > worst_s ? ulps : worst_s;
		}
	for (int i = 0; i < 7; i++)
		for (int j = 0; j < (2 << i); j++) {
			float ref = (float)decade_entry(i, j, 0);
			int ulps = abs(bits_of(u[1 + (2 << i) - 2 + j]) - bits_of(ref));
			worst_u = ulps > worst_u ? ulps : worst_u;
		}
	cr_expect(worst_s == 0 && worst_u == 0, "map entries off by %d / %d ulp", worst_s, worst_u);
	cr_log_info("maps vs closed form: max %d (signed), %d (unsigned) ulp", worst_s, worst_u);
}

/* ---- nearest entry ---------------------------------------------------------------- */

/* Brute force: smallest |x - map[k]| (in double; exact for the neighbours
 * that can tie), first (lowest) k on ties; NaN -> the index of 0; +-inf ->
 * the last or first entry (every distance is inf; the limit of large x). */
static int brute_nearest(const float map[256], float x)
{
	if (isnan(x))
		x = 0.0f;
	if (isinf(x))
		return x > 0 ? 255 : 0;
	int best = 0;
	double bd = INFINITY;
	for (int k = 0; k < 256; k++) {
		double d = fabs((double)x - (double)map[k]);
		if (d < bd)
			bd = d, best = k;
	}
	return best;
}

/* 1e6 test points: uniform, log-uniform magnitudes, map entries, exact and
 * near midpoints, signed zeros, ends, NaN. Counts the exact ties made. */
static float *nearest_points(const float map[256], size_t n, uint64_t *seed, int *ties)
{
	float *x = xmalloc(n * sizeof *x);
	*ties = 0;
	/* beyond [-1, 1], inf and subnormals: the encoders' clamped ranges and
	 * their scalar fix-up (avx512vbmi) */
	const float fixed[] = { 0.0f,	  -0.0f,    1.0f,     -1.0f,	NAN,	  -NAN,	    1e-30f,
				-1e-30f,  1.5f,	    -1.5f,    2.0f,	-2.5f,	  1e6f,     -1e6f,
				INFINITY, -INFINITY, 1e-40f,  -1e-40f,	0x1p-24f, -0x1p-23f, 0x1.fffffep-24f,
				/* just past 2: the buckets after the table's last one */
				0x1.01p+1f, -0x1.02p+1f, 0x1.1p+1f, -0x1.fffffep+1f };
	for (size_t i = 0; i < n; i++) {
		int kind = (int)(tu_next(seed) % 6), k = (int)(tu_next(seed) % 255);
		double sgn = tu_next(seed) & 1 ? -1.0 : 1.0;
		double mid = ((double)map[k] + (double)map[k + 1]) * 0.5;
		switch (kind) {
		case 0:
			x[i] = (float)(2.0 * tu_uniform(seed) - 1.0);
			break;
		case 1:
			x[i] = (float)(sgn * pow(10.0, -9.0 * tu_uniform(seed)));
			break;
		case 2:
			x[i] = map[tu_next(seed) % 256];
			break;
		case 3:
			x[i] = (float)mid;
			*ties += (double)x[i] == mid;
			break;
		case 4:
			x[i] = nextafterf((float)mid, sgn > 0 ? INFINITY : -INFINITY);
			break;
		default:
			x[i] = fixed[tu_next(seed) % (sizeof fixed / sizeof fixed[0])];
		}
	}
	return x;
}

static void check_nearest(const float map[256], const char *name, uint64_t seed)
{
	const size_t n = 1000003; /* not a multiple of 64: the vector loops' tails */
	int ties;
	float *x = nearest_points(map, n, &seed, &ties);
	uint8_t *want = xmalloc(n), *got = xmalloc(n);
	size_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		want[i] = (uint8_t)brute_nearest(map, x[i]);
		uint8_t q = quant_nearest(map, x[i]);
		if (q != want[i] && bad++ < 5)
			cr_expect(0, "%s: quant_nearest(%.9g) = %d, nearest is %d", name, x[i], q,
				  want[i]);
	}
	cr_expect(bad == 0, "%s: quant_nearest wrong on %zu of %zu points", name, bad, n);
	cr_expect(ties > 10000, "%s: only %d exact midpoints tested", name, ties);
	/* the kernels' table encoder, scale 1 (x * 1 == x), every variant */
	struct q8_lut *lut = xmalloc(sizeof *lut);
	q8_lut_build(lut, map);
	enum q8_simd sv[Q8_NSIMD];
	int ns = simd_list(sv);
	for (int v = 0; v < ns; v++) {
		memset(got, 0xee, n);
		q8_kernels_get(sv[v])->encode(got, x, n, 1.0f, lut);
		size_t diff = 0, first = 0;
		for (size_t i = 0; i < n; i++)
			if (got[i] != want[i] && !diff++)
				first = i;
		cr_expect(diff == 0, "%s: %s encoder wrong on %zu points, first x=%.9g: %d vs %d",
			  name, q8_simd_name(sv[v]), diff, x[first], got[first], want[first]);
	}
	cr_log_info("%s: 1e6 points (%d exact midpoints), table with %d mantissa bits, %d extra "
		    "compares; register table %s (%d keys)",
		    name, ties, 23 - lut->shift, lut->extra, lut->rok ? "used" : "too small",
		    lut->rkeys);
	free(lut), free(x), free(want), free(got);
}

Test(quant, nearest_is_brute_force_nearest)
{
	float s[256], u[256], c[256];
	quantmap_dynamic(s, 1);
	quantmap_dynamic(u, 0);
	check_nearest(s, "signed", 0x51);
	check_nearest(u, "unsigned", 0x52);
	/* the avx512vbmi encoder keeps both dynamic maps in registers */
	struct q8_lut *ls = xmalloc(sizeof *ls), *lu = xmalloc(sizeof *lu);
	q8_lut_build(ls, s);
	q8_lut_build(lu, u);
	cr_expect(ls->rok && lu->rok, "dynamic maps should fit the register table (%d, %d keys)",
		  ls->rkeys, lu->rkeys);
	free(ls), free(lu);
	/* A map the one-compare table cannot serve (entries 1e-3 apart around
	 * 0.5): exercises the extra-compare path of the encoders. */
	for (int k = 0; k < 256; k++)
		c[k] = k < 64	 ? -1.0f + (float)k / 64.0f
		       : k < 192 ? 0.5f + (float)(k - 128) * 1e-3f
				 : 0.57f + (float)(k - 191) * (0.43f / 64.0f);
	struct q8_lut *lut = xmalloc(sizeof *lut);
	q8_lut_build(lut, c);
	cr_expect(lut->extra > 0, "clustered map should need extra compares");
	cr_expect(!lut->rok, "clustered map should not fit the register table");
	free(lut);
	check_nearest(c, "clustered", 0x53);
	/* A midpoint (5e-8) below 2^-23, in the bucket every smaller magnitude
	 * is clamped into: the table's edge bucket must still hold it. */
	for (int k = 0; k < 256; k++)
		c[k] = k < 127 ? -1.0f + (float)k / 127.0f : k == 127 ? 0.0f : k == 128 ? 1e-7f
		       : (float)(k - 128) / 127.0f;
	check_nearest(c, "tiny midpoint", 0x54);
}

/* The per-thread table cache: keyed by contents (a map changed in place gets
 * a new table), and a lookup never evicts the table used just before it (the
 * fused AdamW step holds two). */
static int lut_is(const struct q8_lut *t, const float map[256])
{
	struct q8_lut *want = xmalloc(sizeof *want);
	q8_lut_build(want, map);
	int same = !memcmp(t->map, map, sizeof t->map) && !memcmp(t->thr, want->thr, sizeof t->thr) &&
		   t->nb == want->nb && t->packed == want->packed &&
		   !memcmp(t->entry, want->entry, 2 * (size_t)t->nb * sizeof t->entry[0]) &&
		   !memcmp(t->rcode, want->rcode, sizeof t->rcode) && t->rok == want->rok;
	free(want);
	return same;
}

Test(quant, lut_cache_follows_maps)
{
	float a[256], b[256], c[256];
	quantmap_dynamic(a, 1);
	quantmap_dynamic(b, 0);
	for (int k = 0; k < 256; k++)
		c[k] = -1.0f + (float)k / 127.5f;
	const struct q8_lut *ta = q8_lut_get(a), *tb = q8_lut_get(b);
	cr_expect(ta != tb && lut_is(ta, a) && lut_is(tb, b));
	cr_expect(q8_lut_get(a) == ta, "a cached map is rebuilt");
	const struct q8_lut *tc = q8_lut_get(c); /* evicts b, the least recently used */
	cr_expect(tc == tb && lut_is(ta, a) && lut_is(tc, c), "the eviction took the wrong table");
	c[7] = c[6] + 1e-3f; /* changed in place: same pointer, a new table (in a's slot) */
	const struct q8_lut *tc2 = q8_lut_get(c);
	cr_expect(lut_is(tc2, c), "a map changed in place kept its old table");
	cr_expect(tc2 == ta && memcmp(tc->map, c, sizeof tc->map) != 0,
		  "the eviction took the wrong table");
	c[200] = c[200] + 1e-3f; /* the key covers the whole map, not its first half */
	cr_expect(lut_is(q8_lut_get(c), c), "a map changed at entry 200 kept its old table");
}

/* Each variant is the code it is named for (the tests' loops over variants
 * would otherwise test one twice), and the run-time choice is the best the
 * CPU has, or the one STRATA_SIMD names where the CPU has it. */
Test(quant, variants_are_what_they_say)
{
	enum q8_simd sv[Q8_NSIMD];
	const int ns = simd_list(sv);
	for (int v = 0; v < ns; v++)
		cr_expect(sv[v] == Q8_TUNED || q8_kernels_get(sv[v])->simd == sv[v],
			  "%s runs the %s kernels", q8_simd_name(sv[v]),
			  q8_simd_name(q8_kernels_get(sv[v])->simd));
	unsetenv("STRATA_SIMD");
	cr_expect(q8_simd_pick() == sv[ns - 1], "default %s, best supported %s",
		  q8_simd_name(q8_simd_pick()), q8_simd_name(sv[ns - 1]));
	cr_expect(q8_simd_supported(Q8_TUNED) == q8_simd_supported(Q8_AVX512VBMI),
		  "tuned exactly where avx512vbmi is");
	setenv("STRATA_SIMD", "scalar", 1);
	cr_expect(q8_simd_pick() == Q8_SCALAR);
	setenv("STRATA_SIMD", "no-such-variant", 1);
	cr_expect(q8_simd_pick() == sv[ns - 1], "an unknown STRATA_SIMD falls back to the best");
	unsetenv("STRATA_SIMD");
}

/* Every length from 1 to 200 through every variant's decoder and encoder:
 * the 64-value loops of the VBMI kernels and the 8/16-value ones of the
 * others leave every possible remainder, a single value included. */
Test(quant, every_short_length_every_variant)
{
	float s[256];
	quantmap_dynamic(s, 1);
	struct q8_lut *t = xmalloc(sizeof *t);
	q8_lut_build(t, s);
	enum q8_simd sv[Q8_NSIMD];
	const int ns = simd_list(sv);
	uint64_t seed = 0x5e;
	enum { MAXN = 200 };
	uint8_t codes[MAXN], got[MAXN];
	float x[MAXN], y[MAXN];
	for (size_t n = 1; n <= MAXN; n++) {
		for (size_t i = 0; i < n; i++)
			codes[i] = (uint8_t)tu_next(&seed), x[i] = (float)(2.0 * tu_uniform(&seed) - 1.0);
		for (int v = 0; v < ns; v++) {
			const struct q8_kernels *q = q8_kernels_get(sv[v]);
			memset(y, 0x7f, sizeof y);
			q->decode(y, codes, n, 0.75f, t);
			for (size_t i = 0; i < n; i++)
				cr_assert(y[i] == s[codes[i]] * 0.75f, "%s decode n=%zu: [%zu] = %g",
					  q8_simd_name(sv[v]), n, i, y[i]);
			memset(got, 0xee, sizeof got);
			q->encode(got, x, n, ops_q8_scale(0.9f), t);
			for (size_t i = 0; i < n; i++)
				cr_assert(got[i] == quant_nearest(s, x[i] * (1.0f / 0.9f)),
					  "%s encode n=%zu: [%zu] = %d", q8_simd_name(sv[v]), n, i, got[i]);
			cr_assert(n == MAXN || (got[n] == 0xee && bits_of(y[n]) == 0x7f7f7f7f),
				  "%s n=%zu: wrote past the end", q8_simd_name(sv[v]), n);
		}
	}
	free(t);
}

/* ---- block-wise error ------------------------------------------------------------- */

enum dist { D_NORMAL, D_STUDENT2, D_TINY };
static const char *dist_name[] = { "normal", "student-t(2)", "tiny 1e-30..1e-8" };

/* Fresh data of one distribution; block 1 is all zeros and every 17th element
 * is 0, so zero blocks and zero elements are always present. */
static void fill(float *x, size_t n, int block, enum dist d, uint64_t *seed)
{
	for (size_t i = 0; i < n; i++) {
		double z = tu_normal(seed);
		if (d == D_STUDENT2) {
			double e = -log(1.0 - tu_uniform(seed)); /* chi2(2) / 2 */
			z = z / sqrt(e > 1e-300 ? e : 1e-300);
		} else if (d == D_TINY) {
			z = (z < 0 ? -1.0 : 1.0) * pow(10.0, -30.0 + 22.0 * tu_uniform(seed));
		}
		x[i] = (float)z;
		if (i % 17 == 0 || i / (size_t)block == 1)
			x[i] = 0.0f;
	}
}

/* Worst error of one fp32 value x = map[c] * absmax relative to its block's
 * absmax: half the widest gap between neighbouring entries (the nearest
 * entry is at most that far), or the distance from -1 to map[0] (no -1.0 in
 * the signed map), plus 2^-22 for the roundings of x * (1 / absmax) (the
 * reciprocal's and the product's, 2^-23 of |x| together, which may pick the
 * other neighbour near a midpoint) and of map[c] * absmax (2^-24). */
static double err_bound(const float map[256])
{
	double b = map[0] < 0 ? 1.0 + (double)map[0] : 0.0;
	for (int k = 0; k < 255; k++)
		b = fmax(b, ((double)map[k + 1] - map[k]) / 2);
	return b + 0x1p-22;
}

/* Mean error relative to the block absmax, normal data, signed map: measured
 * 0.0029 (block 64), 0.0028 (256), 0.0027 (2048). Bound: a quarter of the
 * top decade's step 0.9/64: values in [0.1, 1] x absmax round to a grid of
 * that step, so their error averages step/4 = 0.0035 when unbiased, and the
 * values below 0.1 x absmax sit on finer grids. A biased rounding rule (e.g.
 * always down) would average step/2. */
#define NORMAL_MEAN_BOUND (0.9 / 64 / 4)

static void check_blockwise(const float map[256], const char *mname, enum dist d, int block,
			    size_t n, uint64_t seed)
{
	float *x = xmalloc(n * sizeof *x), *y = xmalloc(n * sizeof *y);
	size_t nb = (n + (size_t)block - 1) / (size_t)block;
	float *am = xmalloc(nb * sizeof *am);
	uint8_t *c = xmalloc(n);
	fill(x, n, block, d, &seed);
	if (map[0] == 0.0f) /* unsigned map: magnitudes */
		for (size_t i = 0; i < n; i++)
			x[i] = fabsf(x[i]);
	quant_blockwise(c, am, x, n, block, map);
	dequant_blockwise(y, c, am, n, block, map);
	const double bound = err_bound(map);
	double worst = 0, sum = 0;
	size_t at = 0, zeros_bad = 0, nonzero = 0;
	for (size_t i = 0; i < n; i++) {
		double a = am[i / (size_t)block];
		cr_assert(a == a && a >= 0);
		if (x[i] == 0.0f) {
			zeros_bad += y[i] != 0.0f;
			continue;
		}
		double e = fabs((double)y[i] - (double)x[i]) / a;
		sum += e, nonzero++;
		if (!(e <= worst))
			worst = isnan(e) ? INFINITY : e, at = i;
	}
	cr_expect(am[1] == 0.0f, "all-zero block: absmax %g", am[1]);
	cr_expect(zeros_bad == 0, "%zu zeros did not dequantize to 0", zeros_bad);
	cr_expect(worst <= bound, "%s %s block %d: error %.4g of absmax > bound %.4g at [%zu]",
		  mname, dist_name[d], block, worst, bound, at);
	double mean = sum / (double)nonzero;
	if (d == D_NORMAL && map[0] < 0)
		cr_expect(mean <= NORMAL_MEAN_BOUND, "%s normal block %d: mean error %.4g > %.4g",
			  mname, block, mean, NORMAL_MEAN_BOUND);
	cr_log_info("%-8s %-17s block %4d: max %.5f, mean %.5f of absmax (bound %.5f)", mname,
		    dist_name[d], block, worst, mean, bound);
	/* every encoder variant gives the reference's codes */
	struct q8_lut *lut = xmalloc(sizeof *lut);
	q8_lut_build(lut, map);
	enum q8_simd sv[Q8_NSIMD];
	int ns = simd_list(sv);
	uint8_t *c2 = xmalloc(n);
	for (int v = 0; v < ns; v++) {
		const struct q8_kernels *q = q8_kernels_get(sv[v]);
		int same = 1;
		for (size_t b = 0; b < nb; b++) {
			size_t b0 = b * (size_t)block, len = n - b0 < (size_t)block ? n - b0 : (size_t)block;
			float a = len <= Q8_CHUNK ? q->absmax(x + b0, len) : am[b];
			same &= a == am[b];
			q->encode(c2 + b0, x + b0, len, ops_q8_scale(am[b]), lut);
		}
		cr_expect(same && !memcmp(c2, c, n), "%s encoder differs from quant_blockwise",
			  q8_simd_name(sv[v]));
	}
	free(lut), free(c2), free(x), free(y), free(am), free(c);
}

/* Every variant's absmax is the largest |x| of the values that are not NaN
 * (quant8.h): a NaN (either sign) at the start, in a vector body, in a
 * scalar tail or everywhere never becomes the block's scale. The fused step
 * relies on it through moments() and q8_absmax1. */
Test(quant, absmax_ignores_nan)
{
	enum q8_simd sv[Q8_NSIMD];
	const int ns = simd_list(sv);
	const size_t lens[] = {1, 5, 16, 17, 64, 100, 256, 2048};
	float x[2048];
	for (int v = 0; v < ns; v++) {
		const struct q8_kernels *q = q8_kernels_get(sv[v]);
		for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
			const size_t n = lens[li];
			const size_t at[] = {0, n / 2, n - 1, n > 20 ? 20 : n - 1};
			for (size_t k = 0; k < sizeof at / sizeof at[0]; k++)
				for (int sign = 0; sign < 2; sign++) {
					float want = 0.0f;
					for (size_t i = 0; i < n; i++)
						x[i] = (float)((i * 37) % 101) * (i % 2 ? -0.25f : 0.5f);
					/* the largest value in the NaN's lane, one and two AVX2
					 * vectors (one AVX-512 vector) before it: a max that
					 * let the NaN through would lose it */
					if (at[k] >= 8)
						x[at[k] - 8] = -999.0f;
					if (at[k] >= 16)
						x[at[k] - 16] = 1000.0f;
					for (size_t i = 0; i < n; i++)
						want = i != at[k] && fabsf(x[i]) > want ? fabsf(x[i]) : want;
					x[at[k]] = sign ? -NAN : NAN;
					const float got = q->absmax(x, n);
					cr_assert(got == want, "%s n=%zu NaN at %zu: absmax %g, want %g",
						  q8_simd_name(sv[v]), n, at[k], got, want);
				}
			for (size_t i = 0; i < n; i++)
				x[i] = i % 2 ? NAN : -NAN;
			cr_assert(q->absmax(x, n) == 0.0f, "%s n=%zu all NaN: absmax %g",
				  q8_simd_name(sv[v]), n, q->absmax(x, n));
		}
	}
	/* the fused AdamW step takes the moments' absmax in its own pass: a NaN
	 * gradient (one lane, after the block's largest value in that lane)
	 * leaves both scales finite and the same in every variant */
	float s[256], u[256], g[512];
	quantmap_dynamic(s, 1);
	quantmap_dynamic(u, 0);
	float ref_ma[2] = {0}, ref_va[2] = {0};
	for (int v = 0; v < ns; v++) {
		float p[512] = {0}, ma[2] = {0}, va[2] = {0};
		uint8_t mc[512] = {0}, vc[512] = {0};
		for (int i = 0; i < 512; i++)
			g[i] = 0.001f * (float)(i % 13);
		g[100] = 5.0f, g[116] = NAN, g[300] = -NAN;
		struct st_adamw8_args a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
					   .grad_scale = 1.0f, .bc1 = 0.1f, .bc2 = 0.001f, .block = 256,
					   .map_m = s, .map_v = u};
		cpu_adamw8_step_simd(sv[v], p, mc, vc, ma, va, g, 512, &a);
		for (int b = 0; b < 2; b++)
			cr_assert(isfinite(ma[b]) && isfinite(va[b]) && ma[b] > 0,
				  "%s block %d: absmax m %g, v %g", q8_simd_name(sv[v]), b, ma[b], va[b]);
		if (v == 0)
			memcpy(ref_ma, ma, sizeof ma), memcpy(ref_va, va, sizeof va);
		cr_assert(!memcmp(ma, ref_ma, sizeof ma) && !memcmp(va, ref_va, sizeof va),
			  "%s: the absmax differs from the scalar variant's", q8_simd_name(sv[v]));
	}
	/* the reference quantizer (the fused steps' replay here, and GaLore's
	 * moment rotation) too: the largest value before a NaN, and a NaN last
	 * in its block, and the NaN gets the code of 0 */
	float x2[512], am[2];
	uint8_t c2[512];
	for (int i = 0; i < 512; i++)
		x2[i] = 0.01f * (float)((i * 37) % 101) - 0.5f;
	x2[5] = 7.0f, x2[10] = NAN, x2[300] = -9.0f, x2[511] = -NAN;
	quant_blockwise(c2, am, x2, 512, 256, s);
	cr_expect(am[0] == 7.0f && am[1] == 9.0f, "quant_blockwise absmax %g %g, want 7 9", am[0],
		  am[1]);
	cr_expect(c2[10] == quant_nearest(s, 0.0f) && c2[511] == quant_nearest(s, 0.0f),
		  "NaN codes %d %d", c2[10], c2[511]);
}

Test(quant, blockwise_error_bounds)
{
	float s[256], u[256];
	quantmap_dynamic(s, 1);
	quantmap_dynamic(u, 0);
	const int blocks[] = { 64, 100, 256, 2048 }; /* 100: vector tails in every block */
	uint64_t seed = 0x60;
	for (int b = 0; b < 4; b++)
		for (int d = D_NORMAL; d <= D_TINY; d++) {
			size_t n = (size_t)blocks[b] * 300 + (size_t)blocks[b] / 3; /* partial last */
			check_blockwise(s, "signed", (enum dist)d, blocks[b], n, seed++);
			check_blockwise(u, "unsigned", (enum dist)d, blocks[b], n, seed++);
		}
}

/* ---- fused kernels vs the unfused replay ------------------------------------------ */

struct adam_state {
	float *p;
	uint8_t *mc, *vc;
	float *ma, *va;
};

static struct adam_state adam_alloc(size_t n, int block, const float *p0)
{
	size_t nb = (n + (size_t)block - 1) / (size_t)block;
	struct adam_state s = { xmalloc(n * 4), xmalloc(n), xmalloc(n), xmalloc(nb * 4),
				xmalloc(nb * 4) };
	memcpy(s.p, p0, n * 4);
	memset(s.mc, 0, n), memset(s.vc, 0, n); /* all-zero bytes: m = v = 0 */
	memset(s.ma, 0, nb * 4), memset(s.va, 0, nb * 4);
	return s;
}

static void adam_free(struct adam_state *s)
{
	free(s->p), free(s->mc), free(s->vc), free(s->ma), free(s->va);
}

static int adam_same(const struct adam_state *a, const struct adam_state *b, size_t n, int block)
{
	size_t nb = (n + (size_t)block - 1) / (size_t)block;
	return !memcmp(a->p, b->p, n * 4) && !memcmp(a->mc, b->mc, n) && !memcmp(a->vc, b->vc, n) &&
	       !memcmp(a->ma, b->ma, nb * 4) && !memcmp(a->va, b->va, nb * 4);
}

/* ops.h's adamw8 order, unfused, on the scalar reference helpers */
static void adam_replay(struct adam_state *s, const float *g, size_t n,
			const struct st_adamw8_args *a)
{
	float *m = xmalloc(n * 4), *v = xmalloc(n * 4);
	dequant_blockwise(m, s->mc, s->ma, n, a->block, a->map_m);
	dequant_blockwise(v, s->vc, s->va, n, a->block, a->map_v);
	const float c2 = sqrtf(a->bc2), step = a->lr * c2 / a->bc1, eps_hat = a->eps * c2;
	const float decay = 1.0f - a->lr * a->weight_decay;
	for (size_t i = 0; i < n; i++) {
		float gi = g[i] * a->grad_scale;
		m[i] = a->beta1 * m[i] + (1.0f - a->beta1) * gi;
		v[i] = a->beta2 * v[i] + (1.0f - a->beta2) * (gi * gi);
		float p = s->p[i] - step * (m[i] / (sqrtf(v[i]) + eps_hat));
		s->p[i] = p * decay;
	}
	quant_blockwise(s->mc, s->ma, m, n, a->block, a->map_m);
	quant_blockwise(s->vc, s->va, v, n, a->block, a->map_v);
	free(m), free(v);
}

/* tiny: tu_tiny_blocks's blocks, whose moments' absmax is at most 2^-128 */
static void check_adam8_g(int block, size_t n, uint64_t seed, int tiny)
{
	float s[256], u[256];
	quantmap_dynamic(s, 1);
	quantmap_dynamic(u, 0);
	float *p0 = xmalloc(n * 4), *g = xmalloc(n * 4);
	tu_fill_normal(p0, n, 1.0, &seed);
	enum q8_simd sv[Q8_NSIMD];
	int ns = simd_list(sv);
	/* ref, then per variant x {1, 2, 3 threads}, then ops table (STRATA_SIMD) */
	struct adam_state ref = adam_alloc(n, block, p0), st[3 * Q8_NSIMD + 1];
	int nst = 3 * ns + 1;
	for (int k = 0; k < nst; k++)
		st[k] = adam_alloc(n, block, p0);
	int saved = omp_get_max_threads();
	for (int t = 1; t <= 5; t++) {
		tu_block_grads(g, n, block, &seed);
		if (tiny)
			tu_tiny_blocks(g, n, block, &seed);
		struct st_adamw8_args a = {
			.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f,
			.grad_scale = 0.7f, .bc1 = (float)(1.0 - pow(0.9, t)),
			.bc2 = (float)(1.0 - pow(0.999, t)), .block = block, .map_m = s, .map_v = u };
		adam_replay(&ref, g, n, &a);
		for (int v = 0; v < ns; v++)
			for (int th = 1; th <= 3; th++) {
				struct adam_state *x = &st[3 * v + th - 1];
				omp_set_num_threads(th);
				cpu_adamw8_step_simd(sv[v], x->p, x->mc, x->vc, x->ma, x->va, g, n, &a);
				cr_expect(adam_same(x, &ref, n, block),
					  "adamw8 %s, %d thread(s), block %d, n %zu: step %d differs "
					  "from the unfused reference",
					  q8_simd_name(sv[v]), th, block, n, t);
			}
		omp_set_num_threads(saved);
		struct adam_state *x = &st[nst - 1];
		setenv("STRATA_SIMD", "scalar", 1);
		ops_cpu()->adamw8_step(x->p, x->mc, x->vc, x->ma, x->va, g, n, &a);
		unsetenv("STRATA_SIMD");
		cr_expect(adam_same(x, &ref, n, block), "adamw8 via ops table: step %d differs", t);
	}
	/* the state moved: p changed and moments are not all zero */
	cr_expect(memcmp(ref.p, p0, n * 4) != 0 && ref.ma[0] > 0 && ref.va[0] > 0);
	if (tiny) /* the capped scale was reached */
		cr_expect(ref.va[1] > 0 && ref.va[1] <= 0x1p-128f && ref.ma[3] > 0 &&
				  ref.ma[3] <= 0x1p-128f,
			  "tiny blocks: v absmax %g, m absmax %g", (double)ref.va[1],
			  (double)ref.ma[3]);
	for (int k = 0; k < nst; k++)
		adam_free(&st[k]);
	adam_free(&ref);
	free(p0), free(g);
}

static void check_adam8(int block, size_t n, uint64_t seed)
{
	check_adam8_g(block, n, seed, 0);
}

Test(quant, adamw8_fused_equals_unfused)
{
	check_adam8(64, 64 * 37 + 5, 0x71);
	check_adam8(256, 40009, 0x72);     /* parallel path (n >= CPU_PAR_MIN) */
	check_adam8(2048, 2048 * 9 + 1000, 0x73);
	check_adam8(8192, 8192 * 4 + 777, 0x74); /* blocks > Q8_CHUNK: two passes */
	/* blocks that are not a multiple of 64: every block has a vector tail */
	check_adam8(100, 100 * 61 + 37, 0x75);
	check_adam8(1000, 1000 * 7 + 999, 0x76);
	check_adam8(256, 256 * 20 + 65, 0x77); /* a last block of 64 + 1 */
	/* whole blocks only, pipelined (adam8.c), none after them: split over
	 * 2 and 3 threads (n >= CPU_PAR_MIN), and two blocks on one thread */
	check_adam8(256, 256 * 80, 0x78);
	check_adam8(16, 16 * 2, 0x79);
	check_adam8(128, 128 * 3 + 16, 0x7a); /* three whole blocks, then 16 */
}

/* ops_q8_scale: the rounded reciprocal, 1 for an absmax of 0 (or NaN), and
 * FLT_MAX from 2^-128 down, where the reciprocal overflows. */
Test(quant, scale_edges)
{
	cr_expect(ops_q8_scale(0.0f) == 1.0f && ops_q8_scale(-0.0f) == 1.0f);
	cr_expect(ops_q8_scale(NAN) == 1.0f);
	cr_expect(ops_q8_scale(2.0f) == 0.5f && ops_q8_scale(3.0f) == 1.0f / 3.0f);
	cr_expect(ops_q8_scale(INFINITY) == 0.0f);
	cr_expect(ops_q8_scale(0x1p-128f) == FLT_MAX && ops_q8_scale(1e-45f) == FLT_MAX);
	const float above = nextafterf(0x1p-128f, 1.0f);
	cr_expect(ops_q8_scale(above) < FLT_MAX && ops_q8_scale(above) == 1.0f / above,
		  "just above 2^-128: %a", (double)ops_q8_scale(above));
	cr_expect(ops_q8_scale(FLT_MIN) == 1.0f / FLT_MIN);
}

/* Moments whose block absmax is at most 2^-128: 1 / absmax overflows and
 * ops_q8_scale gives FLT_MAX, in every variant and the replay alike
 * (pipelined, in parallel, and the per-block path). */
Test(quant, adamw8_tiny_moments_equal_unfused)
{
	check_adam8_g(256, 256 * 80 + 7, 0x7b, 1);
	check_adam8_g(64, 64 * 9, 0x7c, 1);
	check_adam8_g(1000, 1000 * 5 + 3, 0x7d, 1);
}

static void sgd_replay(float *p, uint8_t *mc, float *ma, const float *g, size_t n,
		       const struct st_sgd8_args *a)
{
	float *m = xmalloc(n * 4);
	if (!a->first_step)
		dequant_blockwise(m, mc, ma, n, a->block, a->map);
	for (size_t i = 0; i < n; i++) {
		float gi = g[i] * a->grad_scale + a->weight_decay * p[i];
		m[i] = a->first_step ? gi : a->momentum * m[i] + gi;
		p[i] = p[i] - a->lr * m[i];
	}
	quant_blockwise(mc, ma, m, n, a->block, a->map);
	free(m);
}

static void check_sgd8(int block, size_t n, uint64_t seed)
{
	float s[256];
	quantmap_dynamic(s, 1);
	size_t nb = (n + (size_t)block - 1) / (size_t)block;
	float *p0 = xmalloc(n * 4), *g = xmalloc(n * 4);
	tu_fill_normal(p0, n, 1.0, &seed);
	enum q8_simd sv[Q8_NSIMD];
	int ns = simd_list(sv);
	int nst = 2 * ns + 1;
	float *p[2 * Q8_NSIMD + 1], *ma[2 * Q8_NSIMD + 1];
	uint8_t *mc[2 * Q8_NSIMD + 1];
	for (int k = 0; k <= nst; k++) { /* k == nst: the reference */
		p[k] = xmalloc(n * 4), ma[k] = xmalloc(nb * 4), mc[k] = xmalloc(n);
		memcpy(p[k], p0, n * 4);
		for (size_t i = 0; i < n; i++) /* garbage: the first step must not read it */
			mc[k][i] = (uint8_t)tu_next(&seed);
		for (size_t b = 0; b < nb; b++)
			ma[k][b] = NAN;
	}
	int saved = omp_get_max_threads();
	for (int t = 1; t <= 5; t++) {
		tu_block_grads(g, n, block, &seed);
		struct st_sgd8_args a = { .lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f,
					  .grad_scale = 0.5f, .first_step = t == 1, .block = block,
					  .map = s };
		sgd_replay(p[nst], mc[nst], ma[nst], g, n, &a);
		for (int k = 0; k < nst; k++) {
			if (k < nst - 1) {
				omp_set_num_threads(k % 2 + 1);
				cpu_sgd8_step_simd(sv[k / 2], p[k], mc[k], ma[k], g, n, &a);
			} else {
				omp_set_num_threads(saved);
				setenv("STRATA_SIMD", "scalar", 1);
				ops_cpu()->sgd8_step(p[k], mc[k], ma[k], g, n, &a);
				unsetenv("STRATA_SIMD");
			}
			cr_expect(!memcmp(p[k], p[nst], n * 4) && !memcmp(mc[k], mc[nst], n) &&
					  !memcmp(ma[k], ma[nst], nb * 4),
				  "sgd8 %s, %d thread(s), block %d, n %zu: step %d differs from the "
				  "unfused reference",
				  k < nst - 1 ? q8_simd_name(sv[k / 2]) : "ops table", k % 2 + 1, block,
				  n, t);
		}
		omp_set_num_threads(saved);
	}
	for (int k = 0; k <= nst; k++)
		free(p[k]), free(ma[k]), free(mc[k]);
	free(p0), free(g);
}

Test(quant, sgd8_fused_equals_unfused)
{
	check_sgd8(64, 64 * 37 + 5, 0x81);
	check_sgd8(256, 40009, 0x82);
	check_sgd8(2048, 2048 * 9 + 1000, 0x83);
	check_sgd8(8192, 8192 * 4 + 777, 0x84);
	check_sgd8(100, 100 * 61 + 37, 0x85);
	check_sgd8(1000, 1000 * 7 + 999, 0x86);
	check_sgd8(256, 256 * 20 + 65, 0x87);
}

/* Without state, sgd8_step is plain SGD, same bits as the fp32 kernel. */
Test(quant, sgd8_without_state_is_sgd)
{
	uint64_t seed = 0x91;
	const size_t n = 20011;
	float *p = xmalloc(n * 4), *q = xmalloc(n * 4), *g = xmalloc(n * 4);
	tu_fill_normal(p, n, 1, &seed);
	tu_fill_normal(g, n, 1, &seed);
	memcpy(q, p, n * 4);
	struct st_sgd8_args a = { .lr = 0.1f, .weight_decay = 0.01f, .grad_scale = 0.5f, .block = 256 };
	struct st_sgd_args b = { .lr = 0.1f, .weight_decay = 0.01f, .grad_scale = 0.5f };
	ops_cpu()->sgd8_step(p, NULL, NULL, g, n, &a);
	for (size_t i = 0; i < n; i++)
		q[i] = q[i] - b.lr * (g[i] * b.grad_scale + b.weight_decay * q[i]);
	cr_expect(!memcmp(p, q, n * 4), "stateless sgd8 differs");
	free(p), free(q), free(g);
}
