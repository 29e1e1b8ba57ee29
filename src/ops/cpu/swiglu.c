/* SwiGLU gating of the MLP: out = silu(gate) * up, silu(x) = x sigmoid(x).
 * With s = sigmoid(g): d silu/dg = s (1 + g (1 - s)), so
 *   dgate = dout * up * s * (1 + g (1 - s)),   dup = dout * g * s.
 * s = 1/(1 + exp(-g)) saturates cleanly at both ends (cpu_expf stays finite,
 * so s is ~0 or 1, never NaN), so no clamping is needed. */
#include "ops/cpu/cpu_kernels.h"

void cpu_swiglu_forward(float *out, const float *gate, const float *up, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++) {
		float g = gate[i];
		float s = 1.0f / (1.0f + cpu_expf(-g));
		out[i] = g * s * up[i];
	}
}

void cpu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
			 const float *up, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= CPU_PAR_MIN)
	for (size_t i = 0; i < n; i++) {
		float g = gate[i], u = up[i], d = dout[i];
		float s = 1.0f / (1.0f + cpu_expf(-g));
		dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
		dup[i] = d * g * s;
	}
}
