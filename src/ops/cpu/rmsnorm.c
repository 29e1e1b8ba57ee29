/* RMSNorm forward and backward (fp32 throughout, as ops.h specifies).
 *
 * With r = rstd = (mean(x^2) + eps)^-1/2 and out_j = x_j r w_j:
 *   dx_j = r (dout_j w_j) - x_j r^3 <dout*w, x> / C
 *   dw_j += sum_i dout_ij x_ij r_i
 * dx is independent per row, so rows are split across threads. dw sums over
 * rows, so it is computed in a separate pass that splits the columns instead
 * and walks the rows in order: the sum order is fixed, whatever the thread
 * count (no per-thread partials, no atomics). The dw pass runs first so that
 * dx may even alias dout. */
#include <math.h>

#include "ops/cpu/cpu_kernels.h"

/* dw column band per thread: 64 floats, a multiple of the cache line. */
#define RMS_COL_BLOCK 64

void cpu_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int n, int c,
			 float eps)
{
#pragma omp parallel for schedule(static) if ((size_t)n * c >= CPU_PAR_MIN)
	for (int i = 0; i < n; i++) {
		const float *restrict xi = x + (size_t)i * c;
		float *restrict oi = out + (size_t)i * c;
		float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
		for (int j = 0; j < c; j++)
			ss += xi[j] * xi[j];
		float r = 1.0f / sqrtf(ss / (float)c + eps);
		rstd[i] = r;
		for (int j = 0; j < c; j++)
			oi[j] = xi[j] * r * w[j];
	}
}

void cpu_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x,
			  const float *w, const float *rstd, int n, int c)
{
	int nblk = (c + RMS_COL_BLOCK - 1) / RMS_COL_BLOCK;
#pragma omp parallel if ((size_t)n * c >= CPU_PAR_MIN)
	{
#pragma omp for schedule(static)
		for (int blk = 0; blk < nblk; blk++) {
			int j0 = blk * RMS_COL_BLOCK;
			int len = c - j0 < RMS_COL_BLOCK ? c - j0 : RMS_COL_BLOCK;
			float acc[RMS_COL_BLOCK] = { 0 };
			for (int i = 0; i < n; i++) {
				const float *restrict gi = dout + (size_t)i * c + j0;
				const float *restrict xi = x + (size_t)i * c + j0;
				float r = rstd[i];
				for (int j = 0; j < len; j++)
					acc[j] += gi[j] * xi[j] * r;
			}
			for (int j = 0; j < len; j++)
				dw[j0 + j] += acc[j];
		}
#pragma omp for schedule(static)
		for (int i = 0; i < n; i++) {
			const float *xi = x + (size_t)i * c;
			const float *gi = dout + (size_t)i * c;
			float *di = dx + (size_t)i * c;
			float r = rstd[i], dot = 0.0f;
#pragma omp simd reduction(+ : dot)
			for (int j = 0; j < c; j++)
				dot += gi[j] * w[j] * xi[j];
			float k = r * r * r * dot / (float)c;
			for (int j = 0; j < c; j++)
				di[j] = r * gi[j] * w[j] - xi[j] * k;
		}
	}
}
