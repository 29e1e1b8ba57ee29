/* Internal to the CPU backend: the 8-bit block-wise (de)quantizer under the
 * fused 8-bit optimizer kernels (adam8.c, sgd8.c), in four instruction-set
 * variants and a tuned mix of two, chosen at run time.
 *
 * Every variant returns exactly what optim/quantmap.c's scalar reference
 * returns (quant_nearest's tie rule: nearest map entry, exact midpoint -> the
 * lower index, NaN -> the code of 0), and all do the same fp32 operations in
 * the same order, so the variants give bit-identical results;
 * tests/test_quant.c checks both claims.
 *
 * Quantizing by binary search costs 8 dependent compares per element. The
 * lookup table here replaces it with one table load indexed by the top bits
 * of the float (sign, exponent, `mbits` mantissa bits) plus, for the dynamic
 * maps, a single compare against the one midpoint that can fall inside that
 * bucket of floats (see q8_lut_build). */
#ifndef ST_OPS_CPU_QUANT8_H
#define ST_OPS_CPU_QUANT8_H

#include <stddef.h>
#include <stdint.h>

#include "ops/cpu/cpu_kernels.h"

/* Run-time instruction-set choice: the best the CPU supports, or the one named
 * by the environment variable STRATA_SIMD=scalar|avx2|avx512|avx512vbmi|tuned
 * (for testing the dispatch paths; a level the CPU lacks falls back to the
 * best it has). Read on every kernel call, so a test may change it between
 * calls. avx512vbmi is AVX-512 F + BW + VBMI (Ice Lake and later, Zen 4 and
 * later): byte permutes keep both tables in registers (quant8_vbmi.c). Where
 * a CPU has it, the best is `tuned`: the decoder and the encoder each taken
 * from avx512 or avx512vbmi, whichever ran faster in a 0.2 ms measurement on
 * first use (the permutes win on AMD Zen 5; on an Intel Xeon only the
 * decoder's did). */
enum q8_simd { Q8_SCALAR, Q8_AVX2, Q8_AVX512, Q8_AVX512VBMI, Q8_TUNED, Q8_NSIMD };
enum q8_simd q8_simd_pick(void);
int q8_simd_supported(enum q8_simd s);
const char *q8_simd_name(enum q8_simd s);
/* the name, and for `tuned` which pieces it took ("decode avx512vbmi, ...") */
const char *q8_simd_describe(enum q8_simd s);

/* Quantization blocks up to this many elements are updated in one pass through
 * a stack buffer (2 x 8 KiB per thread for Adam, in L1); larger blocks take
 * two passes, the first only to find the block's absmax (the update is
 * recomputed, with the same bits, in the second). */
#define Q8_CHUNK 2048

/* Buckets of floats: |x| below 2^-23 (Q8_TINY_BITS) is one bucket, then
 * 2^mbits buckets per binade up to 2.0, then one for |x| >= 2 (and inf, NaN);
 * the same again for negative x. 2^-23 sits below the dynamic maps' smallest
 * midpoints (1.6e-7 unsigned, 2.75e-7 signed), so no midpoint falls in the
 * first bucket. */
#define Q8_TINY_BITS 0x34000000u /* 2^-23 */
#define Q8_BINADES 24            /* 2^-23 .. 2^1 */
#define Q8_MBITS_MAX 7
#define Q8_NB_MAX (2 + (Q8_BINADES << Q8_MBITS_MAX)) /* buckets per sign */

struct q8_lut {
	int shift;     /* 23 - mbits */
	int nb;        /* buckets per sign: 2 + (Q8_BINADES << mbits) */
	int packed;    /* entry[] packs code and threshold bits: see below */
	int extra;     /* unpacked: compares needed beyond the first */
	int zero;      /* code of 0.0, also given to NaN */
	/* thr[k] = the largest float <= the exact midpoint of map[k], map[k+1];
	 * thr[255] = +inf. For float x, x > thr[k] iff x > that midpoint, so the
	 * code of x is the number of k with x > thr[k]. */
	float thr[256];
	/* Per bucket b (negative x at nb + b), c = the code of the bucket's
	 * smallest float; thr[c] is the first midpoint that x may exceed.
	 *   packed:   entry = c << 24 | (low mantissa bits of thr[c] when it
	 *             lies inside the bucket, complemented for negative x; all
	 *             ones when it does not); code = c + (x's low bits, same
	 *             convention, > those bits): one load and integer compares
	 *   unpacked: entry = c; code = c + (x > thr[c]), then `extra` times
	 *             code += x > thr[code] */
	uint32_t entry[2 * Q8_NB_MAX];
	float map[256]; /* the map itself, for the decoders */
	/* The register-resident form of the same table, for the avx512vbmi
	 * encoder (quant8_vbmi.c), valid when rok. Buckets are finer where the
	 * midpoints are denser: per sign s and binade e (clamped to
	 * Q8_R_EMIN..Q8_R_EMAX), 2^n buckets on the top n <= 7 mantissa bits,
	 * n the fewest that leave at most one midpoint per bucket. With a = the
	 * top 16 bits of |x| (exponent, 7 mantissa bits), clamped, and
	 * i = s << 5 | (e & 31):
	 *   key  = (uint16_t)(a - rsub[i]) >> rshift[i]     (< 512)
	 *   c0   = rcode[key], the code of the bucket's smallest x
	 *   code = c0 + (x > thr[c0])
	 * The dynamic maps need 468 (unsigned) and 384 (signed) keys. */
	int rok, rkeys; /* rkeys: keys in use */
	uint16_t rsub[64], rshift[64];
	uint8_t rcode[512];
	uint8_t thr_bytes[4][256]; /* byte j of thr[k] at [j][k] */
	uint8_t map_bytes[4][256]; /* byte j of map[k] at [j][k] */
};

/* The register table's binades, by exponent field: |x| below 2^-24 (field
 * 103) is clamped into the first bucket of binade 103, and |x| >= 2 into the
 * one bucket of 128; 26 exponents, distinct mod 32. */
#define Q8_R_EMIN 103
#define Q8_R_EMAX 128

/* Build the table for a sorted 256-entry map. */
void q8_lut_build(struct q8_lut *t, const float map[256]);

/* The table for `map` from a small per-thread cache (keyed by the map's
 * contents), built on a miss: building costs 11-13 us on the Zen 5 VM
 * (bench/q8_stages), as long as stepping 16K parameters, and the fused
 * steps run once per tensor with the
 * same two maps. Two slots, least recently used replaced: valid until this
 * thread has asked for two other maps since. */
const struct q8_lut *q8_lut_get(const float map[256]);

/* The ISA-specific pieces of the fused kernels. n is at most Q8_CHUNK. */
struct q8_kernels {
	enum q8_simd simd;
	/* x[i] = t->map[codes[i]] * absmax */
	void (*decode)(float *x, const uint8_t *codes, size_t n, float absmax,
		       const struct q8_lut *t);
	/* max |x[i]|, NaN ignored, 0 for n == 0 */
	float (*absmax)(const float *x, size_t n);
	/* codes[i] = the code of x[i] * scale (scale = ops_q8_scale(absmax), ops.h) */
	void (*encode)(uint8_t *codes, const float *x, size_t n, float scale,
		       const struct q8_lut *t);
};
const struct q8_kernels *q8_kernels_get(enum q8_simd s);
extern const struct q8_kernels q8_kernels_vbmi; /* quant8_vbmi.c */

/* Software prefetch for the fused steps: at the start of a block of at most
 * Q8_PF_MAX_BLOCK elements at i0, the lines the step reaches Q8_PF_AHEAD
 * elements later (p, g and the state's codes; vc NULL for one state, as 8-bit
 * SGD's). At 128M parameters 8-bit AdamW ran 18% below its in-cache rate,
 * its memory traffic stalling each block's start instead of flowing under
 * the compute. On the 2-core Xeon VM (2026-11-25,
 * bench/results/optim-20261125-xeon2-prefetch/) the prefetch made 8-bit
 * AdamW 7-10% faster at block 256 (10-12% at 128, 17-18% at 64) and 8-bit
 * SGD 23-24% (21-27%, 18-19%). Blocks above 256 take none: every way of
 * prefetching them tried there (the whole block, or its first 256 elements)
 * made 8-bit AdamW 2-13% slower. Only a hint: no result depends on it. */
enum { Q8_PF_AHEAD = 512, Q8_PF_MAX_BLOCK = 256 };

static inline void q8_prefetch_block(const float *p, const float *g, const uint8_t *mc,
				     const uint8_t *vc, size_t i0, size_t len, size_t n)
{
	size_t a = 0;
	const size_t b = len > Q8_PF_MAX_BLOCK ? 0 : cpu_prefetch_span(i0, len, n, Q8_PF_AHEAD, &a);
	for (size_t i = a; i < b; i += 16) { /* a 64-byte line of floats */
		cpu_prefetch_w(p + i);
		cpu_prefetch_r(g + i);
	}
	for (size_t i = a; i < b; i += 64) {
		cpu_prefetch_w(mc + i);
		if (vc)
			cpu_prefetch_w(vc + i);
	}
}

/* The fused steps with an explicit variant (ops.h's adamw8_step and
 * sgd8_step use q8_simd_pick()); for the tests. */
struct st_adamw8_args;
struct st_sgd8_args;
void cpu_adamw8_step_simd(enum q8_simd s, float *p, uint8_t *m_codes, uint8_t *v_codes,
			  float *m_absmax, float *v_absmax, const float *g, size_t n,
			  const struct st_adamw8_args *a);
void cpu_sgd8_step_simd(enum q8_simd s, float *p, uint8_t *mom_codes, float *mom_absmax,
			const float *g, size_t n, const struct st_sgd8_args *a);

void cpu_adamw8_step(float *p, uint8_t *m_codes, uint8_t *v_codes, float *m_absmax,
		     float *v_absmax, const float *g, size_t n, const struct st_adamw8_args *a);
void cpu_sgd8_step(float *p, uint8_t *mom_codes, float *mom_absmax, const float *g, size_t n,
		   const struct st_sgd8_args *a);

#endif
