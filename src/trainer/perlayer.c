/* Per-layer GaLore updates; see perlayer.h for what is computed when. */
#include <stdlib.h>
#include <string.h>

#include "optim/galore.h"
#include "trainer/perlayer.h"
#include "util/check.h"

static int is_layer(const struct st_model *m, int u) { return m->units[u].kind == ST_UNIT_LAYER; }

/* Parameter i's accumulator length: R's for a GaLore matrix, else its own. */
static size_t acc_numel(const struct st_optim *o, int i)
{
	return o->ps[i].galore ? o->ps[i].state_numel : o->m->params[i].numel;
}

struct phase_floats {
	int phase;
	size_t floats;
};

static int by_phase(const void *a, const void *b)
{
	const int x = ((const struct phase_floats *)a)->phase, y = ((const struct phase_floats *)b)->phase;
	return (x > y) - (x < y);
}

/* The projector backups' capacity in floats: the most projector floats any
 * update t > 1 refreshes (the matrices sharing a phase); and how many.
 * Over the matrices, not the gap's phases: a gap of 2e9 took an array of
 * 16 GB and seconds to scan. */
static size_t backup_floats(const struct st_optim *o, int *count)
{
	const struct st_model *m = o->m;
	struct phase_floats *pf = st_calloc((size_t)m->n_params + 1, sizeof *pf);
	*count = 0;
	if (!pf)
		return SIZE_MAX;
	for (int i = 0; i < m->n_params; i++) {
		const struct st_pstate *ps = &o->ps[i];
		if (is_layer(m, m->params[i].unit) && ps->galore && !ps->full)
			pf[(*count)++] = (struct phase_floats){ps->phase, galore_proj_numel(ps)};
	}
	qsort(pf, (size_t)*count, sizeof *pf, by_phase);
	size_t most = 0;
	for (int k = 0; k < *count;) {
		size_t sum = 0;
		const int phase = pf[k].phase;
		for (; k < *count && pf[k].phase == phase; k++)
			sum += pf[k].floats;
		most = sum > most ? sum : most;
	}
	free(pf);
	return most;
}

size_t perlayer_host_bytes(const struct st_optim *o)
{
	int count;
	const size_t bak = backup_floats(o, &count);
	if (bak == SIZE_MAX)
		return SIZE_MAX; /* no memory even for this: the placement refuses */
	size_t b = (bak ? bak : 1) * sizeof(float);
	for (int i = 0; i < o->m->n_params; i++)
		if (is_layer(o->m, o->m->params[i].unit))
			b += acc_numel(o, i) * sizeof(float);
	return b;
}

int perlayer_init(struct st_perlayer *pl, const struct st_ops *ops, const struct st_optim *o,
		  struct st_store *store, int prefetch, int grad_accum)
{
	memset(pl, 0, sizeof *pl);
	const struct st_model *m = o->m;
	pl->ops = ops;
	pl->o = o;
	pl->m = m;
	pl->store = store;
	pl->prefetch = prefetch;
	pl->grad_accum = grad_accum;
	pl->acc = st_calloc((size_t)m->n_params, sizeof *pl->acc);
	pl->unit_sumsq = st_calloc((size_t)m->n_units, sizeof *pl->unit_sumsq);
	pl->pending = st_calloc((size_t)m->n_params, 1);
	if (!pl->acc || !pl->unit_sumsq || !pl->pending)
		return ST_FAIL;
	for (int i = 0; i < m->n_params; i++) {
		if (!is_layer(m, m->params[i].unit))
			continue;
		const size_t n = acc_numel(o, i);
		pl->acc[i] = st_aligned_alloc(n * sizeof(float));
		if (!pl->acc[i])
			return ST_FAIL;
		pl->acc_bytes += n * sizeof(float);
	}
	pl->bak_floats = backup_floats(o, &pl->cap_bak);
	if (pl->bak_floats == SIZE_MAX)
		return ST_FAIL;
	pl->bak = st_malloc((pl->bak_floats ? pl->bak_floats : 1) * sizeof(float));
	pl->bak_param = st_calloc((size_t)pl->cap_bak + 1, sizeof *pl->bak_param);
	pl->bak_off = st_calloc((size_t)pl->cap_bak + 1, sizeof *pl->bak_off);
	if (!pl->bak || !pl->bak_param || !pl->bak_off)
		return ST_FAIL;
	return ST_OK;
}

void perlayer_free(struct st_perlayer *pl)
{
	if (pl->acc)
		for (int i = 0; i < pl->m->n_params; i++)
			free(pl->acc[i]);
	free(pl->acc);
	free(pl->unit_sumsq);
	free(pl->pending);
	free(pl->bak);
	free(pl->bak_param);
	free(pl->bak_off);
	memset(pl, 0, sizeof *pl);
}

void perlayer_begin(struct st_perlayer *pl, long t)
{
	pl->t = t;
	pl->micro = 0;
	/* The backups are cleared by this step's first hook, not here: the
	 * updater's thread may still be applying the previous step, whose
	 * rotations read them (the hooks run in backward, after the forward
	 * waited for every unit's update). */
	pl->fresh = 1;
}

static int all_zero(const float *g, size_t n)
{
	for (size_t k = 0; k < n; k++)
		if (g[k] != 0.0f)
			return 0;
	return 1;
}

/* The backup of parameter i's projector made in this step, or NULL. */
static const float *backup_of(const struct st_perlayer *pl, int i)
{
	for (int k = 0; k < pl->n_bak; k++)
		if (pl->bak_param[k] == i)
			return pl->bak + pl->bak_off[k];
	return NULL;
}

void perlayer_on_unit(void *ctx, int unit)
{
	struct st_perlayer *pl = ctx;
	const struct st_model *m = pl->m;
	const struct st_optim *o = pl->o;
	if (!is_layer(m, unit))
		return; /* embed and head keep their own gradient slabs */
	const struct st_unit *un = &m->units[unit];
	/* backward goes down the layers: the next ones' state streams in
	 * meanwhile (a no-op where it is resident) */
	for (int k = 1; k <= pl->prefetch && unit - k >= 0 && is_layer(m, unit - k); k++)
		if (o->unit_bytes[unit - k])
			store_prefetch(pl->store, unit - k, ST_SLAB_S);
	if (pl->fresh) {
		pl->n_bak = 0;
		pl->fresh = 0;
	}
	const int first = pl->micro == 0, last = pl->micro >= pl->grad_accum - 1;
	/* the refreshes due at this update, marked at its first micro-batch;
	 * the state is written only by a refresh, else read (the projector):
	 * a read need not wait for the slab's last write-back */
	int refreshed = 0;
	for (int i = un->first_param; i < un->first_param + un->n_params; i++) {
		if (first)
			pl->pending[i] = o->ps[i].galore && !galore_waiting(&o->ps[i], pl->t) &&
					 galore_refresh_due(&o->ps[i], &o->cfg, pl->t);
		refreshed |= pl->pending[i];
	}
	int wrote = 0; /* a refresh ran: the slab goes home (one deferred did not) */
	float *g = store_acquire(pl->store, unit, ST_SLAB_G);
	char *sb = o->unit_bytes[unit] ? store_acquire_as(pl->store, unit, ST_SLAB_S,
							  refreshed ? ST_ACCESS_WRITE : ST_ACCESS_READ)
				       : NULL;
	for (int i = un->first_param; i < un->first_param + un->n_params; i++) {
		const struct st_param *p = &m->params[i];
		const struct st_pstate *ps = &o->ps[i];
		const float *pg = g + p->offset;
		if (!ps->galore) {
			float *a = pl->acc[i];
			if (first)
				memcpy(a, pg, p->numel * sizeof *a);
			else
				for (size_t k = 0; k < p->numel; k++)
					a[k] += pg[k];
			continue;
		}
		if (galore_waiting(ps, pl->t))
			continue; /* no projector yet: no update, the gradient is dropped */
		if (pl->pending[i] && !last && all_zero(pg, p->numel)) {
			/* A zero gradient spans no subspace (a micro-batch of
			 * prompts alone, under a loss mask): the refresh waits
			 * for a micro-batch with one. Those before it add
			 * nothing to R, so the projector it then makes projects
			 * them exactly too. At the last micro-batch it runs
			 * whatever the gradient (galore_refresh keeps the old
			 * subspace for a zero one). */
			if (first)
				memset(pl->acc[i], 0, ps->state_numel * sizeof(float));
			continue;
		}
		if (pl->pending[i]) {
			pl->pending[i] = 0;
			wrote = 1;
			const float *pold = NULL;
			if (pl->t > ps->start && !ps->full) { /* keep the old projector for undo / rotation */
				size_t off = pl->n_bak ? pl->bak_off[pl->n_bak - 1] +
								 galore_proj_numel(&o->ps[pl->bak_param[pl->n_bak - 1]])
						       : 0;
				if (pl->n_bak >= pl->cap_bak || off + galore_proj_numel(ps) > pl->bak_floats) {
					/* cannot happen: phases bound the refreshes per update */
					st_log_warn("internal: projector backup space exceeded");
					abort();
				}
				memcpy(pl->bak + off, sb + ps->proj_off, galore_proj_numel(ps) * sizeof(float));
				pl->bak_param[pl->n_bak] = i;
				pl->bak_off[pl->n_bak] = off;
				pl->n_bak++;
				pold = pl->bak + off;
			}
			galore_refresh(pl->ops, o, i, pg, sb, pl->t, pold);
		}
		galore_project(pl->ops, o, i, pg, sb, pl->acc[i], first ? 0.0f : 1.0f);
	}
	if (pl->grad_accum == 1) /* the whole gradient, as the in-memory path sums it */
		pl->unit_sumsq[unit] = pl->ops->sumsq(g, un->numel);
	memset(g, 0, un->numel * sizeof *g); /* ready for the next layer */
	store_release(pl->store, unit, ST_SLAB_G, 1);
	if (sb) /* a refresh wrote the projector */
		store_release(pl->store, unit, ST_SLAB_S, wrote);
}

void perlayer_end_micro(struct st_perlayer *pl)
{
	pl->micro++;
	if (pl->micro < pl->grad_accum || pl->grad_accum == 1)
		return;
	/* accumulated: each layer's norm from what its optimizer will see */
	const struct st_model *m = pl->m;
	for (int u = 0; u < m->n_units; u++) {
		if (!is_layer(m, u))
			continue;
		const struct st_unit *un = &m->units[u];
		double s = 0;
		for (int i = un->first_param; i < un->first_param + un->n_params; i++) {
			const struct st_pstate *ps = &pl->o->ps[i];
			if (!galore_waiting(ps, pl->t)) /* else acc holds nothing of this step */
				s += pl->ops->sumsq(pl->acc[i], ps->galore ? ps->state_numel
									   : m->params[i].numel);
		}
		pl->unit_sumsq[u] = s;
	}
}

double perlayer_unit_sumsq(const struct st_perlayer *pl, int u) { return pl->unit_sumsq[u]; }

void perlayer_update(void *ctx, int u, float *w, const float *g, void *st, long t, float lr,
		     float grad_scale)
{
	struct st_perlayer *pl = ctx;
	const struct st_model *m = pl->m;
	const struct st_optim *o = pl->o;
	if (!is_layer(m, u)) {
		optim_step_unit(pl->ops, o, u, w, g, st, t, lr, grad_scale);
		return;
	}
	/* t, not pl->t: on the updater's thread this runs beside the next
	 * step's forward, which has moved pl->t on */
	const struct st_unit *un = &m->units[u];
	char *sb = st;
	for (int i = un->first_param; i < un->first_param + un->n_params; i++) {
		const struct st_param *p = &m->params[i];
		const struct st_pstate *ps = &o->ps[i];
		if (!ps->galore) {
			optim_step_param(pl->ops, o, i, w + p->offset, pl->acc[i], sb, t, lr,
					 grad_scale);
			continue;
		}
		if (galore_waiting(ps, t))
			continue;
		const float *pold = backup_of(pl, i);
		if (o->cfg.galore_rotate && pold)
			galore_rotate(pl->ops, o, i, sb, pold);
		const float wd = optim_param_decays(&o->cfg, p) ? o->cfg.weight_decay : 0.0f;
		galore_apply(pl->ops, o, i, w + p->offset, pl->acc[i], sb, t, lr, grad_scale, wd);
	}
}

void perlayer_undo(struct st_perlayer *pl)
{
	for (int k = 0; k < pl->n_bak; k++) {
		const int i = pl->bak_param[k];
		const struct st_pstate *ps = &pl->o->ps[i];
		const int u = pl->m->params[i].unit;
		char *sb = store_acquire(pl->store, u, ST_SLAB_S);
		memcpy(sb + ps->proj_off, pl->bak + pl->bak_off[k], galore_proj_numel(ps) * sizeof(float));
		store_release(pl->store, u, ST_SLAB_S, 1);
	}
	pl->n_bak = 0;
}
