/* Rotary position embedding, in place, Hugging Face rotate_half layout: in
 * every head element i pairs with i + hd/2 and the pair is rotated by the
 * angle of (position t, frequency i) from the shared tables (rope_table.c):
 *   y_i        = x_i cos - x_{i+hd/2} sin
 *   y_{i+hd/2} = x_{i+hd/2} cos + x_i sin
 * dir = -1 uses -sin, the inverse rotation, which is also the transpose, so
 * the same kernel applies the backward to dq/dk. Rows (b,t) are split across
 * threads; each row is H heads of contiguous halves, so the inner loop is a
 * plain vectorizable loop over i. */
#include "ops/cpu/cpu_kernels.h"

void cpu_rope(float *x, const float *cos_tab, const float *sin_tab, int b, int t, int h, int hd,
	      int dir)
{
	int half = hd / 2;
	int rows = b * t;
	float sgn = dir < 0 ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static) if ((size_t)rows * h * hd >= CPU_PAR_MIN)
	for (int r = 0; r < rows; r++) {
		int pos = r % t;
		const float *restrict cs = cos_tab + (size_t)pos * half;
		const float *restrict sn = sin_tab + (size_t)pos * half;
		for (int j = 0; j < h; j++) {
			float *restrict x1 = x + ((size_t)r * h + j) * hd;
			float *restrict x2 = x1 + half;
			for (int i = 0; i < half; i++) {
				float a = x1[i], bb = x2[i], s = sgn * sn[i];
				x1[i] = a * cs[i] - bb * s;
				x2[i] = bb * cs[i] + a * s;
			}
		}
	}
}
