/* SGD with optional momentum on one flat unit, as ops.h writes it:
 *   g' = g * grad_scale + wd * p
 *   mom = g' on the first step, else momentum * mom + g'   (mom != NULL)
 *   p -= lr * (mom or g')
 * Elementwise, so any split across threads gives the same bits. */
#include "ops/cpu/cpu_kernels.h"

void cpu_sgd_step(float *p, float *mom, const float *g, size_t n, const struct st_sgd_args *a)
{
	const float lr = a->lr, mu = a->momentum, wd = a->weight_decay, gs = a->grad_scale;
	if (!mom) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++)
			p[i] -= lr * (g[i] * gs + wd * p[i]);
		return;
	}
	/* mu * 0 + g' == g' exactly, but mom may hold garbage (NaN) before the
	 * first step, hence the separate first-step loop. */
	if (a->first_step) {
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
		for (size_t i = 0; i < n; i++) {
			float gi = g[i] * gs + wd * p[i];
			mom[i] = gi;
			p[i] -= lr * gi;
		}
		return;
	}
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++) {
		float mi = mu * mom[i] + (g[i] * gs + wd * p[i]);
		mom[i] = mi;
		p[i] -= lr * mi;
	}
}
