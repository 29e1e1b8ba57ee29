/* Fused softmax + cross-entropy over the vocabulary, one row per token.
 *
 * Per row: m = max, z = sum of exp(x - m) accumulated in double (V is tens of
 * thousands of terms); loss = (m - x[target]) + log z, added in double so a
 * small loss next to large logits keeps its digits; then the gradient
 * exp(x - m) * (scale / z), minus scale at the target, in a second pass (no
 * rounded lse inside the exp). exp is the vectorizable cpu_expf: at V = 32K
 * the two exp passes are the whole cost.
 *
 * dlogits may alias logits: each element is read before it is written, and
 * x[target] is read before the row is overwritten. Rows are independent, so
 * they are split across threads and the result does not depend on the
 * thread count. */
#include <math.h>
#include <string.h>

#include "ops/cpu/cpu_kernels.h"

void cpu_xent_forward_backward(float *dlogits, float *losses, const float *logits,
			       const int32_t *targets, int n, int v, float scale)
{
#pragma omp parallel for schedule(static) if ((size_t)n * v >= CPU_PAR_MIN)
	for (int i = 0; i < n; i++) {
		const float *x = logits + (size_t)i * v;
		float *d = dlogits ? dlogits + (size_t)i * v : NULL;
		int tgt = targets[i];
		if (tgt < 0) {
			losses[i] = 0.0f;
			if (d)
				memset(d, 0, (size_t)v * sizeof(float));
			continue;
		}
		float m = -INFINITY;
#pragma omp simd reduction(max : m)
		for (int j = 0; j < v; j++)
			m = x[j] > m ? x[j] : m;
		double sum = 0.0;
#pragma omp simd reduction(+ : sum)
		for (int j = 0; j < v; j++)
			sum += (double)cpu_expf(x[j] - m);
		losses[i] = (float)((double)(m - x[tgt]) + log(sum));
		if (!d)
			continue;
		const float k = (float)(scale / sum);
		/* simd: d is x or disjoint from it, so there is no dependence
		 * between iterations; without the pragma the aliased call (the
		 * usual one) would fall back to the scalar loop */
#pragma omp simd
		for (int j = 0; j < v; j++)
			d[j] = cpu_expf(x[j] - m) * k;
		d[tgt] -= scale;
	}
}
