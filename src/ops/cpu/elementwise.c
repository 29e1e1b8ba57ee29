/* Flat elementwise kernels: residual/gradient add, sum of squares (global
 * gradient norm), and in-place scaling.
 *
 * sumsq must give the same bits for any thread count (the gradient norm
 * decides clipping, and resume/offload bit-identity depends on it), so the
 * array is cut into a fixed number of chunks that does not depend on the
 * thread count; each chunk is summed in double, and the chunk sums are added
 * in chunk order on one thread. */
#include "ops/cpu/cpu_kernels.h"

/* Enough chunks to balance up to ~64 threads; few enough that the serial
 * combine is free. Changing it changes the rounding of sumsq. */
#define SUMSQ_CHUNKS 64

void cpu_add_inplace(float *y, const float *x, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++)
		y[i] += x[i];
}

void cpu_scale(float *x, float s, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++)
		x[i] *= s;
}

double cpu_sumsq(const float *x, size_t n)
{
	double part[SUMSQ_CHUNKS];
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN)
	for (int ch = 0; ch < SUMSQ_CHUNKS; ch++) {
		size_t i0 = n * ch / SUMSQ_CHUNKS, i1 = n * (ch + 1) / SUMSQ_CHUNKS;
		double acc = 0.0;
#pragma omp simd reduction(+ : acc)
		for (size_t i = i0; i < i1; i++)
			acc += (double)x[i] * (double)x[i];
		part[ch] = acc;
	}
	double sum = 0.0;
	for (int ch = 0; ch < SUMSQ_CHUNKS; ch++)
		sum += part[ch];
	return sum;
}
