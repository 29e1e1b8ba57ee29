/* The CUDA backend's kernel table. Placeholder: the CUDA backend issue fills
 * in one <op>.cu per kernel here and returns its table once a device is
 * found; until then the build links and ops_cuda() reports "no CUDA backend"
 * so sessions fall back to ops_cpu(). */
#include "ops/ops.h"

extern "C" const struct st_ops *ops_cuda(void)
{
	return NULL;
}
