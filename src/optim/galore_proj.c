/* The GaLore projector; see galore_proj.h.
 *
 * Both methods answer one question. Let k = min(m, n) and L = max(m, n); the
 * wanted vectors live in R^k. Write A for the k x L matrix whose rows index
 * the short side (A = G^T on the right side, G on the left); then P's vectors
 * are the top-r left singular vectors of A. Vector blocks are kept row-major
 * "one vector per row", which is LAPACK's column-major "one vector per
 * column", so QR and SVD work on them in place and cblas_sgemm (row-major)
 * multiplies them by G without any copy of G.
 *
 * Exact: T = A^T (L x k column-major: a transposed copy of G on the right
 * side, a plain copy on the left) is reduced by Householder QR, T = Q R; the
 * wanted vectors are then the right singular vectors of the k x k triangle R,
 * taken from sgesdd of R^T. Reducing first keeps the SVD to k x k and never
 * forms the long-side vectors. Measured on 2 cores (OpenBLAS 0.3.21, Zen):
 * 1376x512 0.08 s vs 0.11-0.34 s for sgesdd on G ('S' / 'O'), 2048x768
 * 0.13-0.15 s vs 0.27-0.70 s; sgesvd with one side of vectors is slower
 * still (its bidiagonal QR iteration: 4.2 s at 2048x768). LQ of G in place
 * (sgelqf) would skip the transpose but is 3-5x slower than transpose + QR.
 *
 * Randomized: subspace iteration on l = r + p vectors, Rayleigh-Ritz at the
 * end (Halko, Martinsson, Tropp, arXiv 0909.4061, algorithms 4.4 and 5.1,
 * started on the short side):
 *   X (l x k): uniform random rows (cold), or P_prev's r rows + random (warm)
 *   q times:   Z = X A (l x L), Z <- basis(Z); X = Z A^T, X <- basis(X)
 *   X <- orth(X) (Householder QR; Q = X^T, orthonormal columns)
 *   Z = X A = Q^T A (l x L); Z^T = Q_z R (Householder QR, only R kept)
 *   Q^T A = R^T Q_z^T, so its top-r left singular vectors are R^T's: U_r
 *   P's vectors: U_r^T X (r x k), the Ritz vectors.
 * Every product is followed by a change of basis, or the columns would all
 * turn towards the top singular vector and the rest drown in fp32 rounding.
 * The inner bases come from LU with partial pivoting (fbpca's choice): they
 * span the same space and are well conditioned, at 1/4-1/6 of the time of a
 * Householder QR with Q formed (0.06 s vs 0.27 s for 5461x768, 1 thread);
 * only the last X must be orthonormal. Before this, QR was half the time.
 *
 * Parameters (galore_proj.h). After q iterations the block's error against
 * the top-r subspace is about (s_{l+1} / s_r)^(2q), so oversampling and
 * iterating both pay when the spectrum decays slowly. Measured at 512x1376,
 * r = 128 on the spectra of tests/test_galore_proj.c (angle to the exact
 * subspace, fast / gapped, in rad; time on 1 thread; exact SVD 0.07 s):
 *   p = r/4, q = 3: 1e-2  / 7e-3   0.041 s
 *   p = r/2, q = 2: 2e-3  / 2e-2   0.033 s
 *   p = r/2, q = 3: 1e-4  / 2e-3   0.042 s   <- chosen
 *   p = r/4, q = 4: 2e-3  / 1e-3   0.045 s
 *   p = r,   q = 2: 4e-5  / 7e-3   0.051 s
 * A cold start costs 2q + 1 = 7 products with G of 2 k L l flops each, with
 * l = 1.5 r: below the exact method's ~2 k^2 L + ~20 k^3 when r <= k/4,
 * about equal at r = k/3 (768x2048, r = 256). Warm, after G's subspace moved
 * by 0.19 rad: q_w = 1 gives 3e-3 / 9e-3 rad, q_w = 2 9e-5 / 9e-4 rad; q_w = 2
 * (5 products) keeps a margin for the larger moves of 200 steps of training.
 * When l would reach k the block spans everything and the exact method runs
 * instead (it is cheaper and gives the same subspace). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/galore_proj.h"
#include "util/check.h"
#include "util/rng.h"

/* LAPACK through OpenBLAS (Fortran interface, 32-bit integers). gfortran
 * passes the length of each character argument as a trailing size_t. */
void sgeqrf_(const int *m, const int *n, float *a, const int *lda, float *tau, float *work,
	     const int *lwork, int *info);
void sorgqr_(const int *m, const int *n, const int *k, float *a, const int *lda,
	     const float *tau, float *work, const int *lwork, int *info);
void sgetrf_(const int *m, const int *n, float *a, const int *lda, int *ipiv, int *info);
void slaswp_(const int *n, float *a, const int *lda, const int *k1, const int *k2, const int *ipiv,
	     const int *incx);
void sgesdd_(const char *jobz, const int *m, const int *n, float *a, const int *lda, float *s,
	     float *u, const int *ldu, float *vt, const int *ldvt, float *work, const int *lwork,
	     int *iwork, int *info, size_t jobz_len);

int galore_proj_side_right(int m, int n)
{
	return m >= n;
}

/* ---- workspace ------------------------------------------------------------------ */

/* Floats of LAPACK work asked for by a query call (lwork = -1: no work done). */
static int query_qr(int rows, int cols, int want_q)
{
	float q1 = 0, q2 = 0, dummy = 0;
	int lw = -1, info = 0;
	sgeqrf_(&rows, &cols, &dummy, &rows, &dummy, &q1, &lw, &info);
	if (want_q)
		sorgqr_(&rows, &cols, &cols, &dummy, &rows, &dummy, &q2, &lw, &info);
	return (int)(q1 > q2 ? q1 : q2);
}

static int query_svd(int kk)
{
	float q = 0, dummy = 0;
	int lw = -1, info = 0, one = 1, idummy = 0;
	sgesdd_("O", &kk, &kk, &dummy, &kk, &dummy, &dummy, &one, &dummy, &kk, &q, &lw, &idummy,
		&info, 1);
	return (int)q;
}

/* Byte offsets of the pieces of the caller's workspace. */
struct layout {
	int exact;              /* the exact method runs (asked for, or l would be k) */
	int k, L, l;            /* short side, long side, block width (exact: l = k) */
	size_t x, z;            /* randomized: X (l x k), Z (l x L); exact: T (L x k) in z */
	size_t c, vt, s, tau;   /* the small SVD: C (l x l), VT (l x l), S (l); QR's tau (l) */
	size_t w;               /* the r result vectors (r x k); exact: inside c */
	size_t iwork, lwork;    /* sgesdd's integers (8 l); LAPACK work (nlwork floats) */
	int nlwork;
	size_t total;
};

static size_t up64(size_t b)
{
	return (b + 63) & ~(size_t)63;
}

static int sizes_ok(int m, int n, int r)
{
	return m >= 1 && n >= 1 && r >= 1 && r <= (m < n ? m : n);
}

static struct layout plan(int m, int n, int r, enum galore_proj_method meth)
{
	struct layout p = {0};
	p.k = m < n ? m : n;
	p.L = m < n ? n : m;
	const int k = p.k, L = p.L;
	/* A block as wide as the short side spans all of it: the iteration would
	 * be wasted work before what is then an exact SVD, so do that directly. */
	const int exact = meth == GALORE_PROJ_SVD || r + GALORE_PROJ_OVERSAMPLE(r) >= k;
	const int l = exact ? k : r + GALORE_PROJ_OVERSAMPLE(r);
	p.exact = exact;
	p.l = l;
	int lw = query_svd(l);
	if (exact) {
		const int q = query_qr(L, k, 0);
		lw = q > lw ? q : lw;
	} else {
		const int q1 = query_qr(k, l, 1), q2 = query_qr(L, l, 1);
		lw = q1 > lw ? q1 : lw;
		lw = q2 > lw ? q2 : lw;
	}
	p.nlwork = lw + 1;
	size_t at = 0;
#define TAKE(field, bytes) (p.field = at, at += up64(bytes))
	if (!exact)
		TAKE(x, (size_t)l * k * sizeof(float));
	TAKE(z, (size_t)l * L * sizeof(float));
	TAKE(c, (size_t)l * l * sizeof(float));
	TAKE(vt, (size_t)l * l * sizeof(float));
	TAKE(s, (size_t)l * sizeof(float));
	TAKE(tau, (size_t)l * sizeof(float));
	if (exact)
		p.w = p.c; /* the first r columns of U, in place */
	else
		TAKE(w, (size_t)r * k * sizeof(float));
	TAKE(iwork, (size_t)8 * l * sizeof(int));
	TAKE(lwork, (size_t)p.nlwork * sizeof(float));
#undef TAKE
	p.total = at;
	return p;
}

size_t galore_proj_work_bytes(int m, int n, int r, enum galore_proj_method meth)
{
	if (!sizes_ok(m, n, r) || (meth != GALORE_PROJ_SVD && meth != GALORE_PROJ_RANDOMIZED))
		return 0;
	return plan(m, n, r, meth).total;
}

/* ---- building blocks -------------------------------------------------------------- */

/* Householder QR of the column-major rows x cols block a (rows >= cols); with
 * want_q the block is replaced by Q's orthonormal columns, else R sits in its
 * upper triangle. */
static int qr(float *a, int rows, int cols, int want_q, float *tau, float *work, int lwork)
{
	int info = 0;
	sgeqrf_(&rows, &cols, a, &rows, tau, work, &lwork, &info);
	if (info == 0 && want_q)
		sorgqr_(&rows, &cols, &cols, a, &rows, tau, work, &lwork, &info);
	ST_CHECK(info == 0, "report this as a bug",
		 "GaLore projector: QR of a %dx%d block failed (LAPACK info %d)", rows, cols, info);
	return ST_OK;
}

/* Replace the column-major rows x cols block a (rows >= cols) by another
 * basis of its column span, P L from a = P L U (LU with partial pivoting):
 * unit lower trapezoidal, entries <= 1 in magnitude, so well conditioned,
 * at a quarter of the cost of a Householder QR with Q formed (fbpca's choice
 * for the inner steps of randomized SVD). A singular U (info > 0: a rank-
 * deficient block, e.g. G = 0) still leaves a valid basis. */
static int lu_basis(float *a, int rows, int cols, int *ipiv)
{
	int info = 0, one = 1, back = -1;
	sgetrf_(&rows, &cols, a, &rows, ipiv, &info);
	ST_CHECK(info >= 0, "report this as a bug",
		 "GaLore projector: LU of a %dx%d block failed (LAPACK info %d)", rows, cols, info);
	for (int j = 0; j < cols; j++) { /* keep L: unit diagonal, zero above it */
		float *col = a + (size_t)j * rows;
		memset(col, 0, (size_t)j * sizeof *col);
		col[j] = 1.0f;
	}
	slaswp_(&cols, a, &rows, &one, &cols, ipiv, &back); /* undo the row swaps: P L */
	return ST_OK;
}

/* The right singular vectors of the kk x kk upper triangle R (column-major,
 * leading dimension ld), as the columns of U of R^T: written to c (kk x kk,
 * column-major), so vector j is c[j*kk .. j*kk + kk), by decreasing singular
 * value. vt, s, iwork, work: sgesdd's scratch. */
static int triangle_svd(float *c, const float *R, int ld, int kk, float *vt, float *s,
			int *iwork, float *work, int lwork)
{
	for (int j = 0; j < kk; j++) /* c = R^T: c[i + j kk] = R[j + i ld] for i >= j */
		for (int i = 0; i < kk; i++)
			c[i + (size_t)j * kk] = i >= j ? R[j + (size_t)i * ld] : 0.0f;
	int info = 0, one = 1;
	float udummy = 0;
	sgesdd_("O", &kk, &kk, c, &kk, s, &udummy, &one, vt, &kk, work, &lwork, iwork, &info, 1);
	ST_CHECK(info == 0, "report this as a bug (the gradient was checked to be finite)",
		 "GaLore projector: SVD of a %dx%d triangle failed (LAPACK info %d)", kk, kk, info);
	return ST_OK;
}

/* dst (cols x rows, row-major) = src^T, src rows x cols row-major; in tiles so
 * that both sides stay in cache. */
static void transpose(float *dst, const float *src, int rows, int cols)
{
	enum { TILE = 32 };
	for (int i0 = 0; i0 < rows; i0 += TILE)
		for (int j0 = 0; j0 < cols; j0 += TILE) {
			const int i1 = i0 + TILE < rows ? i0 + TILE : rows;
			const int j1 = j0 + TILE < cols ? j0 + TILE : cols;
			for (int j = j0; j < j1; j++)
				for (int i = i0; i < i1; i++)
					dst[(size_t)j * rows + i] = src[(size_t)i * cols + j];
		}
}

/* Z (nv x L) = X (nv x k) A, with A = G^T (right side) or G (left). */
static void mul_a(float *Z, const float *X, const float *G, int m, int n, int nv)
{
	const int right = galore_proj_side_right(m, n), k = right ? n : m, L = right ? m : n;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, right ? CblasTrans : CblasNoTrans, nv, L, k, 1.0f,
		    X, k, G, n, 0.0f, Z, L);
}

/* X (nv x k) = Z (nv x L) A^T. */
static void mul_at(float *X, const float *Z, const float *G, int m, int n, int nv)
{
	const int right = galore_proj_side_right(m, n), k = right ? n : m, L = right ? m : n;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, right ? CblasNoTrans : CblasTrans, nv, k, L, 1.0f,
		    Z, L, G, n, 0.0f, X, k);
}

/* ---- the two methods -------------------------------------------------------------- */

static int vectors_exact(const float *G, int m, int n, char *w, const struct layout *p)
{
	const int k = p->k, L = p->L;
	float *T = (float *)(w + p->z);
	if (galore_proj_side_right(m, n))
		transpose(T, G, m, n); /* column-major m x n: G itself */
	else
		memcpy(T, G, (size_t)m * n * sizeof *T); /* column-major n x m: G^T */
	ST_TRY(qr(T, L, k, 0, (float *)(w + p->tau), (float *)(w + p->lwork), p->nlwork));
	return triangle_svd((float *)(w + p->c), T, L, k, (float *)(w + p->vt), (float *)(w + p->s),
			    (int *)(w + p->iwork), (float *)(w + p->lwork), p->nlwork);
}

static int vectors_randomized(const float *G, int m, int n, int r, const float *P_prev,
			      uint64_t seed, char *w, const struct layout *p)
{
	const int k = p->k, L = p->L, l = p->l, right = galore_proj_side_right(m, n);
	float *X = (float *)(w + p->x), *Z = (float *)(w + p->z), *tau = (float *)(w + p->tau),
	      *lwork = (float *)(w + p->lwork), *C = (float *)(w + p->c);
	int *ipiv = (int *)(w + p->iwork); /* >= l ints, free until the SVD */
	int iters = GALORE_PROJ_POWER_ITERS, first = 0;
	if (P_prev) { /* rows 0..r-1 of X: the previous vectors */
		if (right)
			memcpy(X, P_prev, (size_t)r * k * sizeof *X);
		else
			transpose(X, P_prev, k, r);
		first = r;
		iters = GALORE_PROJ_WARM_ITERS;
	}
	/* The start needs no normalization: Gaussian-like, or orthonormal rows
	 * plus random ones, it is well conditioned. Uniform [-1, 1) entries serve
	 * as well as Gaussian ones for a range finder and cost one hash each. */
	struct st_rng rng;
	rng_seed(&rng, seed, GALORE_PROJ_RNG_STREAM);
	for (size_t i = (size_t)first * k; i < (size_t)l * k; i++)
		X[i] = (float)(2.0 * rng_uniform(&rng) - 1.0);
	/* Inner steps only need some well-conditioned basis (LU); the last X
	 * must be orthonormal for the Rayleigh-Ritz step (QR). */
	for (int it = 0; it < iters; it++) {
		mul_a(Z, X, G, m, n, l);
		ST_TRY(lu_basis(Z, L, l, ipiv));
		mul_at(X, Z, G, m, n, l);
		if (it < iters - 1)
			ST_TRY(lu_basis(X, k, l, ipiv));
	}
	ST_TRY(qr(X, k, l, 1, tau, lwork, p->nlwork));
	mul_a(Z, X, G, m, n, l); /* Q^T A */
	ST_TRY(qr(Z, L, l, 0, tau, lwork, p->nlwork));
	ST_TRY(triangle_svd(C, Z, L, l, (float *)(w + p->vt), (float *)(w + p->s),
			    (int *)(w + p->iwork), lwork, p->nlwork));
	/* W (r x k) = U_r^T X: C's first r columns are the rows of U_r^T */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, k, l, 1.0f, C, l, X, k, 0.0f,
		    (float *)(w + p->w), k);
	return ST_OK;
}

/* Any Inf or NaN in x (n): an all-ones exponent. Integer max so it vectorizes. */
static int all_finite(const float *x, size_t n)
{
	uint32_t worst = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t b;
		memcpy(&b, &x[i], sizeof b);
		b &= 0x7f800000u;
		worst = b > worst ? b : worst;
	}
	return worst != 0x7f800000u;
}

/* Write the r vectors of W (r x k, one per row) to P with the signs of the
 * header comment. Vector j of P (and of P_prev) is row j on the right side,
 * column j on the left; P may be P_prev, since vector j of P_prev is read
 * before vector j of P is written and nothing else of it afterwards. */
static void write_signed(float *P, const float *W, int m, int n, int r, const float *P_prev)
{
	const int right = galore_proj_side_right(m, n), k = right ? n : m;
	const size_t stride = right ? 1 : (size_t)r; /* between elements of a vector */
	for (int j = 0; j < r; j++) {
		const float *v = W + (size_t)j * k;
		float *out = right ? P + (size_t)j * k : P + j;
		double key = 0;
		if (P_prev) {
			const float *old = right ? P_prev + (size_t)j * k : P_prev + j;
			for (int i = 0; i < k; i++)
				key += (double)v[i] * old[i * stride];
		} else {
			int big = 0;
			for (int i = 1; i < k; i++)
				if (fabsf(v[i]) > fabsf(v[big]))
					big = i;
			key = v[big];
		}
		const float sign = key < 0 ? -1.0f : 1.0f;
		for (int i = 0; i < k; i++)
			out[i * stride] = sign * v[i];
	}
}

static int projector_in(float *P, const float *G, int m, int n, int r, const float *P_prev,
			uint64_t seed, char *w, const struct layout *p)
{
	if (p->exact)
		ST_TRY(vectors_exact(G, m, n, w, p));
	else
		ST_TRY(vectors_randomized(G, m, n, r, P_prev, seed, w, p));
	write_signed(P, (const float *)(w + p->w), m, n, r, P_prev);
	return ST_OK;
}

int galore_projector(float *P, const float *G, int m, int n, int r, enum galore_proj_method meth,
		     const float *P_prev, uint64_t seed, void *work)
{
	ST_CHECK(sizes_ok(m, n, r), "the rank must satisfy 1 <= r <= min(m, n)",
		 "GaLore projector: rank %d for a %dx%d matrix", r, m, n);
	ST_CHECK(meth == GALORE_PROJ_SVD || meth == GALORE_PROJ_RANDOMIZED, "report this as a bug",
		 "GaLore projector: unknown method %d", (int)meth);
	ST_CHECK(all_finite(G, (size_t)m * n), "lower the learning rate or enable gradient clipping",
		 "GaLore projector: the %dx%d gradient holds Inf or NaN", m, n);
	const struct layout p = plan(m, n, r, meth);
	if (work)
		return projector_in(P, G, m, n, r, P_prev, seed, work, &p);
	char *own = st_malloc(p.total);
	if (!own)
		return ST_FAIL;
	const int rc = projector_in(P, G, m, n, r, P_prev, seed, own, &p);
	free(own);
	return rc;
}
