/* 8-bit dynamic quantization maps and the scalar block-wise quantizer of the
 * 8-bit optimizers (Dettmers et al., arXiv 2110.02861; bitsandbytes).
 *
 * A map is a sorted table of 256 fp32 values in [-1, 1]; code c stands for
 * map[c] * absmax of its block. These scalar functions define the rounding:
 * the fused kernels (ops/cpu/adam8.c, sgd8.c, ops/cuda/adam8.cu) must return
 * exactly what quant_nearest returns, and tests/test_quant.c holds them to it.
 *
 * Tie rule, used by every backend: x goes to the entry nearest to it in exact
 * arithmetic; when x lies exactly halfway between two neighbouring entries it
 * goes to the LOWER INDEX (the smaller value). A NaN goes to the code of 0.0.
 * Equivalently, quant_nearest(map, x) = the number of k in 0..254 with
 * x > (map[k] + map[k+1]) / 2 (midpoints computed exactly), for non-NaN x. */
#ifndef ST_QUANTMAP_H
#define ST_QUANTMAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* bitsandbytes' create_dynamic_map(signed, max_exponent_bits=7, total_bits=8),
 * computed in double and rounded once to fp32. For i = 0..6 (one decade
 * each): k = 2^i + 1 (signed) or 2^(i+1) + 1 (unsigned) points of
 * linspace(0.1, 1, k), the k-1 midpoints of neighbours, times 10^(i-6); the
 * signed map adds their negatives; both add 0 and 1.0; sorted ascending.
 *   signed:   127 negatives (min -0.99296875), map[127] = 0, 128 positives
 *             up to map[255] = 1.0; no -1.0.
 *   unsigned: map[0] = 0, 255 positives up to map[255] = 1.0.
 * (bitsandbytes builds it in fp32 torch ops; an entry may differ from ours in
 * the last bit.) */
void quantmap_dynamic(float map[256], int is_signed);

/* Index of the map entry nearest to x, by binary search; ties and NaN as in
 * the file comment. x is a value already scaled by its block's 1 / absmax, so in
 * [-1, 1] (signed) or [0, 1] (unsigned), but any float gives the nearest. */
uint8_t quant_nearest(const float map[256], float x);

/* Block-wise quantization of x (n) in blocks of `block` elements, the last one
 * partial when block does not divide n: absmax[b] = max |x| over block b
 * (NaN ignored), codes[i] = quant_nearest(map, x[i] * s) with s =
 * ops_q8_scale(absmax[b]) (ops/ops.h: the rounded 1 / absmax; an all-zero
 * block keeps absmax 0 and the code of 0). absmax has ceil(n / block)
 * entries. */
void quant_blockwise(uint8_t *codes /* (n) */, float *absmax /* (ceil(n/block)) */,
		     const float *x /* (n) */, size_t n, int block, const float map[256]);
/* x[i] = map[codes[i]] * absmax[i / block] */
void dequant_blockwise(float *x /* (n) */, const uint8_t *codes /* (n) */,
		       const float *absmax /* (ceil(n/block)) */, size_t n, int block,
		       const float map[256]);

#ifdef __cplusplus
}
#endif

#endif
