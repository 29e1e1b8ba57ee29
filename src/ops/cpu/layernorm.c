/* LayerNorm forward and backward (fp32), used by the stable embedding
 * (Dettmers et al. 2021, section 2.3: layer norm right after the token
 * embedding).
 *
 * With mu the row mean, r = (var + eps)^-1/2, xh = (x - mu) r, out = xh w + b:
 *   dxh = dout w
 *   dx  = r (dxh - mean(dxh) - xh mean(dxh xh))
 *   dw += sum_i dout xh,   db += sum_i dout
 * As in rmsnorm.c, dw/db are summed in a pass split by columns that walks the
 * rows in order (fixed order for any thread count), before dx is written.
 * Row statistics and x - mu are computed in double: a row with a large mean
 * and a small spread (the stable embedding's input can be such a row) would
 * otherwise lose ~1e-4 relative to cancellation. The op runs once per
 * forward, on the embedding only, so the cost does not matter. */
#include <math.h>

#include "ops/cpu/cpu_kernels.h"

#define LN_COL_BLOCK 64

void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w,
			   const float *b, int n, int c, float eps)
{
#pragma omp parallel for schedule(static) if ((size_t)n * c >= CPU_PAR_MIN)
	for (int i = 0; i < n; i++) {
		const float *restrict xi = x + (size_t)i * c;
		float *restrict oi = out + (size_t)i * c;
		double s = 0.0;
		for (int j = 0; j < c; j++)
			s += xi[j];
		double mu = s / c, v = 0.0;
		for (int j = 0; j < c; j++)
			v += ((double)xi[j] - mu) * ((double)xi[j] - mu);
		double r = 1.0 / sqrt(v / c + (double)eps);
		mean[i] = (float)mu;
		rstd[i] = (float)r;
		for (int j = 0; j < c; j++)
			oi[j] = (float)(((double)xi[j] - mu) * r) * w[j] + b[j];
	}
}

void cpu_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x,
			    const float *w, const float *mean, const float *rstd, int n, int c)
{
	int nblk = (c + LN_COL_BLOCK - 1) / LN_COL_BLOCK;
#pragma omp parallel if ((size_t)n * c >= CPU_PAR_MIN)
	{
#pragma omp for schedule(static)
		for (int blk = 0; blk < nblk; blk++) {
			int j0 = blk * LN_COL_BLOCK;
			int len = c - j0 < LN_COL_BLOCK ? c - j0 : LN_COL_BLOCK;
			float aw[LN_COL_BLOCK] = {0}, ab[LN_COL_BLOCK] = {0};
			for (int i = 0; i < n; i++) {
				const float *restrict gi = dout + (size_t)i * c + j0;
				const float *restrict xi = x + (size_t)i * c + j0;
				double mu = mean[i], r = rstd[i];
				for (int j = 0; j < len; j++) {
					aw[j] += gi[j] * (float)(((double)xi[j] - mu) * r);
					ab[j] += gi[j];
				}
			}
			for (int j = 0; j < len; j++) {
				dw[j0 + j] += aw[j];
				db[j0 + j] += ab[j];
			}
		}
#pragma omp for schedule(static)
		for (int i = 0; i < n; i++) {
			const float *xi = x + (size_t)i * c;
			const float *gi = dout + (size_t)i * c;
			float *di = dx + (size_t)i * c;
			double mu = mean[i], r = rstd[i], s1 = 0.0, s2 = 0.0;
			for (int j = 0; j < c; j++) {
				double g = (double)gi[j] * w[j];
				s1 += g;
				s2 += g * (((double)xi[j] - mu) * r);
			}
			s1 /= c;
			s2 /= c;
			for (int j = 0; j < c; j++)
				di[j] = (float)(r * ((double)gi[j] * w[j] - s1 -
						     (((double)xi[j] - mu) * r) * s2));
		}
	}
}
