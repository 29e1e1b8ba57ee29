/* RoPE angle tables, shared by every backend so they all rotate by the same
 * float angles: computed in double, rounded once (ops.h). The CUDA backend
 * copies these host tables to the device. */
#include <math.h>

#include "ops/ops.h"

void rope_table(float *cos_tab, float *sin_tab, int t, int hd, double theta)
{
	int half = hd / 2;
	for (int i = 0; i < half; i++) {
		double inv_freq = pow(theta, -2.0 * i / hd);
		for (int p = 0; p < t; p++) {
			double a = (double)p * inv_freq;
			cos_tab[(size_t)p * half + i] = (float)cos(a);
			sin_tab[(size_t)p * half + i] = (float)sin(a);
		}
	}
}
