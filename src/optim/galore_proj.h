/* GaLore projector (Zhao et al., arXiv 2403.03507): the rank-r basis onto
 * which a gradient matrix is projected before the optimizer sees it.
 *
 * Conventions (row-major fp32, G is m x n, 1 <= r <= min(m, n)):
 *   m >= n, "right" side: P is r x n, its rows are the top-r right singular
 *           vectors of G (the first r rows of V^T); R = G P^T is m x r.
 *   m <  n, "left" side:  P is m x r, its columns are the top-r left singular
 *           vectors of G (the first r columns of U); R = P^T G is r x n.
 * Either way the vectors live in the space of the smaller dimension.
 *
 * Signs. A singular vector is defined up to sign; each is fixed so that its
 * dot product with the same vector of P_prev is >= 0 when P_prev is given
 * (so the projected moments keep their meaning across refreshes), otherwise
 * so that its component of largest magnitude (the first such) is positive.
 *
 * Methods.
 *   GALORE_PROJ_SVD: exact, through LAPACK: a Householder QR of the long
 *     dimension, then divide-and-conquer SVD (sgesdd) of the k x k triangle
 *     (k = min(m, n)); only the short-side vectors are ever formed.
 *   GALORE_PROJ_RANDOMIZED: subspace iteration on a block of
 *     l = r + p vectors, p = GALORE_PROJ_OVERSAMPLE(r) = max(r/2, 16), then
 *     Rayleigh-Ritz (the SVD of an l x l triangle) picks the top r (Halko,
 *     Martinsson, Tropp, arXiv 0909.4061). Cold start: random vectors from
 *     the counter-based RNG (seed, GALORE_PROJ_RNG_STREAM) and
 *     q = GALORE_PROJ_POWER_ITERS = 3 iterations (7 products with G); warm
 *     start (P_prev given): P_prev's r vectors plus p random ones and
 *     q_w = GALORE_PROJ_WARM_ITERS = 2 iterations (5 products). Where
 *     r + p >= k the exact method runs instead. galore_proj.c has the
 *     measurements behind these numbers.
 *
 * Accuracy. What a method can resolve is the gap between the r-th and the
 * (r+1)-th singular value: the r-dimensional subspace is well defined only when
 * s_r - s_{r+1} is well above fp32 rounding of G (~1e-7 * s_1), and the
 * randomized error shrinks per product by about s_{l+1} / s_r. With no gap
 * (s_r ~ s_{r+1}) neither method pins down the last vectors, but both capture
 * the same energy; tests/test_galore_proj.c states the bounds per spectrum.
 *
 * Threads and determinism. The BLAS/LAPACK calls run on OpenBLAS's threads:
 * OpenMP's, with the OpenMP build the Makefile links where installed (its
 * own pthreads otherwise, OPENBLAS_NUM_THREADS). For a given machine,
 * thread count, inputs and seed, P is bit-identical from call to call; a
 * different thread count may change the last bits. */
#ifndef ST_GALORE_PROJ_H
#define ST_GALORE_PROJ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum galore_proj_method { GALORE_PROJ_SVD, GALORE_PROJ_RANDOMIZED };

/* Randomized method's parameters (the justification is in galore_proj.c). */
#define GALORE_PROJ_OVERSAMPLE(r) ((r) / 2 > 16 ? (r) / 2 : 16) /* p: extra vectors */
#define GALORE_PROJ_POWER_ITERS 3                              /* q, cold start */
#define GALORE_PROJ_WARM_ITERS 2                               /* q_w, from P_prev */
#define GALORE_PROJ_RNG_STREAM 0x6a1046e5ULL                   /* stream of the RNG */

/* 1 when G (m x n) is projected on the right (m >= n), 0 on the left. */
int galore_proj_side_right(int m, int n);

/* Bytes of workspace galore_projector needs for these sizes and method; 0
 * when the sizes are invalid. No alignment beyond malloc's is needed. */
size_t galore_proj_work_bytes(int m, int n, int r, enum galore_proj_method meth);

/* Compute the rank-r projector of G into P (shapes in the file comment).
 *   P_prev: the previous projector of the same shape, or NULL. It sets the
 *           signs and, for GALORE_PROJ_RANDOMIZED, warm-starts the iteration.
 *           P == P_prev (refresh in place) is allowed; other overlaps are not.
 *   seed:   names the random start of GALORE_PROJ_RANDOMIZED (unused by SVD).
 *   work:   galore_proj_work_bytes(m, n, r, meth) bytes, or NULL to have this
 *           call allocate and free them (convenient, but not for hot loops).
 * G is not modified. Returns ST_OK, or ST_FAIL after reporting bad sizes, a
 * non-finite G, a failed allocation or a LAPACK error. */
int galore_projector(float *P /* (r,n) right or (m,r) left */, const float *G /* (m,n) */,
		     int m, int n, int r, enum galore_proj_method meth,
		     const float *P_prev /* like P, or NULL */, uint64_t seed, void *work);

#ifdef __cplusplus
}
#endif

#endif
