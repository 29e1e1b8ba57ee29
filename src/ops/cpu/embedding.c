/* Token embedding lookup and its scatter-add backward.
 *
 * Backward is the one place where rows collide (a token repeated in the batch
 * adds into the same dwte row), so it is parallel over column blocks instead
 * of rows: each thread owns a band of columns of every dwte row and walks the
 * tokens in order i = 0..N-1. Every dwte element therefore receives its terms
 * in row order whatever the thread count, with no atomics and no scratch. */
#include <string.h>

#include "ops/cpu/cpu_kernels.h"

/* 64 floats = 4 cache lines: threads never share a line of dwte, and a band
 * is long enough for the inner loop to vectorize well. */
#define EMB_COL_BLOCK 64

void cpu_embedding_forward(float *out, const int32_t *tokens, const float *wte, int n, int c)
{
#pragma omp parallel for schedule(static) if ((size_t)n * c >= CPU_PAR_MIN)
	for (int i = 0; i < n; i++)
		memcpy(out + (size_t)i * c, wte + (size_t)tokens[i] * c, (size_t)c * sizeof(float));
}

void cpu_embedding_backward(float *dwte, const float *dout, const int32_t *tokens, int n, int c,
			    int v)
{
	(void)v; /* tokens are in [0, v) by contract */
	int nblk = (c + EMB_COL_BLOCK - 1) / EMB_COL_BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)n * c >= CPU_PAR_MIN)
	for (int blk = 0; blk < nblk; blk++) {
		int j0 = blk * EMB_COL_BLOCK;
		int j1 = j0 + EMB_COL_BLOCK < c ? j0 + EMB_COL_BLOCK : c;
		for (int i = 0; i < n; i++) {
			float *restrict d = dwte + (size_t)tokens[i] * c;
			const float *restrict g = dout + (size_t)i * c;
			for (int j = j0; j < j1; j++)
				d[j] += g[j];
		}
	}
}
