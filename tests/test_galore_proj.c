/* GaLore projector tests (optim/galore_proj.c).
 *
 * References are computed here in float64, independently of the code under
 * test: singular values from a cyclic Jacobi eigensolver of G^T G written
 * below, and test matrices G = U diag(s) V^T built from known orthonormal U, V
 * (float64 Householder QR of Gaussian matrices, LAPACK dgeqrf/dorgqr), so the
 * true top-r subspace is known exactly.
 *
 * Subspace distance: the largest principal angle between two r-dimensional
 * subspaces with orthonormal bases A, B (rows), theta = arccos(smallest
 * singular value of A B^T). It is computed as arcsin ||A - (A B^T) B||_2,
 * which is the same angle but keeps its digits near 0 (1 - cos(1e-4) = 5e-9
 * is below the rounding of fp32 bases). With rb > ra rows in B it measures how
 * far span(A) sticks out of the larger span(B).
 *
 * What the bounds rest on (galore_proj.h): an r-dimensional singular subspace
 * is determined by G only as well as s_r - s_{r+1} is resolved. The test
 * spectra (r = 128):
 *   fast:   s_i = exp(-i/40). s_r / s_1 = 0.04, s_r / s_{r+1} = 1.025: the
 *           gap (1e-3 s_1) is 10^4 times fp32 rounding, the exact SVD finds
 *           the true subspace to 1e-5 rad; the randomized method's block of
 *           l = 192 converges by (s_{l+1} / s_r)^2 = 0.04 per iteration: ~1e-4
 *           rad measured, bound 1e-2.
 *   gapped: s_i = 1/i, halved after i = r (a factor-2 gap, as a gradient
 *           with r dominant directions): per iteration (0.5 r / (l+1))^2 =
 *           0.11, 2e-3 rad measured, bound 1e-2.
 *   slow:   s_i = 1/i, no gap: s_128 / s_129 = 1.008, so the 128th vector is
 *           nearly any mix of its neighbours and no method pins the r-space
 *           down (0.16-0.18 rad measured between randomized and exact). What
 *           still holds, and what GaLore needs, is the energy: ||R||_F^2
 *           within 1e-4 of the exact one (2e-6 measured), and the top r/2
 *           exact vectors (a gap s_64 / s_193 = 3) inside the randomized
 *           r-space to 1e-2 rad (2e-3 measured).
 * exp(-i/10) at r = 128 is not used: s_r = 2.8e-6 s_1 and the gap 2.7e-7 s_1
 * are at the level of fp32 rounding of G, the exact fp32 SVD itself is 0.8
 * rad away from the true subspace there, so a comparison would test noise. */
#include <cblas.h>
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optim/galore_proj.h"
#include "testutil.h"
#include "util/check.h"

/* LAPACK, float64, only to build orthonormal test bases. */
void dgeqrf_(const int *m, const int *n, double *a, const int *lda, double *tau, double *work,
	     const int *lwork, int *info);
void dorgqr_(const int *m, const int *n, const int *k, double *a, const int *lda,
	     const double *tau, double *work, const int *lwork, int *info);

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	cr_assert(p, "out of memory (%zu bytes)", n);
	return p;
}

static int imin(int a, int b)
{
	return a < b ? a : b;
}

/* ---- float64 references ------------------------------------------------------------- */

/* Eigenvalues of the symmetric n x n matrix a (destroyed), descending, by
 * cyclic Jacobi rotations until the off-diagonal part is negligible. */
static void jacobi_eigenvalues(double *ev, double *a, int n)
{
	for (int sweep = 0; sweep < 100; sweep++) {
		double off = 0, all = 0;
		for (int i = 0; i < n; i++)
			for (int j = 0; j < n; j++) {
				all += a[i * n + j] * a[i * n + j];
				off += i != j ? a[i * n + j] * a[i * n + j] : 0;
			}
		if (off <= 1e-30 * all)
			break;
		for (int p = 0; p < n - 1; p++)
			for (int q = p + 1; q < n; q++) {
				const double apq = a[p * n + q];
				if (apq == 0)
					continue;
				/* rotation zeroing a[p][q] (Golub & Van Loan 8.5.2) */
				const double tau = (a[q * n + q] - a[p * n + p]) / (2 * apq);
				const double t = (tau >= 0 ? 1 : -1) / (fabs(tau) + sqrt(1 + tau * tau));
				const double c = 1 / sqrt(1 + t * t), s = t * c;
				for (int k = 0; k < n; k++) { /* columns p, q */
					const double x = a[k * n + p], y = a[k * n + q];
					a[k * n + p] = c * x - s * y;
					a[k * n + q] = s * x + c * y;
				}
				for (int k = 0; k < n; k++) { /* rows p, q */
					const double x = a[p * n + k], y = a[q * n + k];
					a[p * n + k] = c * x - s * y;
					a[q * n + k] = s * x + c * y;
				}
			}
	}
	for (int i = 0; i < n; i++)
		ev[i] = a[i * n + i];
	for (int i = 1; i < n; i++) /* insertion sort, descending */
		for (int j = i; j > 0 && ev[j] > ev[j - 1]; j--) {
			const double t = ev[j];
			ev[j] = ev[j - 1];
			ev[j - 1] = t;
		}
}

/* Q (rows x cols, column-major, orthonormal columns) = the Q factor of the
 * Gaussian matrix N1 + delta N2, N1 and N2 drawn from two streams named by
 * seed. A small delta gives a basis close to that of delta = 0 (QR is
 * continuous there), which is how the warm-start test moves G. */
static void orthonormal(double *Q, int rows, int cols, uint64_t seed, double delta)
{
	uint64_t s1 = seed, s2 = seed ^ 0x5deece66dULL;
	for (size_t i = 0; i < (size_t)rows * cols; i++)
		Q[i] = tu_normal(&s1) + delta * tu_normal(&s2);
	int lw = -1, info = 0;
	double q = 0, *tau = xmalloc((size_t)cols * sizeof *tau);
	dgeqrf_(&rows, &cols, Q, &rows, tau, &q, &lw, &info);
	lw = (int)q;
	double *w = xmalloc((size_t)lw * sizeof *w);
	dgeqrf_(&rows, &cols, Q, &rows, tau, w, &lw, &info);
	cr_assert_eq(info, 0);
	dorgqr_(&rows, &cols, &cols, Q, &rows, tau, w, &lw, &info);
	cr_assert_eq(info, 0);
	free(w);
	free(tau);
}

/* G (m x n) = U diag(s) V^T with U, V from orthonormal(seed, delta); top
 * (r x k, one vector per row, k = min(m, n)) gets the true top-r vectors of
 * P's side: V's columns on the right side, U's on the left. */
static void make_g(float *G, double *top, int m, int n, int r, const double *sv, uint64_t seed,
		   double delta)
{
	const int k = imin(m, n);
	double *U = xmalloc((size_t)m * k * sizeof *U), *V = xmalloc((size_t)n * k * sizeof *V);
	double *Gd = xmalloc((size_t)m * n * sizeof *Gd);
	orthonormal(U, m, k, seed, delta);
	orthonormal(V, n, k, seed + 1, delta);
	for (int j = 0; j < k; j++) /* U <- U diag(s) */
		for (int i = 0; i < m; i++)
			U[i + (size_t)j * m] *= sv[j];
	/* column-major Gd (m x n) = U V^T, read row by row into G */
	cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0, U, m, V, n, 0.0, Gd, m);
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++)
			G[(size_t)i * n + j] = (float)Gd[i + (size_t)j * m];
	const int right = m >= n;
	for (int v = 0; v < r; v++)
		for (int i = 0; i < k; i++)
			top[(size_t)v * k + i] = right ? V[i + (size_t)v * n] : U[i + (size_t)v * m] / sv[v];
	free(U);
	free(V);
	free(Gd);
}

/* P's vectors as rows (r x k) in float64. */
static double *vectors_of(const float *P, int m, int n, int r)
{
	const int k = imin(m, n), right = m >= n;
	double *v = xmalloc((size_t)r * k * sizeof *v);
	for (int j = 0; j < r; j++)
		for (int i = 0; i < k; i++)
			v[(size_t)j * k + i] = right ? P[(size_t)j * k + i] : P[(size_t)i * r + j];
	return v;
}

/* Largest principal angle of span(A) (ra x k) from span(B) (rb x k), ra <= rb,
 * both with orthonormal rows: arcsin of the largest singular value of
 * D = A - (A B^T) B (see the file comment). */
static double max_angle(const double *A, int ra, const double *B, int rb, int k)
{
	double *M = xmalloc((size_t)ra * rb * sizeof *M), *D = xmalloc((size_t)ra * k * sizeof *D);
	double *DD = xmalloc((size_t)ra * ra * sizeof *DD), *ev = xmalloc((size_t)ra * sizeof *ev);
	cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ra, rb, k, 1.0, A, k, B, k, 0.0, M, rb);
	memcpy(D, A, (size_t)ra * k * sizeof *D);
	cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ra, k, rb, -1.0, M, rb, B, k, 1.0, D,
		    k);
	cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ra, ra, k, 1.0, D, k, D, k, 0.0, DD, ra);
	jacobi_eigenvalues(ev, DD, ra);
	const double s = sqrt(fmax(ev[0], 0.0));
	free(M);
	free(D);
	free(DD);
	free(ev);
	return asin(fmin(s, 1.0));
}

/* ||R||_F^2 of the projected gradient, in float64: sum over P's vectors v of
 * ||G v||^2 (right side) or ||v^T G||^2 (left). */
static double captured_energy(const float *G, const float *P, int m, int n, int r)
{
	const int right = m >= n, k = imin(m, n), L = right ? m : n;
	double *Gd = xmalloc((size_t)m * n * sizeof *Gd), *v = vectors_of(P, m, n, r);
	double *R = xmalloc((size_t)L * r * sizeof *R);
	for (size_t i = 0; i < (size_t)m * n; i++)
		Gd[i] = G[i];
	/* R^T (r x L) = V_rows (r x k) times G^T (right) or G (left) */
	cblas_dgemm(CblasRowMajor, CblasNoTrans, right ? CblasTrans : CblasNoTrans, r, L, k, 1.0, v,
		    k, Gd, n, 0.0, R, L);
	double e = 0;
	for (size_t i = 0; i < (size_t)L * r; i++)
		e += R[i] * R[i];
	free(Gd);
	free(v);
	free(R);
	return e;
}

/* max |P P^T - I| (right) or |P^T P - I| (left): the vectors' Gram matrix. */
static double orthonormality_error(const float *P, int m, int n, int r)
{
	const int k = imin(m, n);
	double *v = vectors_of(P, m, n, r), worst = 0;
	for (int a = 0; a < r; a++)
		for (int b = 0; b < r; b++) {
			double d = 0;
			for (int i = 0; i < k; i++)
				d += v[(size_t)a * k + i] * v[(size_t)b * k + i];
			d -= a == b;
			worst = fabs(d) > worst || isnan(d) ? fabs(d) : worst;
		}
	free(v);
	return worst;
}

static float *projector(const float *G, int m, int n, int r, enum galore_proj_method meth,
			const float *P_prev, uint64_t seed)
{
	float *P = xmalloc((size_t)r * imin(m, n) * sizeof *P);
	void *work = xmalloc(galore_proj_work_bytes(m, n, r, meth));
	cr_assert_eq(galore_projector(P, G, m, n, r, meth, P_prev, seed, work), ST_OK,
		     "projector %dx%d r=%d method %d failed", m, n, r, (int)meth);
	free(work);
	return P;
}

/* ---- 1. exact SVD against float64 ---------------------------------------------------- */

/* Orthonormal vectors, and ||R||_F^2 = the sum of the top-r eigenvalues of
 * G^T G (= s_i^2) from Jacobi in float64. Tolerances: 1e-5 for the Gram
 * matrix (fp32 vectors of length <= 64: rounding ~1e-7 per entry); 1e-5
 * relative for the energy (|R|^2 from fp32 vectors, error ~ 2 * 1e-6). */
Test(galore_proj, svd_orthonormal_and_energy)
{
	const int shapes[2][2] = {{64, 40}, {40, 64}};
	uint64_t seed = 11;
	for (int s = 0; s < 2; s++) {
		const int m = shapes[s][0], n = shapes[s][1], k = imin(m, n);
		float *G = xmalloc((size_t)m * n * sizeof *G);
		tu_fill_normal(G, (size_t)m * n, 0.02, &seed);
		/* eigenvalues of the k x k Gram matrix on P's side */
		double *gram = xmalloc((size_t)k * k * sizeof *gram), *ev = xmalloc(k * sizeof *ev);
		for (int a = 0; a < k; a++)
			for (int b = 0; b < k; b++) {
				double d = 0;
				for (int i = 0; i < (m >= n ? m : n); i++)
					d += m >= n ? (double)G[(size_t)i * n + a] * G[(size_t)i * n + b]
						    : (double)G[(size_t)a * n + i] * G[(size_t)b * n + i];
				gram[a * k + b] = d;
			}
		jacobi_eigenvalues(ev, gram, k);
		const int ranks[4] = {1, 7, 20, k};
		for (int t = 0; t < 4; t++) {
			const int r = ranks[t];
			float *P = projector(G, m, n, r, GALORE_PROJ_SVD, NULL, 1);
			double want = 0;
			for (int i = 0; i < r; i++)
				want += ev[i];
			const double got = captured_energy(G, P, m, n, r);
			const double orth = orthonormality_error(P, m, n, r);
			cr_expect(orth < 1e-5, "%dx%d r=%d: |P P^T - I| = %.2e", m, n, r, orth);
			cr_expect(fabs(got - want) <= 1e-5 * want,
				  "%dx%d r=%d: ||R||^2 %.9g, top-r sum of s^2 %.9g (rel %.2e)", m, n, r,
				  got, want, fabs(got - want) / want);
			free(P);
		}
		free(G);
		free(gram);
		free(ev);
	}
}

/* ---- 2. randomized against exact, on known spectra ----------------------------------- */

enum spectrum { FAST, GAPPED, SLOW };

static void fill_spectrum(double *sv, int k, int r, enum spectrum sp)
{
	for (int i = 0; i < k; i++) {
		const double x = i + 1;
		sv[i] = sp == FAST ? exp(-x / 40) : sp == GAPPED && i >= r ? 0.5 / x : 1 / x;
	}
}

/* Cold start against the exact SVD and the truth, then (fast and gapped) a
 * warm start after G's singular bases moved (delta = 0.1 in the Gaussians
 * behind U and V: the old subspace is ~0.2 rad from the new one), which must
 * meet the same bound and be closer to the new subspace than the old was. */
static void check_randomized(int m, int n, enum spectrum sp)
{
	const int r = 128, k = imin(m, n);
	const double bound = 1e-2;
	const char *name = sp == FAST ? "fast" : sp == GAPPED ? "gapped" : "slow";
	double *sv = xmalloc(k * sizeof *sv), *top = xmalloc((size_t)r * k * sizeof *top);
	float *G = xmalloc((size_t)m * n * sizeof *G);
	fill_spectrum(sv, k, r, sp);
	make_g(G, top, m, n, r, sv, 100 + sp, 0.0);

	float *Pe = projector(G, m, n, r, GALORE_PROJ_SVD, NULL, 1);
	float *Pr = projector(G, m, n, r, GALORE_PROJ_RANDOMIZED, NULL, 7);
	double *ve = vectors_of(Pe, m, n, r), *vr = vectors_of(Pr, m, n, r);
	const double orth = orthonormality_error(Pr, m, n, r);
	cr_expect(orth < 1e-5, "%dx%d %s: randomized |P P^T - I| = %.2e", m, n, name, orth);
	const double ee = captured_energy(G, Pe, m, n, r), er = captured_energy(G, Pr, m, n, r);
	cr_expect(er >= ee * (1 - 1e-4), "%dx%d %s: energy randomized %.9g vs exact %.9g", m, n,
		  name, er, ee);
	if (sp == SLOW) {
		const double half = max_angle(ve, r / 2, vr, r, k);
		cr_expect(half < bound, "%dx%d slow: top r/2 exact vectors %.2e rad outside", m, n,
			  half);
		cr_log_info("%dx%d slow: energy deficit %.1e, top r/2 %.1e rad, r-space %.1e rad",
			    m, n, 1 - er / ee, half, max_angle(vr, r, ve, r, k));
	} else {
		const double truth = max_angle(ve, r, top, r, k), a = max_angle(vr, r, ve, r, k);
		cr_expect(truth < 1e-3, "%dx%d %s: exact SVD %.2e rad from the truth", m, n, name,
			  truth);
		cr_expect(a < bound, "%dx%d %s: randomized %.2e rad from exact (bound %.0e)", m, n,
			  name, a, bound);

		float *G2 = xmalloc((size_t)m * n * sizeof *G2);
		double *top2 = xmalloc((size_t)r * k * sizeof *top2);
		make_g(G2, top2, m, n, r, sv, 100 + sp, 0.1);
		float *Pe2 = projector(G2, m, n, r, GALORE_PROJ_SVD, NULL, 1);
		float *Pw = projector(G2, m, n, r, GALORE_PROJ_RANDOMIZED, Pr, 8);
		double *ve2 = vectors_of(Pe2, m, n, r), *vw = vectors_of(Pw, m, n, r);
		const double moved = max_angle(ve, r, ve2, r, k), aw = max_angle(vw, r, ve2, r, k);
		cr_expect(aw < bound && aw < moved,
			  "%dx%d %s: warm start %.2e rad from exact (bound %.0e; subspace moved "
			  "%.2e)",
			  m, n, name, aw, bound, moved);
		cr_log_info("%dx%d %s: exact-truth %.1e, randomized-exact %.1e, warm-exact %.1e "
			    "(moved %.1e) rad",
			    m, n, name, truth, a, aw, moved);
		free(G2);
		free(top2);
		free(Pe2);
		free(Pw);
		free(ve2);
		free(vw);
	}
	free(sv);
	free(top);
	free(G);
	free(Pe);
	free(Pr);
	free(ve);
	free(vr);
}

Test(galore_proj, randomized_512x1376) /* left side */
{
	for (int sp = FAST; sp <= SLOW; sp++)
		check_randomized(512, 1376, (enum spectrum)sp);
}
Test(galore_proj, randomized_1376x512) /* right side */
{
	for (int sp = FAST; sp <= SLOW; sp++)
		check_randomized(1376, 512, (enum spectrum)sp);
}
Test(galore_proj, randomized_768x2048)
{
	for (int sp = FAST; sp <= SLOW; sp++)
		check_randomized(768, 2048, (enum spectrum)sp);
}

/* ---- 3. determinism and signs ---------------------------------------------------------- */

static void check_signs(int m, int n, enum galore_proj_method meth)
{
	const int r = 16, k = imin(m, n);
	const size_t pn = (size_t)r * k, bytes = pn * sizeof(float);
	uint64_t seed = 0x51 + (uint64_t)m;
	float *G = xmalloc((size_t)m * n * sizeof *G), *G2 = xmalloc((size_t)m * n * sizeof *G2);
	tu_fill_normal(G, (size_t)m * n, 1.0, &seed);
	float *P1 = projector(G, m, n, r, meth, NULL, 3), *P2 = projector(G, m, n, r, meth, NULL, 3);
	cr_expect(!memcmp(P1, P2, bytes), "%dx%d method %d: two calls differ", m, n, (int)meth);
	float *P3 = xmalloc(bytes); /* the internally allocated workspace gives the same */
	cr_assert_eq(galore_projector(P3, G, m, n, r, meth, NULL, 3, NULL), ST_OK);
	cr_expect(!memcmp(P1, P3, bytes), "%dx%d method %d: work = NULL differs", m, n, (int)meth);

	double *v = vectors_of(P1, m, n, r);
	for (int j = 0; j < r; j++) { /* no P_prev: largest component positive */
		int big = 0;
		for (int i = 1; i < k; i++)
			big = fabs(v[(size_t)j * k + i]) > fabs(v[(size_t)j * k + big]) ? i : big;
		cr_expect(v[(size_t)j * k + big] > 0, "%dx%d method %d: vector %d largest %g", m, n,
			  (int)meth, j, v[(size_t)j * k + big]);
	}

	/* With P_prev: flip every other previous vector, so that the natural
	 * signs would disagree with half of them; G moves a little. */
	for (size_t i = 0; i < (size_t)m * n; i++)
		G2[i] = G[i] + 0.05f * (float)tu_normal(&seed);
	for (int j = 0; j < r; j += 2)
		for (int i = 0; i < k; i++)
			P1[m >= n ? (size_t)j * k + i : (size_t)i * r + j] *= -1.0f;
	float *Pn = projector(G2, m, n, r, meth, P1, 4);
	double *vo = vectors_of(P1, m, n, r), *vn = vectors_of(Pn, m, n, r);
	for (int j = 0; j < r; j++) {
		double d = 0;
		for (int i = 0; i < k; i++)
			d += vo[(size_t)j * k + i] * vn[(size_t)j * k + i];
		cr_expect(d >= 0, "%dx%d method %d: vector %d has dot %g with the previous", m, n,
			  (int)meth, j, d);
	}
	/* in place (P == P_prev) gives the same bits */
	float *Pi = xmalloc(bytes);
	memcpy(Pi, P1, bytes);
	void *work = xmalloc(galore_proj_work_bytes(m, n, r, meth));
	cr_assert_eq(galore_projector(Pi, G2, m, n, r, meth, Pi, 4, work), ST_OK);
	cr_expect(!memcmp(Pi, Pn, bytes), "%dx%d method %d: in-place refresh differs", m, n,
		  (int)meth);
	free(work);
	free(G);
	free(G2);
	free(P1);
	free(P2);
	free(P3);
	free(Pn);
	free(Pi);
	free(v);
	free(vo);
	free(vn);
}

Test(galore_proj, deterministic_with_signs)
{
	check_signs(200, 120, GALORE_PROJ_SVD);
	check_signs(120, 200, GALORE_PROJ_SVD);
	check_signs(200, 120, GALORE_PROJ_RANDOMIZED);
	check_signs(120, 200, GALORE_PROJ_RANDOMIZED);
}

/* ---- 4. full rank ------------------------------------------------------------------- */

/* r = min(m, n): P is square and orthogonal, R keeps all of G's energy
 * (1e-5 as in test 1). Square G is taken as the right side. */
Test(galore_proj, full_rank_is_orthogonal)
{
	const int shapes[3][2] = {{96, 48}, {48, 96}, {50, 50}};
	uint64_t seed = 77;
	for (int s = 0; s < 3; s++)
		for (int meth = GALORE_PROJ_SVD; meth <= GALORE_PROJ_RANDOMIZED; meth++) {
			const int m = shapes[s][0], n = shapes[s][1], r = imin(m, n);
			float *G = xmalloc((size_t)m * n * sizeof *G);
			tu_fill_normal(G, (size_t)m * n, 1.0, &seed);
			float *P = projector(G, m, n, r, (enum galore_proj_method)meth, NULL, 5);
			double all = 0;
			for (size_t i = 0; i < (size_t)m * n; i++)
				all += (double)G[i] * G[i];
			const double orth = orthonormality_error(P, m, n, r);
			const double e = captured_energy(G, P, m, n, r);
			cr_expect(galore_proj_side_right(m, n) == (m >= n));
			cr_expect(orth < 1e-5, "%dx%d method %d: |P P^T - I| = %.2e", m, n, meth, orth);
			cr_expect(fabs(e - all) <= 1e-5 * all, "%dx%d method %d: energy %.9g of %.9g", m,
				  n, meth, e, all);
			free(G);
			free(P);
		}
}

/* ---- 5. errors ---------------------------------------------------------------------- */

Test(galore_proj, bad_input_is_an_error)
{
	const int m = 12, n = 8;
	float G[12 * 8], P[12 * 8];
	uint64_t seed = 3;
	tu_fill_normal(G, (size_t)m * n, 1.0, &seed);
	for (int meth = GALORE_PROJ_SVD; meth <= GALORE_PROJ_RANDOMIZED; meth++) {
		const enum galore_proj_method me = (enum galore_proj_method)meth;
		const int bad[4][3] = {{m, n, 0}, {m, n, 9}, {n, m, 9}, {0, n, 1}};
		for (int b = 0; b < 4; b++) {
			const int bm = bad[b][0], bn = bad[b][1], br = bad[b][2];
			cr_expect_eq(galore_projector(P, G, bm, bn, br, me, NULL, 1, NULL), ST_FAIL,
				     "%dx%d r=%d accepted", bm, bn, br);
			cr_expect_eq(galore_proj_work_bytes(bm, bn, br, me), 0);
		}
		cr_expect_eq(galore_projector(P, G, m, -n, 2, me, NULL, 1, NULL), ST_FAIL);
		float Gn[12 * 8];
		memcpy(Gn, G, sizeof Gn);
		Gn[37] = NAN;
		cr_expect_eq(galore_projector(P, Gn, m, n, 4, me, NULL, 1, NULL), ST_FAIL,
			     "NaN gradient accepted");
		Gn[37] = INFINITY;
		cr_expect_eq(galore_projector(P, Gn, m, n, 4, me, NULL, 1, NULL), ST_FAIL,
			     "Inf gradient accepted");
		cr_expect_eq(galore_projector(P, G, m, n, 4, me, NULL, 1, NULL), ST_OK);
	}
	cr_expect_eq(galore_projector(P, G, m, n, 4, (enum galore_proj_method)7, NULL, 1, NULL),
		     ST_FAIL, "unknown method accepted");
}
