/* fp32 AdamW on the device: ops.h's adamw_step, the same bits as the CPU
 * kernel (ops/cpu/adamw.c, compiled without FMA contraction for this). Every
 * fp32 operation is an explicit round-to-nearest intrinsic, which nvcc never
 * contracts, in adamw.c's order:
 *   g' = g * gs;  p = p - (lr * wd) * p
 *   m = b1 m + (1 - b1) g';  v = b2 v + ((1 - b2) g') g'
 *   p = p - (lr * (m / bc1)) / (sqrt(v / bc2) + eps)
 * Elementwise and memory-bound (28 bytes per parameter): four elements per
 * thread with 16-byte loads where the pointers allow, a grid-stride loop. */
#include <cuda_runtime.h>

#include "ops/cuda/cuda_optim.h"

struct adamw_k {
	float lr, b1, omb1, b2, omb2, eps, gs, bc1, bc2, decay;
};

__device__ static __forceinline__ void adamw_one(float *p, float *m, float *v, float g,
						 const adamw_k &k)
{
	const float gi = __fmul_rn(g, k.gs);
	const float pi = __fsub_rn(*p, __fmul_rn(k.decay, *p));
	const float mi = __fadd_rn(__fmul_rn(k.b1, *m), __fmul_rn(k.omb1, gi));
	const float vi = __fadd_rn(__fmul_rn(k.b2, *v), __fmul_rn(__fmul_rn(k.omb2, gi), gi));
	const float den = __fsqrt_rn(__fdiv_rn(vi, k.bc2));
	*m = mi;
	*v = vi;
	*p = __fsub_rn(pi, __fdiv_rn(__fmul_rn(k.lr, __fdiv_rn(mi, k.bc1)), __fadd_rn(den, k.eps)));
}

__global__ void adamw_vec4_kernel(float4 *p, float4 *m, float4 *v, const float4 *g, size_t n4,
				  adamw_k k)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
	     i += (size_t)gridDim.x * blockDim.x) {
		float4 pp = p[i], mm = m[i], vv = v[i];
		const float4 gg = g[i];
		adamw_one(&pp.x, &mm.x, &vv.x, gg.x, k);
		adamw_one(&pp.y, &mm.y, &vv.y, gg.y, k);
		adamw_one(&pp.z, &mm.z, &vv.z, gg.z, k);
		adamw_one(&pp.w, &mm.w, &vv.w, gg.w, k);
		p[i] = pp, m[i] = mm, v[i] = vv;
	}
}

__global__ void adamw_scalar_kernel(float *p, float *m, float *v, const float *g, size_t n,
				    adamw_k k)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		adamw_one(&p[i], &m[i], &v[i], g[i], k);
}

static unsigned grid_for(size_t items, int threads)
{
	static int sms; /* of the first device used: one GPU is what runs */
	if (!sms) {
		int dev = 0, count = 0;
		if (cudaGetDevice(&dev) == cudaSuccess &&
		    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess)
			sms = count;
	}
	const int n_sm = sms > 0 ? sms : 132; /* a failed query: an H100's count */
	const size_t want = (items + (size_t)threads - 1) / (size_t)threads;
	const size_t cap = (size_t)n_sm * 16; /* enough resident threads to hide latency */
	return (unsigned)(want < cap ? (want ? want : 1) : cap);
}

extern "C" cudaError_t cuda_adamw_step(float *p, float *m, float *v, const float *g, size_t n,
				       const struct st_adamw_args *a, cudaStream_t stream)
{
	if (n == 0)
		return cudaSuccess;
	adamw_k k;
	k.lr = a->lr, k.b1 = a->beta1, k.b2 = a->beta2, k.eps = a->eps, k.gs = a->grad_scale;
	k.bc1 = a->bc1, k.bc2 = a->bc2;
	/* the CPU computes these once in fp32 too */
	k.omb1 = 1.0f - a->beta1, k.omb2 = 1.0f - a->beta2, k.decay = a->lr * a->weight_decay;
	const int threads = 256;
	const uintptr_t any = (uintptr_t)p | (uintptr_t)m | (uintptr_t)v | (uintptr_t)g;
	if (any % 16 == 0) {
		const size_t n4 = n / 4, tail = n - 4 * n4;
		if (n4)
			adamw_vec4_kernel<<<grid_for(n4, threads), threads, 0, stream>>>(
				(float4 *)p, (float4 *)m, (float4 *)v, (const float4 *)g, n4, k);
		if (tail)
			adamw_scalar_kernel<<<1, 32, 0, stream>>>(p + 4 * n4, m + 4 * n4, v + 4 * n4,
								   g + 4 * n4, tail, k);
	} else {
		adamw_scalar_kernel<<<grid_for(n, threads), threads, 0, stream>>>(p, m, v, g, n, k);
	}
	return cudaGetLastError();
}
