/* CUDA kernels of the 8-bit optimizers: adamw8_step and sgd8_step with the
 * semantics of ops.h, bit-identical to the CPU backend (ops/cpu/adam8.c,
 * sgd8.c) and to the scalar reference (optim/quantmap.c).
 *
 * One thread block per quantization block. The block first copies the maps
 * to shared memory and derives the 255 quantization thresholds there: thr[k]
 * = the largest float <= the exact midpoint of map[k], map[k+1] (computed in
 * double, rounded down), thr[255] = +inf; the code of x is then the number of
 * k with x > thr[k] (an 8-step binary search in shared memory), which is
 * quant_nearest's nearest entry with ties to the lower index; NaN gets the
 * code of 0. Pass 1 updates the moments and reduces the new absmax (fmaxf
 * ignores NaN, like the CPU's max); pass 2 updates p and requantizes. Blocks
 * up to Q8_STASH elements keep the fp32 moments in shared memory between the
 * passes; larger ones recompute them (same bits).
 *
 * Bit-identity with the CPU: every fp32 operation is an explicit
 * round-to-nearest intrinsic (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn),
 * which nvcc never contracts into FMA, in ops.h's order.
 *
 * Not registered in any table yet: the CUDA backend wires the launchers
 * below. Pointers are device memory, the args struct is host memory (passed
 * by value), and its map pointers are device memory (256 floats each). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "ops/ops.h"

#define Q8_THREADS 256 /* threads per quantization block (fewer for small blocks) */
#define Q8_STASH 2048  /* elements per state kept in shared memory between passes */

struct q8_map_smem {
	float map[256];
	float thr[256];
};

/* Copy map to shared memory and build its thresholds. Ends with a barrier. */
__device__ static void q8_load_map(q8_map_smem *s, const float *map)
{
	for (int k = threadIdx.x; k < 256; k += blockDim.x)
		s->map[k] = map[k];
	__syncthreads();
	for (int k = threadIdx.x; k < 256; k += blockDim.x)
		s->thr[k] = k == 255 ? INFINITY
				     : __double2float_rd(((double)s->map[k] + (double)s->map[k + 1]) * 0.5);
	__syncthreads();
}

/* number of k in 0..254 with x > thr[k]; NaN -> the code of 0 */
__device__ static __forceinline__ uint8_t q8_code(const float *thr, float x)
{
	if (x != x)
		x = 0.0f;
	int c = 0;
#pragma unroll
	for (int s = 128; s > 0; s >>= 1) /* reads thr[c + s - 1] <= thr[254] */
		if (x > thr[c + s - 1])
			c += s;
	return (uint8_t)c;
}

/* max over the thread block of v (no NaN reaches it); every thread gets it */
__device__ static float q8_block_max(float v, float *red /* [32] */)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	v = lane < nwarps ? red[lane] : 0.0f;
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	__syncthreads(); /* red[] may be reused */
	return v;
}

/* ---- AdamW 8-bit -------------------------------------------------------------------- */

struct adam8_consts {
	float gs, b1, omb1, b2, omb2, step, eps_hat, decay;
};

__device__ static adam8_consts adam8_make_consts(const st_adamw8_args &a)
{
	const float c2 = __fsqrt_rn(a.bc2);
	adam8_consts k;
	k.gs = a.grad_scale;
	k.b1 = a.beta1;
	k.omb1 = __fsub_rn(1.0f, a.beta1);
	k.b2 = a.beta2;
	k.omb2 = __fsub_rn(1.0f, a.beta2);
	k.step = __fdiv_rn(__fmul_rn(a.lr, c2), a.bc1);
	k.eps_hat = __fmul_rn(a.eps, c2);
	k.decay = __fsub_rn(1.0f, __fmul_rn(a.lr, a.weight_decay));
	return k;
}

/* dequantize element i and update its moments */
__device__ static __forceinline__ void adam8_moments(float *m, float *v, const q8_map_smem *sm,
						     const q8_map_smem *sv, uint8_t mc, uint8_t vc,
						     float am_old, float av_old, float g,
						     const adam8_consts &k)
{
	const float gi = __fmul_rn(g, k.gs);
	const float m0 = __fmul_rn(sm->map[mc], am_old), v0 = __fmul_rn(sv->map[vc], av_old);
	*m = __fadd_rn(__fmul_rn(k.b1, m0), __fmul_rn(k.omb1, gi));
	*v = __fadd_rn(__fmul_rn(k.b2, v0), __fmul_rn(k.omb2, __fmul_rn(gi, gi)));
}

__global__ void adamw8_kernel(float *p, uint8_t *m_codes, uint8_t *v_codes, float *m_absmax,
			      float *v_absmax, const float *g, size_t n, st_adamw8_args a)
{
	__shared__ q8_map_smem sm, sv;
	__shared__ float red[32];
	extern __shared__ float stash[]; /* 2 * block floats, or none */
	const size_t b = blockIdx.x, b0 = b * (size_t)a.block;
	const int len = (int)(n - b0 < (size_t)a.block ? n - b0 : (size_t)a.block);
	const bool stashed = a.block <= Q8_STASH;
	const adam8_consts k = adam8_make_consts(a);
	const float am_old = m_absmax[b], av_old = v_absmax[b];
	q8_load_map(&sm, a.map_m);
	q8_load_map(&sv, a.map_v);

	float am = 0.0f, av = 0.0f;
	for (int i = threadIdx.x; i < len; i += blockDim.x) {
		float m, v;
		adam8_moments(&m, &v, &sm, &sv, m_codes[b0 + i], v_codes[b0 + i], am_old, av_old,
			      g[b0 + i], k);
		if (stashed)
			stash[i] = m, stash[a.block + i] = v;
		am = fmaxf(am, fabsf(m));
		av = fmaxf(av, fabsf(v));
	}
	am = q8_block_max(am, red); /* its barriers also order pass 1's reads of */
	av = q8_block_max(av, red); /* the codes before pass 2's writes */
	const float dm = am > 0.0f ? am : 1.0f, dv = av > 0.0f ? av : 1.0f;

	for (int i = threadIdx.x; i < len; i += blockDim.x) {
		float m, v;
		if (stashed)
			m = stash[i], v = stash[a.block + i];
		else
			adam8_moments(&m, &v, &sm, &sv, m_codes[b0 + i], v_codes[b0 + i], am_old,
				      av_old, g[b0 + i], k);
		const float d = __fadd_rn(__fsqrt_rn(v), k.eps_hat);
		const float pi = __fsub_rn(p[b0 + i], __fmul_rn(k.step, __fdiv_rn(m, d)));
		p[b0 + i] = __fmul_rn(pi, k.decay);
		m_codes[b0 + i] = q8_code(sm.thr, __fdiv_rn(m, dm));
		v_codes[b0 + i] = q8_code(sv.thr, __fdiv_rn(v, dv));
	}
	if (threadIdx.x == 0)
		m_absmax[b] = am, v_absmax[b] = av;
}

/* ---- SGD with 8-bit momentum ---------------------------------------------------------- */

/* g' = g * grad_scale + wd * p */
__device__ static __forceinline__ float sgd_grad(float g, float p, const st_sgd8_args &a)
{
	return __fadd_rn(__fmul_rn(g, a.grad_scale), __fmul_rn(a.weight_decay, p));
}

__device__ static __forceinline__ float sgd8_mom(const q8_map_smem *s, uint8_t c, float old,
						 float g, float p, const st_sgd8_args &a)
{
	const float gi = sgd_grad(g, p, a);
	return a.first_step ? gi : __fadd_rn(__fmul_rn(a.momentum, __fmul_rn(s->map[c], old)), gi);
}

__global__ void sgd8_kernel(float *p, uint8_t *mom_codes, float *mom_absmax, const float *g,
			    size_t n, st_sgd8_args a)
{
	__shared__ q8_map_smem s;
	__shared__ float red[32];
	extern __shared__ float stash[]; /* block floats, or none */
	const size_t b = blockIdx.x, b0 = b * (size_t)a.block;
	const int len = (int)(n - b0 < (size_t)a.block ? n - b0 : (size_t)a.block);
	const bool stashed = a.block <= Q8_STASH;
	const float old = a.first_step ? 0.0f : mom_absmax[b];
	q8_load_map(&s, a.map);

	float amax = 0.0f;
	for (int i = threadIdx.x; i < len; i += blockDim.x) {
		const float m = sgd8_mom(&s, mom_codes[b0 + i], old, g[b0 + i], p[b0 + i], a);
		if (stashed)
			stash[i] = m;
		amax = fmaxf(amax, fabsf(m));
	}
	amax = q8_block_max(amax, red);
	const float div = amax > 0.0f ? amax : 1.0f;
	for (int i = threadIdx.x; i < len; i += blockDim.x) {
		const float m = stashed ? stash[i]
					: sgd8_mom(&s, mom_codes[b0 + i], old, g[b0 + i], p[b0 + i], a);
		p[b0 + i] = __fsub_rn(p[b0 + i], __fmul_rn(a.lr, m));
		mom_codes[b0 + i] = q8_code(s.thr, __fdiv_rn(m, div));
	}
	if (threadIdx.x == 0)
		mom_absmax[b] = amax;
}

/* mom_codes NULL: p = p - lr * g' */
__global__ void sgd_plain_kernel(float *p, const float *g, size_t n, st_sgd8_args a)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = __fsub_rn(p[i], __fmul_rn(a.lr, sgd_grad(g[i], p[i], a)));
}

/* ---- host launchers ------------------------------------------------------------------- */

/* threads for a quantization block: whole warps, at most Q8_THREADS */
static int q8_threads(int block)
{
	return block >= Q8_THREADS ? Q8_THREADS : (block + 31) / 32 * 32;
}

extern "C" cudaError_t cuda_adamw8_step(float *p, uint8_t *m_codes, uint8_t *v_codes,
					 float *m_absmax, float *v_absmax, const float *g, size_t n,
					 const struct st_adamw8_args *a, cudaStream_t stream)
{
	if (n == 0)
		return cudaSuccess;
	const size_t nblocks = (n + (size_t)a->block - 1) / (size_t)a->block;
	const size_t smem = a->block <= Q8_STASH ? 2 * (size_t)a->block * sizeof(float) : 0;
	adamw8_kernel<<<(unsigned)nblocks, q8_threads(a->block), smem, stream>>>(
		p, m_codes, v_codes, m_absmax, v_absmax, g, n, *a);
	return cudaGetLastError();
}

extern "C" cudaError_t cuda_sgd8_step(float *p, uint8_t *mom_codes, float *mom_absmax,
				       const float *g, size_t n, const struct st_sgd8_args *a,
				       cudaStream_t stream)
{
	if (n == 0)
		return cudaSuccess;
	if (!mom_codes) {
		size_t grid = (n + 255) / 256;
		sgd_plain_kernel<<<(unsigned)(grid < 65536 ? grid : 65536), 256, 0, stream>>>(p, g, n,
											      *a);
		return cudaGetLastError();
	}
	const size_t nblocks = (n + (size_t)a->block - 1) / (size_t)a->block;
	const size_t smem = a->block <= Q8_STASH ? (size_t)a->block * sizeof(float) : 0;
	sgd8_kernel<<<(unsigned)nblocks, q8_threads(a->block), smem, stream>>>(p, mom_codes,
									     mom_absmax, g, n, *a);
	return cudaGetLastError();
}
