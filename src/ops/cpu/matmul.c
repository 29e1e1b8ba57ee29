/* CPU matmul: c = alpha * op(a) @ op(b) + beta * c through oneDNN's
 * dnnl_sgemm, which is row-major with BLAS semantics, so the table's
 * (m,n,k, lda/ldb/ldc as row strides of the stored matrices) maps onto it
 * one to one. oneDNN threads the call itself with OpenMP when called from
 * serial code and runs it on the calling thread inside a parallel region
 * (attention.c relies on that). For a fixed thread count it partitions the
 * same way every call, so the result is bit-reproducible as ops.h requires.
 *
 * Kernels have no error path: the only failures dnnl_sgemm reports are
 * invalid arguments (a bad stride or size from the caller), which are bugs,
 * so they are reported and the process aborts. */
#include <dnnl.h>
#include <dnnl_debug.h>
#include <stdlib.h>

#include "ops/cpu/cpu_kernels.h"
#include "util/check.h"

void cpu_matmul(float *c, const float *a, const float *b, int m, int n, int k, int ta, int tb,
		float alpha, float beta, int lda, int ldb, int ldc)
{
	dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b,
				      ldb, beta, c, ldc);
	if (st != dnnl_success) {
		ST_ERROR("this is a bug in the caller's shapes or strides; please report it",
			 "dnnl_sgemm failed (%s): m=%d n=%d k=%d ta=%d tb=%d lda=%d ldb=%d ldc=%d",
			 dnnl_status2str(st), m, n, k, ta, tb, lda, ldb, ldc);
		abort();
	}
}
