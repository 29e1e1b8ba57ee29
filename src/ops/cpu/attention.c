/* Causal grouped-query attention, FlashAttention-style: the forward saves only
 * the log-sum-exp of each score row, and the backward recomputes the
 * probabilities P from q, k and lse instead of storing (B,H,T,T).
 *
 * Work is cut into blocks of ATT_BQ query rows of one (batch, head). For rows
 * [q0,q1) the causal prefix of keys is [0,q1): the scores S = scale Q K^T
 * (bq x q1) go to a per-thread scratch buffer, and the matmuls run through
 * dnnl_sgemm directly on the strided (B,T,H,hd) tensors (row stride H*hd for
 * q/out, Hkv*hd for k/v), so no head is ever copied out. Unlike GPU
 * FlashAttention the whole prefix row fits in scratch (64 x T floats, 64 KiB
 * at T = 256), so the softmax is exact in one pass, with no online rescaling.
 * exp is cpu_expf, which vectorizes; with glibc's scalar expf it was 16% of
 * the time.
 *
 * Threads: the loops over blocks are OpenMP-parallel and each dnnl_sgemm is
 * called from inside that parallel region, where oneDNN (OpenMP runtime)
 * runs it on the calling thread without a nested team. Checked on the 2-core
 * dev box (oneDNN 2.6): a 1024^3 sgemm took 15 ms from serial code with 2
 * threads, 26 ms with 1, and 26 ms when called by one thread of a 2-thread
 * region; no extra OS threads appear, even with OMP_MAX_ACTIVE_LEVELS=4.
 * Blocks are independent and each is computed by one thread with
 * single-threaded sgemm calls in a fixed order, so the result is the same for
 * any thread count (a top-level sgemm is not: its bits depend on the thread
 * count), and the schedule can be dynamic (causal blocks differ in cost, and
 * a shared VM steals time unevenly).
 *
 * Backward, per (batch, kv head): for each of its rep = H/Hkv query heads in
 * order, for each query block in order:
 *   P  = exp(S - lse)              (0 above the diagonal)
 *   dP = dO V^T,   D_i = <dO_i, O_i>,   dS = P (dP - D)
 *   dq  = scale dS K               (each block's rows written once)
 *   dk += scale dS^T Q,   dv += P^T dO   (over the causal prefix)
 * One thread owns a kv head's dk/dv, so the query heads that share it (GQA)
 * add into it in a fixed order, with no atomics and no scratch. The price is
 * parallelism B*Hkv instead of B*H: cores beyond B*Hkv idle in the backward.
 * Per-query-head partials reduced in head order were tried first; their
 * per-call 2*(B,H,T,hd) allocation (page faults) made the backward 20-40%
 * slower at B=8,T=256,H=8,Hkv=2 on the 2-core box. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/cpu_kernels.h"
#include "util/check.h"

/* Query rows per block. S is 64 x T floats (512 KiB at T = 2K, inside a
 * 1 MiB L2). At B=8,T=256,H=8,hd=64 on the dev box 32 and 64 were equal
 * within noise and 128 was 20% slower (more work above the diagonal). */
#define ATT_BQ 64

static float *att_scratch(size_t floats)
{
	float *p = st_aligned_alloc(floats * sizeof(float));
	if (!p)
		abort(); /* kernels have no error path; st_aligned_alloc reported it */
	return p;
}

/* Scratch row stride for score rows: T rounded up to 16 floats (64 bytes). */
static int att_ld(int t)
{
	return (t + 15) & ~15;
}

/* The forward for queries at positions q_off .. q_off+tq-1 of sequences
 * whose keys are rows 0 .. q_off+tq-1: training's pass (q_off 0, tq = T)
 * and a decoder's step over a key/value cache (B = 1). q/out rows are tq
 * per sequence, k/v rows q_off + tq; lse (B,H,tq) may be NULL. */
static void att_forward(float *out, float *lse, const float *q, const float *k, const float *v,
			int b, int tq, int q_off, int h, int hkv, int hd)
{
	const int tk = q_off + tq, rep = h / hkv, nqb = (tq + ATT_BQ - 1) / ATT_BQ;
	const int qs = h * hd, ks = hkv * hd, lds = att_ld(tk);
	const float scale = 1.0f / sqrtf((float)hd);
	const int items = b * h * nqb;
#pragma omp parallel
	{
		/* a block's score rows (a decoder's one new token needs one) */
		float *s = att_scratch((size_t)(tq < ATT_BQ ? tq : ATT_BQ) * lds);
#pragma omp for schedule(dynamic)
		for (int it = 0; it < items; it++) {
			int qb = it % nqb, bh = it / nqb, hh = bh % h, bb = bh / h, g = hh / rep;
			int q0 = qb * ATT_BQ, q1 = q0 + ATT_BQ < tq ? q0 + ATT_BQ : tq;
			int bq = q1 - q0, nk = q_off + q1;
			const float *Q = q + ((size_t)(bb * tq + q0) * h + hh) * hd;
			const float *K = k + ((size_t)bb * tk * hkv + g) * hd;
			const float *V = v + ((size_t)bb * tk * hkv + g) * hd;
			float *O = out + ((size_t)(bb * tq + q0) * h + hh) * hd;
			float *L = lse ? lse + ((size_t)bb * h + hh) * tq + q0 : NULL;

			cpu_matmul(s, Q, K, bq, nk, hd, 0, 1, scale, 0.0f, qs, ks, lds);
			for (int r = 0; r < bq; r++) {
				float *row = s + (size_t)r * lds;
				int nv = q_off + q0 + r + 1; /* keys 0..q_off+q0+r are visible */
				float m = -INFINITY;
#pragma omp simd reduction(max : m)
				for (int j = 0; j < nv; j++)
					m = row[j] > m ? row[j] : m;
				float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
				for (int j = 0; j < nv; j++) {
					float e = cpu_expf(row[j] - m);
					row[j] = e;
					sum += e;
				}
				float inv = 1.0f / sum;
				for (int j = 0; j < nv; j++)
					row[j] *= inv;
				for (int j = nv; j < nk; j++)
					row[j] = 0.0f;
				if (L)
					L[r] = m + logf(sum);
			}
			cpu_matmul(O, s, V, bq, hd, nk, 0, 0, 1.0f, 0.0f, lds, ks, qs);
		}
		free(s);
	}
}

void cpu_attention_forward(float *out, float *lse, const float *q, const float *k,
			   const float *v, int b, int t, int h, int hkv, int hd)
{
	att_forward(out, lse, q, k, v, b, t, 0, h, hkv, hd);
}

void cpu_attention_cached(float *out, const float *q, const float *k, const float *v, int n,
			  int p0, int h, int hkv, int hd)
{
	att_forward(out, NULL, q, k, v, 1, n, p0, h, hkv, hd);
}

void cpu_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
			    const float *k, const float *v, const float *out, const float *lse,
			    int b, int t, int h, int hkv, int hd)
{
	const int rep = h / hkv, nqb = (t + ATT_BQ - 1) / ATT_BQ;
	const int qs = h * hd, ks = hkv * hd, lds = att_ld(t);
	const float scale = 1.0f / sqrtf((float)hd);
	const int items = b * hkv;
#pragma omp parallel
	{
		float *p = att_scratch((size_t)ATT_BQ * lds);
		float *ds = att_scratch((size_t)ATT_BQ * lds);
#pragma omp for schedule(dynamic)
		for (int it = 0; it < items; it++) {
			int g = it % hkv, bb = it / hkv;
			size_t kvoff = ((size_t)bb * t * hkv + g) * hd;
			const float *K = k + kvoff, *V = v + kvoff;
			float *DK = dk + kvoff, *DV = dv + kvoff;
			for (int r = 0; r < t; r++) {
				memset(DK + (size_t)r * ks, 0, (size_t)hd * sizeof(float));
				memset(DV + (size_t)r * ks, 0, (size_t)hd * sizeof(float));
			}
			for (int hh = g * rep; hh < (g + 1) * rep; hh++)
				for (int qb = 0; qb < nqb; qb++) {
					int q0 = qb * ATT_BQ, q1 = q0 + ATT_BQ < t ? q0 + ATT_BQ : t;
					int bq = q1 - q0, nk = q1;
					size_t off = ((size_t)(bb * t + q0) * h + hh) * hd;
					const float *Q = q + off, *O = out + off, *dO = dout + off;
					const float *L = lse + ((size_t)bb * h + hh) * t + q0;

					cpu_matmul(p, Q, K, bq, nk, hd, 0, 1, scale, 0.0f, qs, ks, lds);
					cpu_matmul(ds, dO, V, bq, nk, hd, 0, 1, 1.0f, 0.0f, qs, ks, lds);
					for (int r = 0; r < bq; r++) {
						float *restrict prow = p + (size_t)r * lds;
						float *restrict drow = ds + (size_t)r * lds;
						const float *dOr = dO + (size_t)r * qs, *Or = O + (size_t)r * qs;
						int nv = q0 + r + 1;
						float D = 0.0f;
#pragma omp simd reduction(+ : D)
						for (int d = 0; d < hd; d++)
							D += dOr[d] * Or[d];
						float l = L[r];
						for (int j = 0; j < nv; j++) {
							float pj = cpu_expf(prow[j] - l);
							prow[j] = pj;
							drow[j] = pj * (drow[j] - D);
						}
						for (int j = nv; j < nk; j++) {
							prow[j] = 0.0f;
							drow[j] = 0.0f;
						}
					}
					cpu_matmul(dq + off, ds, K, bq, hd, nk, 0, 0, scale, 0.0f, lds, ks,
						   qs);
					cpu_matmul(DK, ds, Q, nk, hd, bq, 1, 0, scale, 1.0f, lds, qs, ks);
					cpu_matmul(DV, p, dO, nk, hd, bq, 1, 0, 1.0f, 1.0f, lds, qs, ks);
				}
		}
		free(p);
		free(ds);
	}
}
