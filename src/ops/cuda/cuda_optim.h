/* Launchers of the CUDA optimizer kernels (ops/cuda/adamw.cu, adam8.cu),
 * callable from C. Semantics and rounding are ops.h's adamw_step,
 * adamw8_step and sgd8_step, bit for bit: the CUDA results equal the CPU
 * backend's on the same inputs (tests/test_cuda.c checks it on a GPU).
 *
 * Pointers are device memory; the args struct is host memory, passed by
 * value to the kernel; its map pointers (8-bit) are device memory, 256
 * floats each. (optim_moment_map gives the host copies inside st_optim: the
 * CUDA backend's table, when it is built, must put device copies in the
 * args it passes on.) Each launcher enqueues on `stream` and returns the launch
 * error (cudaSuccess or the error of the launch itself; faults during the
 * run show at the next synchronization).
 *
 * Only for builds with nvcc (ST_HAVE_CUDA). Until the CUDA backend's table
 * exists (the CUDA backend issue), tests and benchmarks call these directly. */
#ifndef ST_CUDA_OPTIM_H
#define ST_CUDA_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t cuda_adamw_step(float *p, float *m, float *v, const float *g, size_t n,
			    const struct st_adamw_args *a, cudaStream_t stream);

/* Block 256 with 16-byte aligned p and g and 4-byte aligned codes takes a
 * warp-per-block kernel; any other block size or alignment the general
 * one-thread-block-per-block kernel. Both give the same bits. */
cudaError_t cuda_adamw8_step(float *p, uint8_t *m_codes, uint8_t *v_codes, float *m_absmax,
			     float *v_absmax, const float *g, size_t n,
			     const struct st_adamw8_args *a, cudaStream_t stream);
/* The general kernel at any block size (tests and bench/optim_cuda compare
 * the two paths). */
cudaError_t cuda_adamw8_step_general(float *p, uint8_t *m_codes, uint8_t *v_codes,
				     float *m_absmax, float *v_absmax, const float *g, size_t n,
				     const struct st_adamw8_args *a, cudaStream_t stream);

/* Block 256 with aligned pointers (as above) takes a warp-per-block kernel,
 * anything else the general one; the same bits. */
cudaError_t cuda_sgd8_step(float *p, uint8_t *mom_codes, float *mom_absmax, const float *g,
			   size_t n, const struct st_sgd8_args *a, cudaStream_t stream);
cudaError_t cuda_sgd8_step_general(float *p, uint8_t *mom_codes, float *mom_absmax,
				   const float *g, size_t n, const struct st_sgd8_args *a,
				   cudaStream_t stream);

/* For the tests: the code of each x[i] (quant_nearest's rule) by the bucket
 * table of the warp kernel (lut) and by the general kernel's binary search
 * (search); map is device memory. One thread block: small n only. */
cudaError_t cuda_q8_codes(uint8_t *lut, uint8_t *search, const float *x, size_t n,
			  const float *map, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
