/* GaLore inside the optimizer; see galore.h for the update it computes.
 *
 * All products go through the kernel table (ops->matmul), so the update runs
 * on either backend; only the projector's SVD (galore_proj.c) is host code. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/galore.h"
#include "optim/galore_proj.h"
#include "optim/quantmap.h"
#include "util/check.h"
#include "util/finite.h"
#include "util/rng.h"

static int is_galore_kind(enum st_optim_kind k)
{
	return k == ST_OPT_GALORE_ADAMW || k == ST_OPT_GALORE_ADAMW8;
}

size_t galore_proj_numel(const struct st_pstate *ps)
{
	return (size_t)ps->rank * (size_t)(ps->right ? ps->cols : ps->rows);
}

int galore_waiting(const struct st_pstate *ps, long t)
{
	return ps->galore && t < ps->start;
}

int galore_refresh_due(const struct st_pstate *ps, const struct st_optim_cfg *c, long t)
{
	if (t == ps->start)
		return 1;
	return !ps->full && t > ps->start && (t - 1) % c->galore_gap == ps->phase;
}

/* The first projectors, spread over the first S = min(galore_spread, gap)
 * updates so that no update computes all of them: a cold projector costs
 * about as much as a training step's matmuls for that matrix at small
 * batches (measured: all 84 of the 130M preset took 1.6-2.3x a step of 4 x 256
 * tokens; bench/galore). Matrices are cut into S runs of about equal cost (k L r, the
 * size of the products), in parameter order; run s starts at update s + 1.
 * A matrix is not updated before its first projector: its gradients until
 * then are dropped, and its moments and bias correction start there, so
 * for it training simply begins up to S - 1 updates later, inside the lr
 * warmup. At full rank P = I costs nothing and every matrix starts at 1. */
static void plan_starts(struct st_optim *o)
{
	const struct st_optim_cfg *c = &o->cfg;
	int S = c->galore_spread > 1 ? c->galore_spread : 1;
	S = S < c->galore_gap ? S : c->galore_gap;
	double total = 0;
	for (int i = 0; i < o->m->n_params; i++) {
		struct st_pstate *ps = &o->ps[i];
		ps->start = 1;
		if (ps->galore && !ps->full)
			total += (double)ps->rows * ps->cols * ps->rank;
	}
	double before = 0;
	for (int i = 0; i < o->m->n_params && total > 0; i++) {
		struct st_pstate *ps = &o->ps[i];
		if (!ps->galore || ps->full)
			continue;
		const double cost = (double)ps->rows * ps->cols * ps->rank;
		const int s = (int)(S * (before + cost / 2) / total);
		ps->start = 1 + (s < S ? s : S - 1);
		before += cost;
	}
}

int galore_check_rank_gap(double rank, int gap)
{
	ST_CHECK_USAGE(rank > 0, "give --galore-rank as a rank (128) or a fraction of the hidden size (0.25)",
		 "--galore-rank must be positive (got %g)", rank);
	ST_CHECK_USAGE(rank < 1 || rank == floor(rank),
		 "give a whole rank (128) or a fraction of the hidden size below 1 (0.25)",
		 "--galore-rank %g is neither a whole rank nor a fraction below 1", rank);
	ST_CHECK_USAGE(gap >= 1, "the paper uses 200", "--galore-update-gap must be >= 1 (got %d)", gap);
	return ST_OK;
}

int galore_plan(struct st_optim *o)
{
	const struct st_optim_cfg *c = &o->cfg;
	const struct st_model *m = o->m;
	if (!is_galore_kind(c->kind))
		return ST_OK;
	ST_TRY(galore_check_rank_gap(c->galore_rank, c->galore_gap));
	ST_CHECK_USAGE(c->galore_scale > 0, "the paper uses 0.25", "--galore-scale must be positive (got %g)",
		 c->galore_scale);
	/* a whole rank past every matrix is full rank (capped below); past
	 * INT_MAX the cast alone would be undefined */
	const int want = c->galore_rank >= INT_MAX ? INT_MAX
			 : c->galore_rank >= 1	  ? (int)c->galore_rank
						  : (int)lround(c->galore_rank * m->cfg.dim);
	ST_CHECK_USAGE(want >= 1, "use a larger --galore-rank",
		 "--galore-rank %g of hidden size %d rounds to rank 0", c->galore_rank, m->cfg.dim);
	int n_gal = 0;
	for (int i = 0; i < m->n_params; i++) {
		const struct st_param *p = &m->params[i];
		n_gal += p->ndim == 2 && (p->role == ST_ROLE_ATTN || p->role == ST_ROLE_MLP);
	}
	/* phases spread the refreshes evenly over the gap: at most
	 * ceil(n_gal / gap) refreshes in any step, plus the first projectors
	 * of the updates 1..S (plan_starts). With a spread of 1, the paper's
	 * schedule: every projector made at update 1 and all refreshed
	 * together every gap (phase 0); the staggered phases had a matrix of
	 * phase p refresh p updates after its first projector, which a replay
	 * through galore-torch found as a 1.3 difference in a layer's weights */
	/* state per matrix against what the same family keeps without GaLore
	 * (AdamW's 8 B per weight; adamw8bit's 2 + 8/block, or 8 under
	 * --quant-min-size): the projector (fp32, rank x smaller side) and two
	 * moments of rank x larger side (fp32, or a byte each plus their
	 * blocks' absmax) */
	const int is8 = c->kind == ST_OPT_GALORE_ADAMW8;
	const double q8_bytes = 2.0 + 8.0 / c->quant_block;
	int k = 0, n_over = 0, n_full = 0, below = INT_MAX; /* the rank that saves memory on all of them */
	for (int i = 0; i < m->n_params; i++) {
		const struct st_param *p = &m->params[i];
		struct st_pstate *ps = &o->ps[i];
		if (!(p->ndim == 2 && (p->role == ST_ROLE_ATTN || p->role == ST_ROLE_MLP)))
			continue;
		ps->galore = 1;
		ps->rows = (int)p->shape[0];
		ps->cols = (int)p->shape[1];
		const int small = ps->rows < ps->cols ? ps->rows : ps->cols;
		ps->rank = want < small ? want : small;
		ps->full = ps->rank == small;
		n_full += ps->full;
		ps->right = ps->rows >= ps->cols;
		ps->phase = c->galore_spread > 1 ? (int)((long)k * c->galore_gap / n_gal) : 0;
		ps->state_numel = (size_t)ps->rank * (size_t)(ps->right ? ps->rows : ps->cols);
		o->galore_weights += p->numel;
		const double large = ps->rows + ps->cols - small;
		/* 8-bit moments where the matrix's moments are quantized at all
		 * (optim.c: at least --quant-min-size elements) */
		const int q8 = is8 && (long)ps->state_numel >= c->quant_min_numel;
		const double mom = q8 ? q8_bytes : 8.0;
		const double base = is8 && (long)p->numel >= c->quant_min_numel ? q8_bytes : 8.0;
		const double even = base * small * large / (4.0 * small + mom * large);
		if (ps->rank >= even) {
			n_over++;
			const int r = (int)ceil(even) - 1 > 0 ? (int)ceil(even) - 1 : 1;
			below = r < below ? r : below;
		}
		k++;
	}
	if (n_over && n_full == n_gal) /* P = I everywhere: AdamW with more state */
		st_log_warn("--galore-rank %g is full rank on every projected matrix: GaLore is then "
			    "%s with an identity projector kept as state (and those matrices' "
			    "updates scaled by --galore-scale %g); use --optimizer %s (its --lr x %g "
			    "for the same updates there), or rank %d or less to save memory",
			    c->galore_rank, is8 ? "adamw8bit" : "AdamW", (double)c->galore_scale,
			    is8 ? "adamw8bit" : "adamw", (double)c->galore_scale, below);
	else if (n_over && !is8)
		st_log_warn("--galore-rank %g keeps more state than AdamW's 8 B per weight on %d of "
			    "the %d projected matrices (a projector and moments of that rank); rank %d "
			    "or less saves memory on all of them",
			    c->galore_rank, n_over, n_gal, below);
	else if (n_over)
		st_log_warn("--galore-rank %g keeps more state than adamw8bit would (%.3g B per "
			    "weight, 8 under --quant-min-size) on %d of the %d projected matrices (a "
			    "projector and moments of that rank); rank %d or less saves memory on all "
			    "of them",
			    c->galore_rank, q8_bytes, n_over, n_gal, below);
	plan_starts(o);
	return ST_OK;
}

/* The sizes of GaLore's scratch (optim.h): the largest R, projector, rank
 * and projector workspace over the projected matrices. */
struct scratch_sizes {
	size_t rmax, pmax, kmax, wmax;
};

static struct scratch_sizes scratch_sizes(const struct st_optim *o)
{
	struct scratch_sizes z = {0};
	for (int i = 0; i < o->m->n_params; i++) {
		const struct st_pstate *ps = &o->ps[i];
		if (!ps->galore)
			continue;
		z.rmax = ps->state_numel > z.rmax ? ps->state_numel : z.rmax;
		z.pmax = galore_proj_numel(ps) > z.pmax ? galore_proj_numel(ps) : z.pmax;
		z.kmax = (size_t)ps->rank > z.kmax ? (size_t)ps->rank : z.kmax;
		if (!ps->full) {
			size_t w = galore_proj_work_bytes(ps->rows, ps->cols, ps->rank,
							  (enum galore_proj_method)o->cfg.galore_proj);
			z.wmax = w > z.wmax ? w : z.wmax;
		}
	}
	return z;
}

size_t galore_scratch_bytes(const struct st_optim *o)
{
	const struct scratch_sizes z = scratch_sizes(o);
	if (!z.rmax)
		return 0;
	return (2 * z.rmax + z.pmax + 2 * z.kmax * z.kmax) * sizeof(float) + z.wmax;
}

int galore_alloc_scratch(struct st_optim *o)
{
	const struct scratch_sizes z = scratch_sizes(o);
	if (!z.rmax)
		return ST_OK;
	o->g_r = st_malloc(z.rmax * sizeof(float));
	o->g_n = st_malloc(z.rmax * sizeof(float));
	o->g_pold = st_malloc(z.pmax * sizeof(float));
	o->g_rot = st_malloc(2 * z.kmax * z.kmax * sizeof(float));
	o->g_work = z.wmax ? st_malloc(z.wmax) : NULL;
	o->g_zero_first = st_malloc(sizeof *o->g_zero_first);
	if (!o->g_r || !o->g_n || !o->g_pold || !o->g_rot || (z.wmax && !o->g_work) ||
	    !o->g_zero_first)
		return ST_FAIL;
	*o->g_zero_first = -1;
	return ST_OK;
}

void galore_free_scratch(struct st_optim *o)
{
	free(o->g_r);
	free(o->g_n);
	free(o->g_pold);
	free(o->g_rot);
	free(o->g_work);
	free(o->g_zero_first);
	o->g_r = o->g_n = o->g_pold = o->g_rot = NULL;
	o->g_work = NULL;
	o->g_zero_first = NULL;
}

/* P = I (r = the smaller side): the subspace is everything, and the identity
 * makes GaLore exactly AdamW at galore_scale 1 (the projections multiply by 1
 * and add 0s), AdamW at galore_scale times the learning rate otherwise. */
static void identity(float *p, int r)
{
	memset(p, 0, (size_t)r * r * sizeof *p);
	for (int k = 0; k < r; k++)
		p[(size_t)k * r + k] = 1.0f;
}

/* x (R-shaped: rows x r when right, r x cols when left) <- x rotated by q
 * (r x r): right x q, left q x; tmp holds the result first. */
static void rotate(const struct st_ops *ops, const struct st_pstate *ps, float *x, float *tmp,
		   const float *q)
{
	const int r = ps->rank;
	if (ps->right)
		ops->matmul(tmp, x, q, ps->rows, r, r, 0, 0, 1.0f, 0.0f, r, r, r);
	else
		ops->matmul(tmp, q, x, r, ps->cols, r, 0, 0, 1.0f, 0.0f, r, ps->cols, ps->cols);
	memcpy(x, tmp, ps->state_numel * sizeof *x);
}

/* Rotate the moments from the basis pold to p (both saved projectors). */
static void rotate_moments(const struct st_ops *ops, const struct st_optim *o,
			   const struct st_pstate *ps, const float *p, const float *pold, char *sb)
{
	const int r = ps->rank;
	float *q = o->g_rot, *q2 = o->g_rot + (size_t)r * r;
	if (ps->right) /* Q = P_old P_new^T: new coordinates of the old basis */
		ops->matmul(q, pold, p, r, r, ps->cols, 0, 1, 1.0f, 0.0f, ps->cols, ps->cols, r);
	else /* Q = P_new^T P_old */
		ops->matmul(q, p, pold, r, r, ps->rows, 1, 0, 1.0f, 0.0f, r, r, r);
	for (size_t k = 0; k < (size_t)r * r; k++)
		q2[k] = q[k] * q[k];
	const float *map[2] = {optim_moment_map(o, 0), optim_moment_map(o, 1)};
	for (int s = 0; s < 2; s++) {
		const float *rq = s == 0 ? q : q2;
		if (ps->q8) {
			uint8_t *codes = (uint8_t *)(sb + ps->off[s]);
			float *absmax = (float *)(sb + ps->absmax_off[s]);
			dequant_blockwise(o->g_r, codes, absmax, ps->state_numel, o->cfg.quant_block,
					  map[s]);
			rotate(ops, ps, o->g_r, o->g_n, rq);
			quant_blockwise(codes, absmax, o->g_r, ps->state_numel, o->cfg.quant_block,
					map[s]);
		} else {
			rotate(ops, ps, (float *)(sb + ps->off[s]), o->g_n, rq);
		}
	}
}

void galore_rotate(const struct st_ops *ops, const struct st_optim *o, int i, char *sb,
		   const float *pold)
{
	const struct st_pstate *ps = &o->ps[i];
	rotate_moments(ops, o, ps, (const float *)(sb + ps->proj_off), pold, sb);
}

void galore_refresh(const struct st_ops *ops, const struct st_optim *o, int i, const float *g,
		    char *sb, long t, const float *pold)
{
	(void)ops;
	const struct st_pstate *ps = &o->ps[i];
	float *p = (float *)(sb + ps->proj_off);
	if (ps->full) {
		identity(p, ps->rank);
		return;
	}
	const size_t pn = galore_proj_numel(ps);
	const int have_old = pold != NULL;
	const uint64_t seed = rng_hash3(o->cfg.seed, (uint64_t)i, (uint64_t)t);
	/* a gradient with inf or NaN: the step is skipped (its norm is not
	 * finite) and the projectors it refreshed are restored, so a stand-in
	 * is enough, and nothing needs saying beyond the skip itself */
	const size_t gn = (size_t)ps->rows * ps->cols;
	const int finite = st_first_nonfinite(g, gn) < 0;
	/* A zero gradient (a step without loss targets: fine-tuning prompts
	 * that fill whole windows; a matrix that starts at zero, as grown
	 * blocks do) spans no subspace: its projector would be arbitrary unit
	 * vectors, thrown away in place of a real one. The previous one is
	 * kept; a first projector is the stand-in below until the matrix's next
	 * refresh. The first such matrix is noted for the trainer to say. */
	size_t nz = 0;
	while (finite && nz < gn && g[nz] == 0.0f)
		nz++;
	const int zero = finite && nz == gn;
	if (zero && o->g_zero_first) {
		int none = -1;
		__atomic_compare_exchange_n(o->g_zero_first, &none, i, 0, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
	}
	if (!finite || zero ||
	    galore_projector(p, g, ps->rows, ps->cols, ps->rank,
			     (enum galore_proj_method)o->cfg.galore_proj, pold, seed,
			     o->g_work) != ST_OK) {
		/* LAPACK did not converge (rare): keep the old subspace; at the
		 * first update there is none, so take the first r coordinates */
		if (finite && !zero)
			st_log_warn("GaLore: projector of %s not computed at update %ld; %s",
				    o->m->params[i].name, t,
				    have_old ? "keeping the previous one"
					     : "using the first r coordinates");
		if (have_old)
			memcpy(p, pold, pn * sizeof *p);
		else {
			memset(p, 0, pn * sizeof *p);
			for (int k = 0; k < ps->rank; k++)
				p[ps->right ? (size_t)k * ps->cols + k : (size_t)k * ps->rank + k] = 1.0f;
		}
	}
}

void galore_project(const struct st_ops *ops, const struct st_optim *o, int i, const float *g,
		    const char *sb, float *rg, float beta)
{
	const struct st_pstate *ps = &o->ps[i];
	const int m = ps->rows, n = ps->cols, r = ps->rank;
	const float *p = (const float *)(sb + ps->proj_off);
	/* R = G P^T (m, r), or P^T G (r, n) */
	if (ps->right)
		ops->matmul(rg, g, p, m, r, n, 0, 1, 1.0f, beta, n, n, r);
	else
		ops->matmul(rg, p, g, r, n, m, 1, 0, 1.0f, beta, r, n, n);
}

void galore_step(const struct st_ops *ops, const struct st_optim *o, int i, float *w,
		 const float *g, char *sb, long t, float lr, float grad_scale, float wd)
{
	const struct st_pstate *ps = &o->ps[i];
	if (galore_waiting(ps, t))
		return;
	if (galore_refresh_due(ps, &o->cfg, t)) {
		const float *pold = NULL;
		if (t > ps->start && !ps->full) {
			memcpy(o->g_pold, sb + ps->proj_off, galore_proj_numel(ps) * sizeof(float));
			pold = o->g_pold;
		}
		galore_refresh(ops, o, i, g, sb, t, pold);
		if (o->cfg.galore_rotate && pold)
			galore_rotate(ops, o, i, sb, pold);
	}
	galore_project(ops, o, i, g, sb, o->g_r, 0.0f);
	galore_apply(ops, o, i, w, o->g_r, sb, t, lr, grad_scale, wd);
}

void galore_apply(const struct st_ops *ops, const struct st_optim *o, int i, float *w,
		  const float *rg, char *sb, long t, float lr, float grad_scale, float wd)
{
	const struct st_optim_cfg *c = &o->cfg;
	const struct st_pstate *ps = &o->ps[i];
	const int m = ps->rows, n = ps->cols, r = ps->rank;
	const float *p = (const float *)(sb + ps->proj_off);
	float *upd = o->g_n;

	/* N = -m^ / (sqrt(v^) + eps): the inner optimizer moving a zero "weight"
	 * with lr 1 and no decay; its moments began at update start */
	const double tt = (double)(t - ps->start + 1);
	const float bc1 = (float)(1.0 - pow(c->beta1, tt));
	const float bc2 = (float)(1.0 - pow(c->beta2, tt));
	memset(upd, 0, ps->state_numel * sizeof *upd);
	if (ps->q8) {
		struct st_adamw8_args a = {.lr = 1.0f, .beta1 = c->beta1, .beta2 = c->beta2,
					   .eps = c->eps, .weight_decay = 0.0f,
					   .grad_scale = grad_scale, .bc1 = bc1, .bc2 = bc2,
					   .block = c->quant_block, .map_m = o->map_signed,
					   .map_v = o->map_unsigned};
		ops->adamw8_step(upd, (uint8_t *)(sb + ps->off[0]), (uint8_t *)(sb + ps->off[1]),
				 (float *)(sb + ps->absmax_off[0]), (float *)(sb + ps->absmax_off[1]),
				 rg, ps->state_numel, &a);
	} else {
		struct st_adamw_args a = {.lr = 1.0f, .beta1 = c->beta1, .beta2 = c->beta2,
					  .eps = c->eps, .weight_decay = 0.0f,
					  .grad_scale = grad_scale, .bc1 = bc1, .bc2 = bc2};
		ops->adamw_step(upd, (float *)(sb + ps->off[0]), (float *)(sb + ps->off[1]), rg,
				ps->state_numel, &a);
	}

	/* decoupled decay on the full W, then W += alpha lr (N P or P N) */
	if (wd != 0.0f)
		ops->scale(w, 1.0f - lr * wd, (size_t)m * n);
	if (ps->right)
		ops->matmul(w, upd, p, m, n, r, 0, 0, c->galore_scale * lr, 1.0f, r, n, n);
	else
		ops->matmul(w, p, upd, m, n, r, 0, 0, c->galore_scale * lr, 1.0f, r, n, n);
}
