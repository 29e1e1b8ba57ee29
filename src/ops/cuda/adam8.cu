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
 * Block 256 (the default) takes faster kernels for AdamW and SGD: one warp per
 * quantization block, eight elements per lane (two 16-byte loads of p and
 * of g, two 4-byte loads of each code array), the absmax reduced by warp
 * shuffles alone, codes from a bucket table instead of the binary search
 * (below), and a persistent grid whose thread blocks build the maps'
 * thresholds and tables once instead of once per quantization block. Same
 * operations on each element, so the same bits as the general kernel
 * (tests/test_cuda.c compares both with the CPU).
 *
 * Not registered in any table yet: the CUDA backend wires the launchers
 * (declared in ops/cuda/cuda_optim.h). Pointers are device memory, the args
 * struct is host memory (passed by value), and its map pointers are device
 * memory (256 floats each). */
#include <cuda_runtime.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/cuda_optim.h"

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

/* ops_q8_scale (ops.h) on the device: the IEEE reciprocal of a block's
 * absmax, 1 for absmax 0, FLT_MAX where the reciprocal overflows */
__device__ static __forceinline__ float q8_scale(float absmax)
{
	return absmax > 0.0f ? fminf(__fdiv_rn(1.0f, absmax), FLT_MAX) : 1.0f;
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

/* ---- bucket table: the code in one shared-memory load for most x ----------------
 *
 * The binary search costs 8 dependent shared-memory loads per code, and with
 * the lanes of a warp reading different entries they conflict: that search
 * was the warp kernel's bottleneck (57% of the copy bandwidth on an H100).
 * The bucket table cuts the floats into intervals by their top bits (as the
 * CPU's quant8.h does): |x| < 2^-23 is one bucket, then 128 per binade up to
 * 2.0, then one for |x| >= 2 (with inf), for each sign; Q8_NBH per sign. For
 * bucket b, tab[b] = c0 | n << 8 with c0 = the number of thresholds below the
 * bucket's smallest float and n the number inside the bucket, which are
 * thr[c0 .. c0+n-1] (sorted). The code of x = c0 + the number of those below
 * x: exactly count(x > thr[k]), the binary search's answer, for any sorted
 * map. For the dynamic maps n is 0 for all but 255 of the 6148 buckets and
 * at most 1, so most codes cost the one table load. */
#define Q8_TINY 0x34000000u /* 2^-23 */
#define Q8_NBH (2 + 24 * 128)

struct q8_lut_smem {
	q8_map_smem m;
	uint16_t tab[2 * Q8_NBH];
};

/* bucket of x's bits (NaN excluded) */
__device__ static __forceinline__ int q8_bucket(uint32_t bits)
{
	const uint32_t a = bits & 0x7fffffffu;
	const int j = a < Q8_TINY ? 0 : a >= 0x40000000u ? Q8_NBH - 1 : 1 + (int)((a - Q8_TINY) >> 16);
	return bits >> 31 ? Q8_NBH + j : j;
}

/* bucket at position i of the x order: the negative buckets from -inf up to
 * -0, then the positive ones from +0 up */
__device__ static __forceinline__ int q8_bucket_at(int i)
{
	return i < Q8_NBH ? 2 * Q8_NBH - 1 - i : i - Q8_NBH;
}

/* q8_load_map, then the bucket table: each threshold counts itself into its
 * bucket (a -0 threshold into +0's, as the compares treat it), and c0 is the
 * exclusive prefix sum of the counts in x order, each thread scanning a
 * contiguous run of positions. blockDim.x: whole warps, at most 1024. Ends
 * with a barrier.
 *
 * (The first version searched the thresholds for each bucket's smallest
 * float, walking them along each thread's run. On an H100, one launch on a
 * 64K-parameter tensor took 28.4 us with it and 14.9 us with this, against
 * 9.0-10.4 us for the fp32 kernel; bench/results/gpu-20261123-0007, -0012.) */
__device__ static void q8_load_lut(q8_lut_smem *s, const float *map)
{
	__shared__ int warp_sum[32];
	q8_load_map(&s->m, map);
	uint32_t *words = (uint32_t *)s->tab; /* two uint16 entries per word */
	for (int w = threadIdx.x; w < Q8_NBH; w += blockDim.x)
		words[w] = 0;
	__syncthreads();
	for (int k = threadIdx.x; k < 255; k += blockDim.x) {
		const float t = s->m.thr[k];
		const int b = q8_bucket(t == 0.0f ? 0u : __float_as_uint(t));
		atomicAdd(&words[b >> 1], 1u << (16 * (b & 1))); /* counts <= 255: no carry */
	}
	__syncthreads();
	const int per = (2 * Q8_NBH + blockDim.x - 1) / blockDim.x;
	const int i0 = min((int)threadIdx.x * per, 2 * Q8_NBH), i1 = min(i0 + per, 2 * Q8_NBH);
	int run = 0;
	for (int i = i0; i < i1; i++)
		run += s->tab[q8_bucket_at(i)];
	const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	int incl = run; /* inclusive scan of the runs over the warp */
	for (int o = 1; o < 32; o <<= 1) {
		const int y = __shfl_up_sync(0xffffffffu, incl, o);
		if (lane >= o)
			incl += y;
	}
	if (lane == 31)
		warp_sum[warp] = incl;
	__syncthreads();
	int c = incl - run;
	for (int w = 0; w < warp; w++)
		c += warp_sum[w];
	for (int i = i0; i < i1; i++) { /* positions are this thread's alone */
		const int b = q8_bucket_at(i), n = s->tab[b];
		s->tab[b] = (uint16_t)(c | n << 8);
		c += n;
	}
	__syncthreads();
}

/* the code of x (NaN -> the code of 0), as q8_code */
__device__ static __forceinline__ uint8_t q8_lut_code(const q8_lut_smem *s, float x)
{
	if (x != x)
		x = 0.0f;
	const uint32_t e = s->tab[q8_bucket(__float_as_uint(x))];
	int c = (int)(e & 255);
	for (int n = (int)(e >> 8); n > 0 && x > s->m.thr[c]; n--)
		c++;
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
	const float scale_m = q8_scale(am), scale_v = q8_scale(av);

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
		m_codes[b0 + i] = q8_code(sm.thr, __fmul_rn(m, scale_m));
		v_codes[b0 + i] = q8_code(sv.thr, __fmul_rn(v, scale_v));
	}
	if (threadIdx.x == 0)
		m_absmax[b] = am, v_absmax[b] = av;
}

/* ---- warp-per-block kernels (block 256) ---------------------------------------------
 *
 * One warp per quantization block of 256: lane l holds elements
 * h*128 + 4l + j (h = 0, 1; j = 0..3), so every load and store of the warp is
 * contiguous. FULL: the whole block lies below n and the pointers are aligned
 * (16-byte float4, 4-byte uchar4 accesses); otherwise element by element with
 * bounds (0 read past n, nothing written there). */
__device__ static __forceinline__ size_t w8_first(size_t q, int h)
{
	return q * 256 + (size_t)h * 128 + (size_t)(threadIdx.x % 32) * 4;
}

/* four consecutive elements as one aligned access */
template <typename T> struct quad;
template <> struct quad<float> {
	typedef float4 type;
};
template <> struct quad<uint8_t> {
	typedef uchar4 type;
};

template <bool FULL, typename T>
__device__ static __forceinline__ void w8_load(T *out, const T *x, size_t e0, size_t n)
{
	if (FULL) {
		const typename quad<T>::type v = *(const typename quad<T>::type *)(x + e0);
		out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
	} else {
#pragma unroll
		for (int j = 0; j < 4; j++)
			out[j] = e0 + j < n ? x[e0 + j] : T(0);
	}
}

template <bool FULL, typename T>
__device__ static __forceinline__ void w8_store(T *x, const T *v, size_t e0, size_t n)
{
	if (FULL) {
		typename quad<T>::type q;
		q.x = v[0], q.y = v[1], q.z = v[2], q.w = v[3];
		*(typename quad<T>::type *)(x + e0) = q;
	} else {
#pragma unroll
		for (int j = 0; j < 4; j++)
			if (e0 + j < n)
				x[e0 + j] = v[j];
	}
}

/* max over the warp (no NaN reaches it) */
__device__ static __forceinline__ float w8_warp_max(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

template <bool FULL>
__device__ static __forceinline__ void adamw8_warp_block(float *p, uint8_t *m_codes,
							 uint8_t *v_codes, float *m_absmax,
							 float *v_absmax, const float *g, size_t n,
							 size_t q, const q8_lut_smem *lm,
							 const q8_lut_smem *lv, const adam8_consts &k)
{
	const float am_old = m_absmax[q], av_old = v_absmax[q];
	float pe[8], m[8], v[8];
	float am = 0.0f, av = 0.0f;
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const size_t e0 = w8_first(q, h);
		uint8_t mc[4], vc[4];
		float ge[4];
		w8_load<FULL>(mc, m_codes, e0, n);
		w8_load<FULL>(vc, v_codes, e0, n);
		w8_load<FULL>(ge, g, e0, n);
		w8_load<FULL>(pe + 4 * h, p, e0, n);
#pragma unroll
		for (int j = 0; j < 4; j++) {
			adam8_moments(&m[4 * h + j], &v[4 * h + j], &lm->m, &lv->m, mc[j], vc[j], am_old,
				      av_old, ge[j], k);
			if (FULL || e0 + j < n) {
				am = fmaxf(am, fabsf(m[4 * h + j]));
				av = fmaxf(av, fabsf(v[4 * h + j]));
			}
		}
	}
	am = w8_warp_max(am);
	av = w8_warp_max(av);
	const float scale_m = q8_scale(am), scale_v = q8_scale(av);
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const size_t e0 = w8_first(q, h);
		float po[4];
		uint8_t mc[4], vc[4];
#pragma unroll
		for (int j = 0; j < 4; j++) {
			const int e = 4 * h + j;
			const float d = __fadd_rn(__fsqrt_rn(v[e]), k.eps_hat);
			const float pi = __fsub_rn(pe[e], __fmul_rn(k.step, __fdiv_rn(m[e], d)));
			po[j] = __fmul_rn(pi, k.decay);
			mc[j] = q8_lut_code(lm, __fmul_rn(m[e], scale_m));
			vc[j] = q8_lut_code(lv, __fmul_rn(v[e], scale_v));
		}
		w8_store<FULL>(p, po, e0, n);
		w8_store<FULL>(m_codes, mc, e0, n);
		w8_store<FULL>(v_codes, vc, e0, n);
	}
	if (threadIdx.x % 32 == 0)
		m_absmax[q] = am, v_absmax[q] = av;
}

#define W8_WARPS 8 /* quantization blocks in flight per thread block */

/* Persistent: thread block x takes quantization blocks x*8 + warp, then
 * strides by the grid. The maps and thresholds are built once per thread
 * block. */
__global__ void __launch_bounds__(32 * W8_WARPS)
	adamw8_warp_kernel(float *p, uint8_t *m_codes, uint8_t *v_codes, float *m_absmax,
			   float *v_absmax, const float *g, size_t n, st_adamw8_args a)
{
	__shared__ q8_lut_smem lm, lv;
	const adam8_consts k = adam8_make_consts(a);
	q8_load_lut(&lm, a.map_m);
	q8_load_lut(&lv, a.map_v);
	const size_t nq = (n + 255) / 256, full = n / 256;
	for (size_t q = (size_t)blockIdx.x * W8_WARPS + threadIdx.x / 32; q < nq;
	     q += (size_t)gridDim.x * W8_WARPS) {
		if (q < full)
			adamw8_warp_block<true>(p, m_codes, v_codes, m_absmax, v_absmax, g, n, q, &lm,
						&lv, k);
		else
			adamw8_warp_block<false>(p, m_codes, v_codes, m_absmax, v_absmax, g, n, q,
						 &lm, &lv, k);
	}
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
		/* the first step reads no codes: they are not yet written */
		const uint8_t c = a.first_step ? 0 : mom_codes[b0 + i];
		const float m = sgd8_mom(&s, c, old, g[b0 + i], p[b0 + i], a);
		if (stashed)
			stash[i] = m;
		amax = fmaxf(amax, fabsf(m));
	}
	amax = q8_block_max(amax, red);
	const float scale = q8_scale(amax);
	for (int i = threadIdx.x; i < len; i += blockDim.x) {
		const float m = stashed ? stash[i]
					: sgd8_mom(&s, a.first_step ? 0 : mom_codes[b0 + i], old,
						   g[b0 + i], p[b0 + i], a);
		p[b0 + i] = __fsub_rn(p[b0 + i], __fmul_rn(a.lr, m));
		mom_codes[b0 + i] = q8_code(s.thr, __fmul_rn(m, scale));
	}
	if (threadIdx.x == 0)
		mom_absmax[b] = amax;
}

/* sgd8_kernel's step, one warp per block of 256 (the layout above) */
template <bool FULL>
__device__ static __forceinline__ void sgd8_warp_block(float *p, uint8_t *codes, float *absmax,
						       const float *g, size_t n, size_t q,
						       const q8_lut_smem *l, const st_sgd8_args &a)
{
	const float old = a.first_step ? 0.0f : absmax[q];
	float pe[8], m[8], amax = 0.0f;
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const size_t e0 = w8_first(q, h);
		uint8_t c[4] = {0, 0, 0, 0}; /* the first step reads no codes */
		float ge[4];
		if (!a.first_step)
			w8_load<FULL>(c, codes, e0, n);
		w8_load<FULL>(ge, g, e0, n);
		w8_load<FULL>(pe + 4 * h, p, e0, n);
#pragma unroll
		for (int j = 0; j < 4; j++) {
			m[4 * h + j] = sgd8_mom(&l->m, c[j], old, ge[j], pe[4 * h + j], a);
			if (FULL || e0 + j < n) {
				amax = fmaxf(amax, fabsf(m[4 * h + j]));
			}
		}
	}
	amax = w8_warp_max(amax);
	const float scale = q8_scale(amax);
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const size_t e0 = w8_first(q, h);
		float po[4];
		uint8_t c[4];
#pragma unroll
		for (int j = 0; j < 4; j++) {
			po[j] = __fsub_rn(pe[4 * h + j], __fmul_rn(a.lr, m[4 * h + j]));
			c[j] = q8_lut_code(l, __fmul_rn(m[4 * h + j], scale));
		}
		w8_store<FULL>(p, po, e0, n);
		w8_store<FULL>(codes, c, e0, n);
	}
	if (threadIdx.x % 32 == 0)
		absmax[q] = amax;
}

__global__ void __launch_bounds__(32 * W8_WARPS)
	sgd8_warp_kernel(float *p, uint8_t *codes, float *absmax, const float *g, size_t n,
			 st_sgd8_args a)
{
	__shared__ q8_lut_smem l;
	q8_load_lut(&l, a.map);
	const size_t nq = (n + 255) / 256, full = n / 256;
	for (size_t q = (size_t)blockIdx.x * W8_WARPS + threadIdx.x / 32; q < nq;
	     q += (size_t)gridDim.x * W8_WARPS) {
		if (q < full)
			sgd8_warp_block<true>(p, codes, absmax, g, n, q, &l, a);
		else
			sgd8_warp_block<false>(p, codes, absmax, g, n, q, &l, a);
	}
}

/* mom_codes NULL: p = p - lr * g' */
__global__ void sgd_plain_kernel(float *p, const float *g, size_t n, st_sgd8_args a)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = __fsub_rn(p[i], __fmul_rn(a.lr, sgd_grad(g[i], p[i], a)));
}

/* codes of x[i] by the bucket table (lut) and by the binary search (search),
 * for the tests: one thread block builds both from map */
__global__ void q8_codes_kernel(uint8_t *lut, uint8_t *search, const float *x, size_t n,
				const float *map)
{
	__shared__ q8_lut_smem s;
	q8_load_lut(&s, map);
	for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
		lut[i] = q8_lut_code(&s, x[i]);
		search[i] = q8_code(s.m.thr, x[i]);
	}
}

/* ---- host launchers ------------------------------------------------------------------- */

/* threads for a quantization block: whole warps, at most Q8_THREADS */
static int q8_threads(int block)
{
	return block >= Q8_THREADS ? Q8_THREADS : (block + 31) / 32 * 32;
}

extern "C" cudaError_t cuda_adamw8_step_general(float *p, uint8_t *m_codes, uint8_t *v_codes,
						 float *m_absmax, float *v_absmax, const float *g,
						 size_t n, const struct st_adamw8_args *a,
						 cudaStream_t stream)
{
	if (n == 0)
		return cudaSuccess;
	const size_t nblocks = (n + (size_t)a->block - 1) / (size_t)a->block;
	const size_t smem = a->block <= Q8_STASH ? 2 * (size_t)a->block * sizeof(float) : 0;
	if (nblocks > INT_MAX) /* past a grid's x extent (2^31 - 1): not cut short */
		return cudaErrorInvalidValue;
	adamw8_kernel<<<(unsigned)nblocks, q8_threads(a->block), smem, stream>>>(
		p, m_codes, v_codes, m_absmax, v_absmax, g, n, *a);
	return cudaGetLastError();
}

/* thread blocks of a persistent warp kernel: as many as fit at once. *cache
 * holds the kernel's count for the first device used (one GPU is what runs),
 * set only when the queries worked. */
static unsigned warp_grid(size_t nq, const void *kernel, int *cache)
{
	int fit = *cache;
	if (!fit) {
		int dev = 0, sms = 0, per_sm = 0;
		if (cudaGetDevice(&dev) == cudaSuccess &&
		    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
		    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * W8_WARPS, 0) ==
			    cudaSuccess &&
		    sms > 0 && per_sm > 0)
			fit = *cache = sms * per_sm;
		else
			fit = 132 * 4; /* an H100 at these kernels' occupancy */
	}
	const size_t want = (nq + W8_WARPS - 1) / W8_WARPS;
	return (unsigned)(want < (size_t)fit ? want : (size_t)fit);
}

/* the warp kernels' conditions: block 256, 16-byte aligned fp32 arrays,
 * 4-byte aligned codes */
static bool warp_path(int block, const void *f0, const void *f1, const void *c0, const void *c1)
{
	return block == 256 && ((uintptr_t)f0 | (uintptr_t)f1) % 16 == 0 &&
	       ((uintptr_t)c0 | (uintptr_t)c1) % 4 == 0;
}

extern "C" cudaError_t cuda_adamw8_step(float *p, uint8_t *m_codes, uint8_t *v_codes,
					 float *m_absmax, float *v_absmax, const float *g, size_t n,
					 const struct st_adamw8_args *a, cudaStream_t stream)
{
	if (n == 0)
		return cudaSuccess;
	if (!warp_path(a->block, p, g, m_codes, v_codes))
		return cuda_adamw8_step_general(p, m_codes, v_codes, m_absmax, v_absmax, g, n, a,
						stream);
	static int fit;
	adamw8_warp_kernel<<<warp_grid((n + 255) / 256, (const void *)adamw8_warp_kernel, &fit),
			     32 * W8_WARPS, 0, stream>>>(p, m_codes, v_codes, m_absmax, v_absmax, g,
							 n, *a);
	return cudaGetLastError();
}

extern "C" cudaError_t cuda_sgd8_step_general(float *p, uint8_t *mom_codes, float *mom_absmax,
					       const float *g, size_t n,
					       const struct st_sgd8_args *a, cudaStream_t stream)
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
	if (nblocks > INT_MAX) /* past a grid's x extent (2^31 - 1): not cut short */
		return cudaErrorInvalidValue;
	sgd8_kernel<<<(unsigned)nblocks, q8_threads(a->block), smem, stream>>>(p, mom_codes,
									     mom_absmax, g, n, *a);
	return cudaGetLastError();
}

extern "C" cudaError_t cuda_sgd8_step(float *p, uint8_t *mom_codes, float *mom_absmax,
				       const float *g, size_t n, const struct st_sgd8_args *a,
				       cudaStream_t stream)
{
	if (n == 0 || !mom_codes || !warp_path(a->block, p, g, mom_codes, mom_codes))
		return cuda_sgd8_step_general(p, mom_codes, mom_absmax, g, n, a, stream);
	static int fit;
	sgd8_warp_kernel<<<warp_grid((n + 255) / 256, (const void *)sgd8_warp_kernel, &fit),
			   32 * W8_WARPS, 0, stream>>>(p, mom_codes, mom_absmax, g, n, *a);
	return cudaGetLastError();
}

extern "C" cudaError_t cuda_q8_codes(uint8_t *lut, uint8_t *search, const float *x, size_t n,
				      const float *map, cudaStream_t stream)
{
	q8_codes_kernel<<<1, 256, 0, stream>>>(lut, search, x, n, map);
	return cudaGetLastError();
}
