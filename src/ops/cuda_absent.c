/* ops_cuda() for builds without nvcc: the Makefile defines ST_HAVE_CUDA and
 * compiles the ops/cuda .cu files only when nvcc exists; otherwise this definition
 * links and reports that no CUDA backend is available. */
#include "ops/ops.h"

#ifndef ST_HAVE_CUDA
const struct st_ops *ops_cuda(void)
{
	return NULL;
}
#endif
