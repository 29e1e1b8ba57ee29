/* AdamW on one flat unit, in exactly the order ops.h writes it (PyTorch's):
 * scale the gradient, decoupled decay, moment updates, bias-corrected step.
 * Elementwise, so any split across threads gives the same bits. */
#include <math.h>

#include "ops/cpu/cpu_kernels.h"

void cpu_adamw_step(float *p, float *m, float *v, const float *g, size_t n,
		    const struct st_adamw_args *a)
{
	const float lr = a->lr, b1 = a->beta1, b2 = a->beta2, eps = a->eps;
	const float gs = a->grad_scale, bc1 = a->bc1, bc2 = a->bc2;
	/* (1 - lr*wd) would round differently from p -= lr*wd*p; keep the
	 * literal form. decay = 0 makes the step a no-op, as "if wd != 0". */
	const float decay = lr * a->weight_decay;
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++) {
		float gi = g[i] * gs;
		float pi = p[i];
		pi -= decay * pi;
		float mi = b1 * m[i] + (1.0f - b1) * gi;
		float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
		m[i] = mi;
		v[i] = vi;
		p[i] = pi - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
	}
}
