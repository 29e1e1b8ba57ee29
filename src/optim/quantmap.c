/* Dynamic quantization maps and the scalar block-wise quantizer; see
 * quantmap.h for the definitions. These are the reference the fused kernels
 * are tested against, so they are written for clarity, not speed. */
#pragma GCC optimize("fp-contract=off") /* same roundings on every build */
#include "optim/quantmap.h"

#include <stdlib.h>

#include "ops/ops.h" /* ops_q8_scale */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

void quantmap_dynamic(float map[256], int is_signed)
{
	double v[256];
	int n = 0;
	for (int i = 0; i < 7; i++) {
		int k = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
		double scale = 1.0;
		for (int e = i; e < 6; e++) /* 10^(i-6) by exact divisions of 1 by 10^(6-i) */
			scale *= 10.0;
		scale = 1.0 / scale;
		/* torch.linspace(0.1, 1, k): start + j*step for the first half, end -
		 * (k-1-j)*step for the second, so both ends are exact */
		double step = (1.0 - 0.1) / (double)(k - 1), b[130];
		for (int j = 0; j < k; j++)
			b[j] = j < k / 2 ? 0.1 + (double)j * step : 1.0 - (double)(k - 1 - j) * step;
		for (int j = 0; j + 1 < k; j++) {
			double mean = (b[j] + b[j + 1]) / 2.0;
			v[n++] = scale * mean;
			if (is_signed)
				v[n++] = -(scale * mean);
		}
	}
	v[n++] = 0.0;
	v[n++] = 1.0;
	/* n == 256 for both kinds: 2 * (2^7 - 1) + 2 signed, (2^8 - 2) + 2 unsigned */
	qsort(v, (size_t)n, sizeof v[0], cmp_double);
	for (int i = 0; i < 256; i++)
		map[i] = (float)v[i];
}

uint8_t quant_nearest(const float map[256], float x)
{
	if (x != x) /* NaN */
		x = 0.0f;
	/* k = the largest index in 0..254 with map[k] <= x (0 if none) */
	int k = 0;
	for (int s = 128; s > 0; s >>= 1)
		if (k + s <= 254 && map[k + s] <= x)
			k += s;
	/* x lies in [map[k], map[k+1]) (or beyond an end): the nearest entry is k
	 * or k+1. The midpoint is exact in double (two floats whose exponents
	 * differ by less than 29, or one of them 0: true of the dynamic maps),
	 * and equality goes to k, the lower index. */
	double mid = ((double)map[k] + (double)map[k + 1]) * 0.5;
	return (uint8_t)((double)x > mid ? k + 1 : k);
}

void quant_blockwise(uint8_t *codes, float *absmax, const float *x, size_t n, int block,
		     const float map[256])
{
	for (size_t b0 = 0, b = 0; b0 < n; b0 += (size_t)block, b++) {
		size_t len = n - b0 < (size_t)block ? n - b0 : (size_t)block;
		float amax = 0.0f;
		for (size_t i = 0; i < len; i++) {
			float a = x[b0 + i] < 0 ? -x[b0 + i] : x[b0 + i];
			amax = a > amax ? a : amax; /* a NaN never wins */
		}
		absmax[b] = amax;
		const float s = ops_q8_scale(amax);
		for (size_t i = 0; i < len; i++)
			codes[b0 + i] = quant_nearest(map, x[b0 + i] * s);
	}
}

void dequant_blockwise(float *x, const uint8_t *codes, const float *absmax, size_t n, int block,
		       const float map[256])
{
	for (size_t i = 0; i < n; i++)
		x[i] = map[codes[i]] * absmax[i / (size_t)block];
}
