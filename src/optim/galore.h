/* GaLore (Zhao et al., arXiv 2403.03507): gradient low-rank projection for
 * the attention and MLP matrices, inside the optimizer. Internal to optim/
 * (optim.c calls it); the projector itself is optim/galore_proj.h.
 *
 * For a GaLore weight W (m x n) with gradient G, at update t:
 *   nothing before update start (the first projectors are staggered over
 *     the first galore_spread updates; see plan_starts in galore.c)
 *   refresh (t == start, or (t - 1) % gap == phase): P = top-r singular
 *     vectors of G, on the smaller side (see st_pstate); at full rank P = I
 *   R = G P^T (m >= n) or P^T G, the gradient in the subspace
 *   N = -m^ / (sqrt(v^) + eps): AdamW (or 8-bit AdamW) on R with lr 1 and no
 *     decay, the moments R-shaped, bias-corrected for t - start + 1 updates;
 *     the clip factor enters as grad_scale
 *   W -= lr * wd * W (decoupled, on the full W; as a scale by 1 - lr wd)
 *   W += alpha * lr * (N P or P N)
 * Moments are kept when P changes (the paper's choice, and galore-torch's),
 * or with galore_rotate rotated into the new basis: m <- m Q with Q =
 * P_old P_new^T (r x r), v <- v (Q o Q) (elementwise squares: a second
 * moment cannot be rotated exactly, this keeps it positive and exact when
 * Q is a signed permutation). */
#ifndef ST_OPTIM_GALORE_H
#define ST_OPTIM_GALORE_H

#include "optim/optim.h"

/* Mark the GaLore parameters of o->m (cfg kinds galore-*): shapes, ranks,
 * sides, staggered first updates and refresh phases; checks the GaLore
 * options. A no-op for other kinds. */
int galore_plan(struct st_optim *o);
/* --galore-rank (a whole rank, or a fraction of the hidden size below 1)
 * and --galore-update-gap (>= 1) as given, usage errors said; galore_plan
 * checks them, and the trainer's option check before a resume compares
 * them with the run's. */
int galore_check_rank_gap(double rank, int gap);
/* Elements of the projector P of a GaLore parameter. */
size_t galore_proj_numel(const struct st_pstate *ps);
/* Whether GaLore parameter ps has no projector yet at update t: it takes
 * no update (its gradient is dropped). */
int galore_waiting(const struct st_pstate *ps, long t);
/* Whether parameter state ps refreshes its projector at update t. */
int galore_refresh_due(const struct st_pstate *ps, const struct st_optim_cfg *c, long t);
int galore_alloc_scratch(struct st_optim *o);
/* Host bytes galore_alloc_scratch takes (0 without GaLore): the planner
 * counts them in the host budget. */
size_t galore_scratch_bytes(const struct st_optim *o);
void galore_free_scratch(struct st_optim *o);
/* One update of GaLore parameter i: w, g its weights and gradient, sb its
 * unit's state slab; wd its weight decay. The same as, in order,
 * galore_refresh (when due), galore_rotate (when asked), galore_project and
 * galore_apply, which the per-layer path (trainer/perlayer.c) calls apart. */
void galore_step(const struct st_ops *ops, const struct st_optim *o, int i, float *w,
		 const float *g, char *sb, long t, float lr, float grad_scale, float wd);
/* New projector of parameter i from gradient g at update t (P = I at full
 * rank); pold: a copy of the previous P (t > start), or NULL at start. */
void galore_refresh(const struct st_ops *ops, const struct st_optim *o, int i, const float *g,
		    char *sb, long t, const float *pold);
/* Rotate parameter i's moments from basis pold into the current P. */
void galore_rotate(const struct st_ops *ops, const struct st_optim *o, int i, char *sb,
		   const float *pold);
/* r = proj(g) (beta 0) or r += proj(g) (beta 1); r is R-shaped. */
void galore_project(const struct st_ops *ops, const struct st_optim *o, int i, const float *g,
		    const char *sb, float *r, float beta);
/* The update from projected gradient r: inner AdamW, decay, project back. */
void galore_apply(const struct st_ops *ops, const struct st_optim *o, int i, float *w,
		  const float *r, char *sb, long t, float lr, float grad_scale, float wd);

#endif
