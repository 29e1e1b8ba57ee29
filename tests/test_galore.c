/* GaLore inside the optimizer (optim/galore.c): at full rank it is AdamW; a
 * low-rank step equals a float64 replay of the paper's update from the same
 * projector; state bytes match the formula, the scratch bytes the planner
 * counts what is allocated; refreshes are staggered.
 * The projector's own tests (SVD, randomized vs exact subspaces) are in
 * test_galore_proj.c. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/session.h"
#include "optim/galore.h"
#include "optim/optim.h"
#include "testutil.h"

/* A small model: dim 64, ffn 96, 2 layers, 4 heads / 2 kv heads, so the
 * GaLore matrices have both orientations (q 64x64, k/v 32x64, gate/up
 * 96x64, down 64x96). */
static struct st_config shaped(int layers, int dim, int heads, int kv_heads, int head_dim,
			       int ffn)
{
	struct st_config cfg;
	cr_assert_eq(config_preset(&cfg, "tiny"), 0);
	cfg.n_layers = layers;
	cfg.dim = dim;
	cfg.n_heads = heads;
	cfg.n_kv_heads = kv_heads;
	cfg.head_dim = head_dim;
	cfg.ffn_dim = ffn;
	return cfg;
}

static void small_session(struct st_session *s, uint64_t seed)
{
	const struct st_config cfg = shaped(2, 64, 4, 2, 16, 96);
	cr_assert_eq(session_create(s, ops_cpu(), &cfg, 1), 0);
	session_init_random(s, seed);
}

static struct st_optim_cfg base_cfg(enum st_optim_kind k)
{
	return (struct st_optim_cfg){.kind = k, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
				     .weight_decay = 0.1f, .quant_block = 64,
				     .quant_min_numel = 4096, .galore_rank = 8,
				     .galore_gap = 200, .galore_scale = 0.25f,
				     .galore_proj = ST_GALORE_SVD, .seed = 5};
}

static void **alloc_state(const struct st_optim *o)
{
	void **st = calloc((size_t)o->m->n_units, sizeof *st);
	cr_assert(st);
	for (int u = 0; u < o->m->n_units; u++) {
		st[u] = aligned_alloc(64, (o->unit_bytes[u] + 63) / 64 * 64 + 64);
		cr_assert(st[u]);
		memset(st[u], 0, o->unit_bytes[u]);
	}
	return st;
}

static void free_state(const struct st_optim *o, void **st)
{
	for (int u = 0; u < o->m->n_units; u++)
		free(st[u]);
	free(st);
}

/* Fresh random gradients in every G slab (the same for the same seed). */
static void fill_grads(struct st_session *s, uint64_t seed)
{
	for (int u = 0; u < s->model.n_units; u++)
		tu_fill_normal(store_acquire(&s->store, u, ST_SLAB_G), s->model.units[u].numel, 1e-2,
			       &seed);
}

static void step_all(struct st_session *s, const struct st_optim *o, void **st, long t, float lr,
		     float gs)
{
	for (int u = 0; u < s->model.n_units; u++)
		optim_step_unit(s->ops, o, u, s->w[u], store_acquire(&s->store, u, ST_SLAB_G), st[u],
				t, lr, gs);
}

/* Rank = the smaller side and scale 1: GaLore-AdamW is AdamW (P = I). */
Test(galore, full_rank_equals_adamw)
{
	struct st_session a, b;
	small_session(&a, 3);
	small_session(&b, 3);
	struct st_optim oa, ob;
	struct st_optim_cfg ca = base_cfg(ST_OPT_ADAMW), cb = base_cfg(ST_OPT_GALORE_ADAMW);
	cb.galore_rank = 1e6;
	cb.galore_scale = 1.0f;
	cb.galore_gap = 2;
	cr_assert_eq(optim_init(&oa, &ca, &a.model), 0);
	cr_assert_eq(optim_init(&ob, &cb, &b.model), 0);
	cr_assert(ob.galore_weights > 0);
	void **sa = alloc_state(&oa), **sb = alloc_state(&ob);
	for (long t = 1; t <= 6; t++) {
		fill_grads(&a, 100 + (uint64_t)t);
		fill_grads(&b, 100 + (uint64_t)t);
		step_all(&a, &oa, sa, t, 1e-2f, 0.7f);
		step_all(&b, &ob, sb, t, 1e-2f, 0.7f);
	}
	double worst = 0;
	for (int i = 0; i < a.model.n_params; i++) {
		const struct st_param *p = &a.model.params[i];
		const float *wa = a.w[p->unit] + p->offset, *wb = b.w[p->unit] + p->offset;
		double d = 0, ref = 0; /* ||wb - wa|| / ||wa||: fp32 rounding is ~1e-7 */
		for (size_t k = 0; k < p->numel; k++) {
			d += ((double)wb[k] - wa[k]) * ((double)wb[k] - wa[k]);
			ref += (double)wa[k] * wa[k];
		}
		worst = fmax(worst, sqrt(d / ref));
	}
	cr_log_info("full-rank GaLore vs AdamW after 6 steps: max relative difference %.3g "
		    "(per-parameter norm)", worst);
	cr_expect(worst < 1e-6, "full-rank GaLore differs from AdamW by %.3g", worst);
	free_state(&oa, sa);
	free_state(&ob, sb);
	optim_free(&oa);
	optim_free(&ob);
	session_close(&a);
	session_close(&b);
}

/* One GaLore parameter through two updates (the second without a refresh),
 * against float64: R = G P^T (or P^T G), Adam on R, W(1 - lr wd) + a lr N P. */
static void check_lowrank(enum st_optim_kind kind, const char *which, double tol)
{
	struct st_session s;
	small_session(&s, 4);
	struct st_optim o;
	struct st_optim_cfg c = base_cfg(kind);
	c.quant_min_numel = 0;
	cr_assert_eq(optim_init(&o, &c, &s.model), 0);
	void **st = alloc_state(&o);
	int pi = -1;
	for (int i = 0; i < s.model.n_params; i++)
		if (strstr(s.model.params[i].name, which) && s.model.params[i].unit == 1)
			pi = i;
	cr_assert(pi >= 0 && o.ps[pi].galore && !o.ps[pi].full);
	const struct st_param *p = &s.model.params[pi];
	const struct st_pstate *ps = &o.ps[pi];
	const int m = ps->rows, n = ps->cols, r = ps->rank;
	const size_t rn = ps->state_numel;
	float *w = s.w[p->unit] + p->offset;
	const float *g = (const float *)store_acquire(&s.store, p->unit, ST_SLAB_G) + p->offset;
	double *wd = malloc(p->numel * sizeof *wd), *mom = calloc(rn, sizeof *mom),
	       *vel = calloc(rn, sizeof *vel), *rr = malloc(rn * sizeof *rr);
	float *p1 = malloc(galore_proj_numel(ps) * sizeof *p1);
	cr_assert(wd && mom && vel && rr && p1);
	const float lr = 3e-2f, gs = 0.8f;
	for (long t = 1; t <= 2; t++) {
		fill_grads(&s, 40 + (uint64_t)t);
		for (size_t k = 0; k < p->numel; k++)
			wd[k] = w[k];
		optim_step_unit(s.ops, &o, p->unit, s.w[p->unit],
				store_acquire(&s.store, p->unit, ST_SLAB_G), st[p->unit], t, lr, gs);
		const float *P = (const float *)((char *)st[p->unit] + ps->proj_off);
		if (t == 1)
			memcpy(p1, P, galore_proj_numel(ps) * sizeof *p1);
		else
			cr_expect(!memcmp(p1, P, galore_proj_numel(ps) * sizeof *p1),
				  "the projector changed without a refresh");
		/* P has orthonormal rows (right) or columns (left) */
		double orth = 0;
		for (int a = 0; a < r; a++)
			for (int b = 0; b < r; b++) {
				double d = 0;
				for (int k = 0; k < (ps->right ? n : m); k++)
					d += ps->right ? (double)P[(size_t)a * n + k] * P[(size_t)b * n + k]
						       : (double)P[(size_t)k * r + a] * P[(size_t)k * r + b];
				orth = fmax(orth, fabs(d - (a == b)));
			}
		cr_expect(orth < 1e-5, "%s: P is not orthonormal (%.3g)", which, orth);
		/* float64 replay */
		const double bc1 = 1 - pow(c.beta1, (double)t), bc2 = 1 - pow(c.beta2, (double)t);
		for (size_t k = 0; k < rn; k++) {
			double acc = 0;
			if (ps->right) { /* R[i][j] = sum_k G[i][k] P[j][k] */
				size_t i = k / (size_t)r, j = k % (size_t)r;
				for (int q = 0; q < n; q++)
					acc += (double)g[i * n + q] * P[j * n + q];
			} else { /* R[i][j] = sum_k P[k][i] G[k][j] */
				size_t i = k / (size_t)n, j = k % (size_t)n;
				for (int q = 0; q < m; q++)
					acc += (double)P[(size_t)q * r + i] * g[(size_t)q * n + j];
			}
			double gk = acc * gs;
			mom[k] = c.beta1 * mom[k] + (1 - c.beta1) * gk;
			vel[k] = c.beta2 * vel[k] + (1 - c.beta2) * gk * gk;
			rr[k] = -(mom[k] / bc1) / (sqrt(vel[k] / bc2) + c.eps);
		}
		double worst = 0;
		for (int i = 0; i < m; i++)
			for (int j = 0; j < n; j++) {
				double upd = 0;
				for (int k = 0; k < r; k++)
					upd += ps->right ? rr[(size_t)i * r + k] * P[(size_t)k * n + j]
							 : P[(size_t)i * r + k] * rr[(size_t)k * n + j];
				double ref = wd[(size_t)i * n + j] * (1 - (double)lr * c.weight_decay) +
					     (double)c.galore_scale * lr * upd;
				double e = fabs(w[(size_t)i * n + j] - ref) / (fabs(ref) + 1e-3);
				worst = fmax(worst, e);
			}
		cr_log_info("%s (%dx%d, r %d, %s) update %ld vs float64: max relative error %.3g",
			    which, m, n, r, ps->right ? "right" : "left", t, worst);
		cr_expect(worst < tol, "%s update %ld: %.3g from the float64 replay", which, t, worst);
	}
	free(wd), free(mom), free(vel), free(rr), free(p1);
	free_state(&o, st);
	optim_free(&o);
	session_close(&s);
}

Test(galore, lowrank_step_matches_float64_right) { check_lowrank(ST_OPT_GALORE_ADAMW, "gate_proj", 1e-5); }
Test(galore, lowrank_step_matches_float64_left) { check_lowrank(ST_OPT_GALORE_ADAMW, "down_proj", 1e-5); }
Test(galore, lowrank_step_matches_float64_square) { check_lowrank(ST_OPT_GALORE_ADAMW, "q_proj", 1e-5); }

/* Optimizer-state bytes of each GaLore weight (m x n, rank r): the projector
 * plus two R-shaped moments, mr + 2nr floats for m <= n and nr + 2mr for
 * m > n; 8-bit moments 1 byte each plus one fp32 absmax per block. Other
 * parameters keep their plain-optimizer state. */
Test(galore, state_bytes_match_formula)
{
	struct st_session s;
	small_session(&s, 5);
	const enum st_optim_kind kinds[2] = {ST_OPT_GALORE_ADAMW, ST_OPT_GALORE_ADAMW8};
	for (int kk = 0; kk < 2; kk++) {
		struct st_optim o, plain;
		struct st_optim_cfg c = base_cfg(kinds[kk]), cp = base_cfg(kk ? ST_OPT_ADAMW8 : ST_OPT_ADAMW);
		c.galore_rank = 0.25; /* a fraction of the hidden size: 16 */
		c.quant_min_numel = 256;
		cp.quant_min_numel = 256;
		cr_assert_eq(optim_init(&o, &c, &s.model), 0);
		cr_assert_eq(optim_init(&plain, &cp, &s.model), 0);
		size_t n_gal = 0, weights = 0;
		for (int i = 0; i < s.model.n_params; i++) {
			const struct st_param *p = &s.model.params[i];
			const struct st_pstate *ps = &o.ps[i];
			const int is_mat = p->role == ST_ROLE_ATTN || p->role == ST_ROLE_MLP;
			cr_expect_eq(ps->galore, is_mat, "%s: GaLore chosen wrongly", p->name);
			if (!ps->galore) {
				cr_expect_eq(optim_param_state_bytes(&o, i), optim_param_state_bytes(&plain, i),
					     "%s: not the plain optimizer's state", p->name);
				continue;
			}
			const size_t m = (size_t)p->shape[0], n = (size_t)p->shape[1], r = 16;
			cr_expect_eq((size_t)ps->rank, r, "%s: rank %d", p->name, ps->rank);
			const size_t proj = m <= n ? m * r : n * r, rsz = m <= n ? n * r : m * r;
			size_t want = kk ? 4 * proj + 2 * (rsz + 4 * ((rsz + 63) / 64))
					 : 4 * (proj + 2 * rsz);
			cr_expect_eq(optim_param_state_bytes(&o, i), want, "%s (%zux%zu): %zu bytes, formula %zu",
				     p->name, m, n, optim_param_state_bytes(&o, i), want);
			n_gal++;
			weights += p->numel;
		}
		cr_expect_eq(n_gal, 14, "GaLore matrices: %zu", n_gal);
		cr_expect_eq(o.galore_weights, weights);
		optim_free(&o);
		optim_free(&plain);
	}
	session_close(&s);
}

/* Bytes malloc holds now (its arenas and its mmapped chunks). */
static size_t held_bytes(void)
{
	const struct mallinfo2 mi = mallinfo2();
	return mi.uordblks + mi.hblkhd;
}

/* The scratch the planner counts in the host budget (galore_scratch_bytes)
 * is what galore_alloc_scratch takes, to malloc's rounding (at most a page
 * and a header for each of its 6 blocks): with the exact SVD, the
 * randomized projector, a rank at which some matrices are full (no
 * projector workspace), and none for plain AdamW. A dim-512 model keeps
 * the rounding below 3% of the figure. */
Test(galore, scratch_bytes_are_what_is_allocated)
{
	const struct st_config cfg = shaped(1, 512, 8, 2, 64, 1376);
	struct st_session s;
	cr_assert_eq(session_create(&s, ops_cpu(), &cfg, 1), 0);
	const struct {
		enum st_optim_kind kind;
		enum st_galore_proj proj;
		double rank;
	} cases[] = {{ST_OPT_GALORE_ADAMW, ST_GALORE_SVD, 32},
		     {ST_OPT_GALORE_ADAMW, ST_GALORE_RANDOMIZED, 32},
		     {ST_OPT_GALORE_ADAMW8, ST_GALORE_RANDOMIZED, 128}, /* k, v: 128 x 512, full */
		     {ST_OPT_ADAMW, ST_GALORE_SVD, 32}};
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		struct st_optim o;
		struct st_optim_cfg c = base_cfg(cases[k].kind);
		c.galore_proj = cases[k].proj;
		c.galore_rank = cases[k].rank;
		cr_assert_eq(optim_init(&o, &c, &s.model), 0);
		const size_t counted = galore_scratch_bytes(&o);
		galore_free_scratch(&o);
		const size_t before = held_bytes();
		cr_assert_eq(galore_alloc_scratch(&o), 0);
		const size_t taken = held_bytes() - before;
		cr_log_info("case %zu: %zu B counted, %zu allocated", k, counted, taken);
		if (cases[k].kind == ST_OPT_ADAMW)
			cr_expect(counted == 0 && taken == 0, "AdamW: %zu B counted, %zu taken", counted,
				  taken);
		else
			cr_expect(counted > (512u << 10) && taken >= counted &&
					  taken <= counted + 6 * (4096 + 32),
				  "case %zu: %zu B counted, %zu allocated", k, counted, taken);
		optim_free(&o);
	}
	session_close(&s);
}

/* GaLore-AdamW on the small model with a gap of 10 and the given spread
 * of the first projectors. */
static void gap10_optim(struct st_session *s, struct st_optim *o, struct st_optim_cfg *c,
			int spread)
{
	small_session(s, 6);
	*c = base_cfg(ST_OPT_GALORE_ADAMW);
	c->galore_gap = 10;
	c->galore_spread = spread;
	cr_assert_eq(optim_init(o, c, &s->model), 0);
}

/* Refreshes are spread over the gap (the default spread of the first
 * projectors, 8): every matrix refreshes once per gap after its first
 * projector, and no update refreshes more than ceil(n / gap). */
Test(galore, refreshes_are_staggered)
{
	struct st_session s;
	struct st_optim o;
	struct st_optim_cfg c;
	gap10_optim(&s, &o, &c, 8); /* the default spread: staggered */
	int counts[64] = {0}, most = 0, n_gal = 0;
	for (int i = 0; i < s.model.n_params; i++)
		n_gal += o.ps[i].galore;
	for (long t = 2; t <= 60; t++) {
		int due = 0;
		for (int i = 0; i < s.model.n_params; i++) /* refreshes, in the 40 updates after the
							  * first projector (those: below) */
			if (o.ps[i].galore && t > o.ps[i].start && galore_refresh_due(&o.ps[i], &c, t))
				due++, counts[i] += t <= o.ps[i].start + 40;
		most = due > most ? due : most;
	}
	for (int i = 0; i < s.model.n_params; i++)
		if (o.ps[i].galore)
			cr_expect_eq(counts[i], 4, "%s refreshed %d times in 40 updates",
				     s.model.params[i].name, counts[i]);
	cr_expect(most <= (n_gal + 9) / 10, "%d refreshes in one update (%d matrices, gap 10)", most,
		  n_gal);
	optim_free(&o);
	session_close(&s);
}

/* A spread of 1 is the paper's schedule (galore-torch's): every projector
 * made at update 1 and all refreshed together at updates 1 + k gap, none in
 * between (the staggered phases refreshed a matrix of phase p at update
 * p + 1, p updates after its first projector). */
Test(galore, spread_one_is_the_papers_schedule)
{
	struct st_session s;
	struct st_optim o;
	struct st_optim_cfg c;
	gap10_optim(&s, &o, &c, 1);
	int n = 0;
	for (int i = 0; i < s.model.n_params; i++) {
		if (!o.ps[i].galore || o.ps[i].full)
			continue;
		n++;
		cr_expect_eq(o.ps[i].start, 1, "%s starts at %d", s.model.params[i].name, o.ps[i].start);
		for (long t = 1; t <= 41; t++)
			cr_expect_eq(galore_refresh_due(&o.ps[i], &c, t), (t - 1) % 10 == 0,
				     "%s at update %ld", s.model.params[i].name, t);
	}
	cr_expect_gt(n, 0, "no projected matrix");
	optim_free(&o);
	session_close(&s);
}

/* The first projectors are spread over the first galore_spread updates, in
 * runs of about equal cost; a matrix is untouched before its start, and from
 * there it trains exactly as a matrix whose GaLore began at update 1 with
 * the same gradients (moments and bias correction start with it). */
Test(galore, first_projectors_are_staggered)
{
	struct st_session s, r;
	small_session(&s, 8);
	small_session(&r, 8);
	struct st_optim o, ref;
	struct st_optim_cfg c = base_cfg(ST_OPT_GALORE_ADAMW), cr = c;
	c.galore_spread = 4;
	cr.galore_spread = 1;
	cr_assert_eq(optim_init(&o, &c, &s.model), 0);
	cr_assert_eq(optim_init(&ref, &cr, &r.model), 0);
	double cost[5] = {0}, total = 0, biggest = 0;
	int pi = -1;
	for (int i = 0; i < s.model.n_params; i++) {
		const struct st_pstate *ps = &o.ps[i];
		cr_expect_eq(ref.ps[i].galore ? ref.ps[i].start : 1, 1);
		if (!ps->galore)
			continue;
		cr_assert(ps->start >= 1 && ps->start <= 4, "%s starts at %d",
			  s.model.params[i].name, ps->start);
		const double k = (double)ps->rows * ps->cols * ps->rank;
		cost[ps->start] += k;
		total += k;
		biggest = fmax(biggest, k);
		for (long t = 1; t <= 4; t++) /* the first refresh is at start, none before */
			cr_expect_eq(galore_refresh_due(ps, &c, t), t == ps->start);
		if (ps->start == 3 && pi < 0)
			pi = i;
	}
	for (int k = 1; k <= 4; k++)
		cr_expect(cost[k] > 0 && cost[k] <= total / 4 + biggest,
			  "update %d starts %.0f of %.0f (k L r)", k, cost[k], total);
	cr_assert(pi >= 0);
	const struct st_param *p = &s.model.params[pi];
	const float *w = s.w[p->unit] + p->offset, *wr = r.w[p->unit] + p->offset;
	float *w0 = malloc(p->numel * sizeof *w0);
	memcpy(w0, w, p->numel * sizeof *w0);
	void **st = alloc_state(&o), **sr = alloc_state(&ref);
	for (long t = 1; t <= 6; t++) {
		fill_grads(&s, 300 + (uint64_t)t);
		step_all(&s, &o, st, t, 1e-2f, 0.8f);
		if (t < 3) {
			cr_expect_eq(memcmp(w, w0, p->numel * sizeof *w), 0,
				     "%s changed at update %ld, before its start", p->name, t);
			continue;
		}
		fill_grads(&r, 300 + (uint64_t)t);
		step_all(&r, &ref, sr, t - 2, 1e-2f, 0.8f);
	}
	cr_expect_eq(memcmp(w, wr, p->numel * sizeof *w), 0,
		     "%s started at update 3 differs from the same updates begun at 1", p->name);
	free(w0);
	free_state(&o, st);
	free_state(&ref, sr);
	optim_free(&o);
	optim_free(&ref);
	session_close(&s);
	session_close(&r);
}

/* Impossible settings are refused with a message, not a crash. */
Test(galore, bad_options_fail)
{
	struct st_session s;
	small_session(&s, 7);
	struct st_optim o;
	struct st_optim_cfg c = base_cfg(ST_OPT_GALORE_ADAMW);
	c.galore_rank = 0;
	cr_expect_neq(optim_init(&o, &c, &s.model), 0, "rank 0 accepted");
	optim_free(&o);
	c = base_cfg(ST_OPT_GALORE_ADAMW);
	c.galore_gap = 0;
	cr_expect_neq(optim_init(&o, &c, &s.model), 0, "gap 0 accepted");
	optim_free(&o);
	c = base_cfg(ST_OPT_GALORE_ADAMW);
	c.galore_rank = 0.001; /* of 64: rounds to 0 */
	cr_expect_neq(optim_init(&o, &c, &s.model), 0, "a fraction rounding to rank 0 accepted");
	optim_free(&o);
	session_close(&s);
}
