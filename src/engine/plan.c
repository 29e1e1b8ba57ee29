/* The planner; see plan.h. */
#include <stdlib.h>
#include <string.h>

#include "engine/plan.h"
#include "util/check.h"

/* ---- the prediction: a simulated step ------------------------------------ */

enum { Q_COMPUTE, Q_COPY, Q_DISK, Q_OPT, Q__N };

struct sim {
	const struct st_plan_model *pm;
	const struct st_profile *prof;
	const struct st_plan *p;
	int prefetch, threaded, counting;
	double free[Q__N], busy[Q__N];
	double cpu_debt;   /* compute seconds the disk and copy queues' CPU work costs, not yet
			    * charged */
	double disk_read, disk_written, copied;
	/* per unit */
	double *w_ready, *s_ready, *a_ready, *upd_done;
	int *w_issued, *s_issued, *a_issued;
	/* per staged kind, which units' slabs sit in the kind's pool slots (see
	 * pool_touch) */
	int *held[ST_SLAB__COUNT];
	unsigned long *used[ST_SLAB__COUNT];
	int n_held[ST_SLAB__COUNT];
	unsigned long clock;
	/* the CPU worker's progress through one step's jobs */
	int upd_next;      /* next job (unit index in forward order) */
	double upd_submit; /* when the step's jobs were queued */
	double upd_free;   /* when the worker finished its last job */
};

static double max2(double a, double b) { return a > b ? a : b; }

static double serve(struct sim *s, int q, double ready, double dur)
{
	if (q == Q_COMPUTE) { /* CPU work owed by the disk queue: the next compute
			       * pays it, less what the compute sat idle */
		const double idle = ready > s->free[q] ? ready - s->free[q] : 0;
		dur += s->cpu_debt > idle ? s->cpu_debt - idle : 0;
		s->cpu_debt = 0;
	}
	const double start = max2(ready, s->free[q]);
	s->free[q] = start + dur;
	if (s->counting)
		s->busy[q] += dur;
	return s->free[q];
}

/* The store keeps a staged slab in its pool slot after use, until the least
 * recently used slot is needed for another (store.c: find_slot): a read of a
 * slab still there moves nothing. Marks unit's slab of kind as held (the
 * least recently used one out when the pool is full); returns whether it
 * was held already. Counting every read missed the forward's weights the
 * update had just written back, backward's first units, and the gradients
 * the update found still in their slots: the plan read 1.5-2x the bytes
 * train did. The order is the simulation's, not the threads' real
 * interleaving: a model of the pool, not a copy of it (within 17% of
 * train's reads in the six placements measured). */
static int pool_touch(struct sim *s, enum st_slab_kind kind, int unit)
{
	/* one slot of the pool is always taken by a transfer in flight (a
	 * write-back or a prefetch the store will not evict): with all of
	 * them counted the plan read 6-43% less than train on a small and the
	 * 60M model over four placements, with one less 1-17% */
	const int cap = s->p->place.pool_slots[kind] - 1;
	const int n = s->pm->n_units;
	int *held = s->held[kind];
	unsigned long *used = s->used[kind];
	if (cap < 1)
		return 0;
	const int was = held[unit];
	if (!was) {
		if (s->n_held[kind] >= cap) {
			int old = -1;
			for (int u = 0; u < n; u++)
				if (held[u] && (old < 0 || used[u] < used[old]))
					old = u;
			held[old] = 0;
			s->n_held[kind]--;
		}
		held[unit] = 1;
		s->n_held[kind]++;
	}
	used[unit] = ++s->clock;
	return was;
}

/* The slab's data dropped (store_discard): its slot is free. */
static void pool_drop(struct sim *s, enum st_slab_kind kind, int unit)
{
	if (s->held[kind][unit]) {
		s->held[kind][unit] = 0;
		s->n_held[kind]--;
	}
}

/* One transfer of a slab between its home and its working tier; returns when
 * it is done (ready itself when nothing moves). */
static double move(struct sim *s, enum st_slab_kind kind, int unit, double bytes, int to_home,
		   double ready)
{
	enum st_tier home;
	if (kind == ST_SLAB_A)
		home = s->p->act[unit - 1] == ST_ACT_HOST   ? ST_TIER_HOST
		       : s->p->act[unit - 1] == ST_ACT_DISK ? ST_TIER_DISK
							    : ST_TIER_DEVICE;
	else
		home = place_home(&s->p->place, unit, kind);
	if (home == ST_TIER_DEVICE || home == slab_work_tier(kind) || bytes <= 0)
		return ready;
	if (pool_touch(s, kind, unit) && !to_home)
		return ready; /* still in its slot */
	const struct st_profile *pr = s->prof;
	if (home == ST_TIER_DISK) {
		if (s->counting)
			*(to_home ? &s->disk_written : &s->disk_read) += bytes;
		const double dur = bytes / ((to_home ? pr->disk_write_gbs : pr->disk_read_gbs) * 1e9);
		double done = serve(s, Q_DISK, ready, dur);
		/* on shared cores the disk queue's own CPU work slows the compute */
		if (pr->shared_cores)
			s->cpu_debt += dur * pr->disk_cpu_share;
		/* on a real device the bytes also cross the host link (the CPU
		 * backend reads straight into its device memory) */
		if (!pr->shared_cores && kind != ST_SLAB_S) {
			if (s->counting)
				s->copied += bytes;
			done = serve(s, Q_COPY, done, bytes / ((to_home ? pr->d2h_gbs : pr->h2d_gbs) * 1e9));
		}
		return done;
	}
	if (s->counting)
		s->copied += bytes;
	const double dur = bytes / ((to_home ? pr->d2h_gbs : pr->h2d_gbs) * 1e9);
	/* and the copy queue's memcpy too (left out, a tiny model with its
	 * weights on the host took 3.4x its predicted step) */
	if (pr->shared_cores)
		s->cpu_debt += dur * pr->copy_cpu_share;
	return serve(s, Q_COPY, ready, dur);
}

static double cpu_rate(const struct sim *s)
{
	return (s->pm->quantized ? s->prof->cpu_adamw8bit_mparams : s->prof->cpu_adamw_mparams) * 1e6;
}

static double dev_rate(const struct sim *s)
{
	return (s->pm->quantized ? s->prof->dev_adamw8bit_mparams : s->prof->dev_adamw_mparams) * 1e6;
}

/* The CPU's matmul rate (FLOP/s): a profile made in code may leave it 0,
 * as a file without the key reads (profile.h). */
static double cpu_mm_rate(const struct sim *s)
{
	const double g = s->prof->cpu_matmul_gflops;
	return (g > 0 ? g : s->prof->matmul_gflops) * 1e9;
}

/* Seconds of unit u's update on the device (dev) or the CPU: its
 * elementwise optimizer at the profile's rate, and its matmuls (GaLore's
 * projections back) at that side's matmul rate. */
static double upd_s(const struct sim *s, int u, int dev)
{
	const double f = s->pm->upd_flops ? s->pm->upd_flops[u] : 0;
	const double mm = f > 0 ? f / (dev ? s->prof->matmul_gflops * 1e9 : cpu_mm_rate(s)) : 0;
	return (double)s->pm->numel[u] / (dev ? dev_rate(s) : cpu_rate(s)) + mm;
}

/* Issue the CPU worker's reads of unit u's master weights, state and
 * gradient (once per step). */
static void upd_fetch(struct sim *s, int u, double now)
{
	if (u >= s->pm->n_units || s->s_issued[u] || s->p->dev_update[u])
		return;
	s->s_issued[u] = 1;
	double r = move(s, ST_SLAB_S, u, (double)s->pm->s_bytes[u], 0, now);
	r = max2(r, move(s, ST_SLAB_W, u, (double)s->pm->w_bytes[u], 0, now));
	if (s->pm->g_bytes)
		r = max2(r, move(s, ST_SLAB_G, u, (double)s->pm->g_bytes[u], 0, now));
	s->s_ready[u] = r;
}

/* Run the worker's jobs that start by `until` (or until unit `need` is done). */
static void upd_advance(struct sim *s, double until, int need)
{
	const int n = s->pm->n_units;
	const int q = s->prof->shared_cores ? Q_COMPUTE : Q_OPT;
	while (s->upd_next < n) {
		const int u = s->upd_next;
		if (s->p->dev_update[u]) { /* the compute queue runs it before u's forward */
			s->upd_next++;
			continue;
		}
		const double start = max2(s->upd_submit, s->upd_free);
		if (start > until && u > need)
			break;
		for (int i = 0; i <= s->prefetch; i++)
			upd_fetch(s, u + i, start);
		const double end = serve(s, q, max2(start, s->s_ready[u]),
					 upd_s(s, u, 0));
		move(s, ST_SLAB_S, u, (double)s->pm->s_bytes[u], 1, end);
		move(s, ST_SLAB_W, u, (double)s->pm->w_bytes[u], 1, end);
		pool_drop(s, ST_SLAB_G, u); /* applied: the next step's first pass zero-fills it */
		s->upd_done[u] = s->upd_free = end;
		s->upd_next++;
	}
}

/* The unit's weights for a pass: issued when first asked (prefetch or
 * acquire), then ready at their arrival. */
static void fetch_w(struct sim *s, int u, double now)
{
	if (u < 0 || u >= s->pm->n_units || s->w_issued[u])
		return;
	s->w_issued[u] = 1;
	s->w_ready[u] = move(s, ST_SLAB_W, u, (double)s->pm->w_bytes[u], 0, now);
}

/* Seconds of unit u's forward FLOPs: the fp32 matmuls' at the matmul rate
 * for the model's width, the bf16 ones' and attention's at theirs (a
 * profile without a rate: the matmul rate, as tiers.c warns). The backward
 * runs twice as many. */
static double flops_s(const struct sim *s, int u)
{
	const struct st_plan_model *pm = s->pm;
	const struct st_profile *pr = s->prof;
	const double rate = profile_matmul_rate(pr, pm->width, 0), f = pm->fwd_flops[u];
	const double bf = pm->fwd_bf16_flops ? pm->fwd_bf16_flops[u] : 0;
	const double at = pm->fwd_attn_flops ? pm->fwd_attn_flops[u] : 0;
	const double bf_rate = profile_matmul_rate(pr, pm->width, 1);
	const double at_g = profile_attention_rate(pr, pm->seq_len);
	const double at_rate = at_g > 0 ? at_g : rate;
	return (f - bf - at) / rate + bf / bf_rate + at / at_rate;
}

/* and the bytes of its other kernels at the elementwise rate (a profile
 * without one: not charged) */
static double ew_s(const struct sim *s, const double *bytes, int u)
{
	const double bw = s->prof->elementwise_gbs * 1e9;
	return bytes && bw > 0 ? bytes[u] / bw : 0;
}

/* Seconds of unit u's forward and backward compute. */
static double fwd_s(const struct sim *s, int u)
{
	return flops_s(s, u) + ew_s(s, s->pm->fwd_ew_bytes, u);
}

static double bwd_s(const struct sim *s, int u)
{
	return 2 * flops_s(s, u) + ew_s(s, s->pm->bwd_ew_bytes, u);
}

static void sim_step(struct sim *s, double *now)
{
	const struct st_plan_model *pm = s->pm;
	const int n = pm->n_units, L = pm->n_layers;
	for (int a = 0; a < pm->grad_accum; a++) {
		/* forward */
		memset(s->w_issued, 0, (size_t)n * sizeof *s->w_issued);
		for (int u = 0; u < n; u++) {
			if (a == 0 && s->p->dev_update[u]) {
				/* the device's update of u: its weights acquired (the
				 * forward then finds them), updated, and written back
				 * home when streamed (left out, a plan with streamed
				 * weights updated on the device predicted no writes,
				 * where train wrote them all each step) */
				fetch_w(s, u, *now);
				s->upd_done[u] = serve(s, Q_COMPUTE, max2(*now, s->w_ready[u]),
						       upd_s(s, u, 1));
				move(s, ST_SLAB_W, u, (double)pm->w_bytes[u], 1, s->upd_done[u]);
			} else if (a == 0 && s->threaded)
				upd_advance(s, *now, u);
			const double ready = a == 0 ? max2(*now, s->upd_done[u]) : *now;
			fetch_w(s, u, ready);
			const double start = max2(ready, s->w_ready[u]);
			for (int i = 1; i <= s->prefetch; i++)
				fetch_w(s, u + i, start);
			*now = serve(s, Q_COMPUTE, start, fwd_s(s, u));
			if (u >= 1 && u <= L) /* a swapped layer's tensors leave */
				move(s, ST_SLAB_A, u, (double)pm->act_layer, 1, *now);
		}
		/* backward (the previous step's CPU updates all ended before the
		 * forward that needed them) */
		memset(s->w_issued, 0, (size_t)n * sizeof *s->w_issued);
		double *a_ready = s->a_ready;
		int *a_issued = s->a_issued;
		memset(a_issued, 0, (size_t)n * sizeof *a_issued);
		for (int u = n - 1; u >= 0; u--) {
			for (int i = 0; i <= s->prefetch; i++) {
				const int v = u - i;
				if (v < 0)
					break;
				fetch_w(s, v, *now);
				if (v >= 1 && v <= L && !a_issued[v]) {
					a_issued[v] = 1;
					a_ready[v] = move(s, ST_SLAB_A, v, (double)pm->act_layer, 0, *now);
					if (pm->state_in_backward && pm->s_bytes[v])
						a_ready[v] = max2(a_ready[v], move(s, ST_SLAB_S, v,
										    (double)pm->s_bytes[v], 0, *now));
					if (a > 0 && pm->g_bytes) /* accumulating: the gradient so far */
						a_ready[v] = max2(a_ready[v], move(s, ST_SLAB_G, v,
										    (double)pm->g_bytes[v], 0, *now));
				}
			}
			double ready = max2(*now, s->w_ready[u]);
			if (u >= 1 && u <= L)
				ready = max2(ready, a_ready[u]);
			/* the backward, and a recomputed layer's forward again
			 * first */
			double secs = bwd_s(s, u);
			if (u >= 1 && u <= L && s->p->act[u - 1] == ST_ACT_RECOMPUTE)
				secs += fwd_s(s, u);
			/* and its hook's CPU matmuls (per-layer GaLore projecting
			 * the gradient), on the compute thread */
			const double hook = pm->hook_flops ? pm->hook_flops[u] : 0;
			*now = serve(s, Q_COMPUTE, ready, secs + (hook > 0 ? hook / cpu_mm_rate(s) : 0));
			if (u >= 1 && u <= L)
				pool_drop(s, ST_SLAB_A, u); /* used: discarded */
			if (pm->g_bytes && !s->p->dev_update[u])
				move(s, ST_SLAB_G, u, (double)pm->g_bytes[u], 1, *now);
		}
	}
	/* the step's updates: queued once backward ends (the clip factor needs
	 * every gradient's norm); inline when no worker runs */
	memset(s->s_issued, 0, (size_t)n * sizeof *s->s_issued);
	s->upd_next = 0;
	s->upd_submit = *now;
	if (!s->threaded) {
		s->upd_free = *now;
		for (int u = 0; u < n; u++)
			if (!s->p->dev_update[u]) {
				s->upd_free = serve(s, Q_COMPUTE, s->upd_free, upd_s(s, u, 0));
				pool_drop(s, ST_SLAB_G, u);
			}
		for (int u = 0; u < n; u++)
			s->upd_done[u] = s->upd_free;
		s->upd_next = n;
		*now = s->upd_free;
	}
}

void plan_predict(struct st_plan_time *t, const struct st_plan_model *pm,
		  const struct st_profile *prof, const struct st_plan *p, int prefetch, int threaded)
{
	memset(t, 0, sizeof *t);
	const int n = pm->n_units;
	struct sim s = {.pm = pm, .prof = prof, .p = p, .prefetch = prefetch > 0 ? prefetch : 1,
			.threaded = threaded};
	double *d = calloc(4 * (size_t)n, sizeof *d);
	int *iv = calloc((3 + ST_SLAB__COUNT) * (size_t)n, sizeof *iv);
	unsigned long *lru = calloc(ST_SLAB__COUNT * (size_t)n, sizeof *lru);
	if (!d || !iv || !lru) {
		free(d);
		free(iv);
		free(lru);
		t->step_s = 1e30;
		t->bound = "?";
		return;
	}
	s.w_ready = d;
	s.s_ready = d + n;
	s.a_ready = d + 2 * n;
	s.upd_done = d + 3 * n;
	s.w_issued = iv;
	s.s_issued = iv + n;
	s.a_issued = iv + 2 * n;
	for (int k = 0; k < ST_SLAB__COUNT; k++) {
		s.held[k] = iv + (3 + k) * (size_t)n;
		s.used[k] = lru + k * (size_t)n;
	}
	s.upd_next = n;
	/* steady state: the period between the ends of the third and fourth
	 * steps (the fourth's forward runs beside the third's updates) */
	double now = 0, start = 0;
	for (int step = 0; step < 4; step++) {
		if (step == 3) {
			s.counting = 1;
			start = now;
		}
		sim_step(&s, &now);
	}
	t->step_s = now - start;
	t->compute_s = s.busy[Q_COMPUTE];
	t->copy_s = s.busy[Q_COPY];
	t->disk_s = s.busy[Q_DISK];
	t->optimizer_s = s.busy[Q_OPT];
	t->disk_read = s.disk_read;
	t->disk_written = s.disk_written;
	t->copied = s.copied;
	const double q[4] = {t->compute_s, t->optimizer_s, t->disk_s, t->copy_s};
	const char *names[4] = {"compute", "optimizer", "disk", "copy"};
	int b = 0;
	for (int i = 1; i < 4; i++)
		if (q[i] > q[b])
			b = i;
	t->bound = names[b];
	free(d);
	free(iv);
	free(lru);
}

/* ---- the search ----------------------------------------------------------- */

static size_t act_device_bytes(const struct st_plan_model *pm, const unsigned char *act, int pool)
{
	size_t b = pm->act_rest;
	int any_rc = 0;
	for (int l = 0; l < pm->n_layers; l++) {
		if (act[l] == ST_ACT_KEEP)
			b += pm->act_layer;
		else if (act[l] == ST_ACT_RECOMPUTE)
			b += pm->act_input, any_rc = 1;
	}
	/* the recomputed layers' shared block and the recompute sink */
	if (any_rc)
		b += pm->act_layer + pm->act_input;
	return b + (size_t)pool * io_round(pm->act_layer, ST_IO_ALIGN);
}

/* Lay out p->act and p->dev_update: activations, then the slabs' homes. */
static int layout(struct st_plan *p, const struct st_plan_model *pm, const struct st_plan_opts *o)
{
	const int L = pm->n_layers;
	int swapped = 0, on_disk = 0;
	size_t host = 0;
	memset(p->n_act, 0, sizeof p->n_act);
	for (int l = 0; l < L; l++) {
		p->n_act[p->act[l]]++;
		swapped += p->act[l] == ST_ACT_HOST || p->act[l] == ST_ACT_DISK;
		on_disk += p->act[l] == ST_ACT_DISK;
		if (p->act[l] == ST_ACT_HOST)
			host += pm->act_layer;
	}
	p->n_dev_updates = 0;
	for (int u = 0; u < pm->n_units; u++)
		p->n_dev_updates += p->dev_update[u];
	ST_CHECK_USAGE(!on_disk || o->place.n_dirs > 0, "give --offload-dir DIR to swap activations to disk",
		 "%d layers' activations are to be swapped to disk, but there is no offload directory",
		 on_disk);
	/* the swap pool: the layer being written, the next one's input, and
	 * backward's prefetch window */
	int pool = 0;
	if (swapped) {
		pool = o->place.prefetch + 2;
		if (pool > swapped + 1)
			pool = swapped + 1 > 2 ? swapped + 1 : 2;
	}
	p->act_device = act_device_bytes(pm, p->act, pool);
	struct st_place_opts po = o->place;
	if (o->act) /* the user's policy, which may keep more than the planner would */
		po.act_options = "--micro-batch / --seq-len, or let the planner choose (--activations "
				 "auto)";
	po.host_reserved = host;
	po.dev_unit = p->dev_update;
	place_free(&p->place);
	ST_TRY(place_make(&p->place, pm->n_units, pm->w_bytes, pm->g_bytes, pm->s_bytes,
			  p->act_device, &po));
	const size_t block = o->place.io_block ? o->place.io_block : ST_IO_ALIGN;
	if (pool) {
		p->place.pool_slots[ST_SLAB_A] = pool;
		p->place.offloaded = 1;
		p->place.bytes[ST_TIER_DISK] += (size_t)on_disk * io_round(pm->act_layer, block);
	}
	/* the disk tier takes whole stripes: a block in every directory */
	if (p->place.bytes[ST_TIER_DISK] && o->place.n_dirs > 0)
		p->place.bytes[ST_TIER_DISK] =
			io_round(p->place.bytes[ST_TIER_DISK], block * (size_t)o->place.n_dirs);
	return ST_OK;
}

/* Activation policy with nd disk, nh host and nr recomputed layers, the
 * rest kept: the earliest layers swapped (disk first), then recomputed. */
static void act_counts(unsigned char *act, int L, int nd, int nh, int nr)
{
	for (int l = 0; l < L; l++)
		act[l] = l < nd ? ST_ACT_DISK : l < nd + nh ? ST_ACT_HOST : l < nd + nh + nr ? ST_ACT_RECOMPUTE
											: ST_ACT_KEEP;
}

/* d of n units spread evenly. */
static void dev_spread(unsigned char *dev, int n, int d)
{
	for (int u = 0; u < n; u++)
		dev[u] = (int)((long)(u + 1) * d / n) > (int)((long)u * d / n);
}

struct best {
	double step;
	unsigned char *act, *dev;
	int prefetch;
	double compute, moved; /* compute busy, bytes per step: for ties */
};

/* Whether a plan of this step, compute busy time and bytes moved beats b. */
static int better(double step, double compute, double moved, const struct best *b)
{
	const int tie = step <= b->step * (1 + 1e-3) && step >= b->step * (1 - 1e-3);
	return step < b->step * (1 - 1e-3) ||
	       (tie && (compute < b->compute * (1 - 1e-3) ||
			(compute <= b->compute * (1 + 1e-3) && moved < b->moved)));
}

static void consider(struct st_plan *p, const struct st_plan_model *pm,
		     const struct st_profile *prof, const struct st_plan_opts *o, struct best *b)
{
	const int old = st_log_mute(1);
	const int rc = layout(p, pm, o);
	st_log_mute(old);
	if (rc != ST_OK)
		return;
	p->candidates++;
	struct st_plan_time t;
	plan_predict(&t, pm, prof, p, o->place.prefetch, o->threaded_updates && p->place.offloaded);
	/* within 0.1% of the best step, the one that leaves the compute queue
	 * more slack (Fuyou: swap rather than recompute while the link has
	 * room), then the one that moves fewer bytes */
	const double moved = t.disk_read + t.disk_written + t.copied;
	if (better(t.step_s, t.compute_s, moved, b)) {
		b->step = t.step_s;
		b->compute = t.compute_s;
		b->moved = moved;
		memcpy(b->act, p->act, (size_t)pm->n_layers);
		memcpy(b->dev, p->dev_update, (size_t)pm->n_units);
		b->prefetch = o->place.prefetch;
	}
}

/* 0, g, 2g, ... and always max itself */
static int next_count(int v, int g, int max) { return v >= max ? max + 1 : v + g < max ? v + g : max; }

static void search_act(struct st_plan *p, const struct st_plan_model *pm,
		       const struct st_profile *prof, const struct st_plan_opts *o, struct best *b)
{
	const int L = pm->n_layers, g = (L + 15) / 16;
	for (int nd = 0; nd <= L; nd = next_count(nd, g, L))
		for (int nh = 0; nh <= L - nd; nh = next_count(nh, g, L - nd))
			for (int nr = 0; nr <= L - nd - nh; nr = next_count(nr, g, L - nd - nh)) {
				act_counts(p->act, L, nd, nh, nr);
				consider(p, pm, prof, o, b);
			}
}

static void search_dev(struct st_plan *p, const struct st_plan_model *pm,
		       const struct st_profile *prof, const struct st_plan_opts *o, struct best *b)
{
	const int n = pm->n_units, g = (n + 15) / 16;
	for (int d = 0; d <= n; d = next_count(d, g, n)) {
		dev_spread(p->dev_update, n, d);
		consider(p, pm, prof, o, b);
	}
}

int plan_make(struct st_plan *p, const struct st_plan_model *pm, const struct st_profile *prof,
	      const struct st_plan_opts *given)
{
	memset(p, 0, sizeof *p);
	/* a prefetch depth to choose starts the searches at 2 */
	struct st_plan_opts w = *given;
	const struct st_plan_opts *o = &w;
	const int choose_pf = given->place.prefetch <= 0;
	if (choose_pf)
		w.place.prefetch = 2;
	w.place.prefetch_given = !choose_pf;
	const int L = pm->n_layers, n = pm->n_units;
	ST_CHECK_USAGE(o->device_updates <= n, "give --device-updates between 0 and the number of units",
		 "--device-updates %d: the model has %d units", o->device_updates, n);
	ST_CHECK_USAGE(o->device_updates <= 0 ||
			 (o->place.force[ST_SLAB_S] < 0 && o->place.force[ST_SLAB_G] < 0),
		 "drop --place optimizer=/gradients=, or --device-updates",
		 "--device-updates keeps those units' optimizer state and gradients on the device, "
		 "but --place puts them elsewhere");
	p->act = st_calloc((size_t)L + 1, 1);
	p->dev_update = st_calloc((size_t)n, 1);
	struct best b = {.step = 1e300, .compute = 1e300, .moved = 1e300, .act = st_calloc((size_t)L + 1, 1),
			 .dev = st_calloc((size_t)n, 1)};
	int rc = p->act && p->dev_update && b.act && b.dev ? ST_OK : ST_FAIL;
	/* device updates keep a unit's state and gradient on the device: not
	 * where the user placed those kinds elsewhere */
	const int placed = o->place.force[ST_SLAB_S] >= 0 || o->place.force[ST_SLAB_G] >= 0;
	const int choose_act = !o->act, choose_dev = o->device_updates < 0 && pm->g_bytes && !placed;
	if (rc == ST_OK && !prof && (choose_act || choose_dev)) {
		ST_ERROR(NULL, "internal: a plan with choices to make needs a hardware profile");
		rc = ST_FAIL;
	}
	if (rc == ST_OK) {
		if (o->act)
			memcpy(b.act, o->act, (size_t)L);
		dev_spread(b.dev, n, o->device_updates > 0 ? o->device_updates : 0);
		/* activations, then device updates, then activations again; at each
		 * prefetch depth when the depth is the planner's (2 first, so that
		 * ties keep it): a deeper one takes staging buffers that a tight
		 * budget needs for the weights, and the best plan at one depth can
		 * be far from the best at another */
		static const int depths[PLAN_MAX_PREFETCH] = {2, 1, 3, 4};
		/* each depth searched from the same start (with the best of
		 * another depth to beat, a depth's search stopped short of its
		 * own best: the slots a depth keeps decide what its steps read) */
		unsigned char *act0 = st_malloc((size_t)L + 1), *dev0 = st_malloc((size_t)n);
		struct best bk = {.act = st_malloc((size_t)L + 1), .dev = st_malloc((size_t)n)};
		rc = act0 && dev0 && bk.act && bk.dev ? ST_OK : ST_FAIL;
		if (rc == ST_OK) {
			memcpy(act0, b.act, (size_t)L);
			memcpy(dev0, b.dev, (size_t)n);
		}
		/* no unit has more than n - 1 others ahead of it: a deeper
		 * prefetch only adds staging slots that never fill */
		const int deepest = n > 1 ? n - 1 : 1;
		int searched = 0;
		for (int k = 0; rc == ST_OK && k < (choose_pf && prof ? PLAN_MAX_PREFETCH : 1); k++) {
			if (choose_pf && depths[k] > deepest)
				continue;
			if (choose_pf)
				w.place.prefetch = depths[k];
			bk.step = bk.compute = bk.moved = 1e300;
			memcpy(bk.act, act0, (size_t)L);
			memcpy(bk.dev, dev0, (size_t)n);
			for (int round = 0; round < 3; round++) {
				if ((round != 1 && !choose_act) || (round == 1 && !choose_dev))
					continue;
				/* no activation plan fitted without device updates (a
				 * host budget too small for the state): the device
				 * updates' search starts from the leanest activations,
				 * which leave the device the most room for the state */
				if (round == 1 && choose_act && bk.step >= 1e300)
					act_counts(bk.act, L, 0, 0, L);
				memcpy(p->act, bk.act, (size_t)L);
				memcpy(p->dev_update, bk.dev, (size_t)n);
				if (round == 1)
					search_dev(p, pm, prof, o, &bk);
				else
					search_act(p, pm, prof, o, &bk);
			}
			/* the best plan at this depth (all the plan there is when
			 * nothing is chosen) */
			memcpy(p->act, bk.act, (size_t)L);
			memcpy(p->dev_update, bk.dev, (size_t)n);
			if (prof)
				consider(p, pm, prof, o, &bk);
			if (!searched++ || (bk.step < 1e300 && better(bk.step, bk.compute, bk.moved, &b))) {
				b.step = bk.step;
				b.compute = bk.compute;
				b.moved = bk.moved;
				b.prefetch = bk.prefetch;
				memcpy(b.act, bk.act, (size_t)L);
				memcpy(b.dev, bk.dev, (size_t)n);
			}
		}
		free(act0);
		free(dev0);
		free(bk.act);
		free(bk.dev);
		if (choose_pf && b.step >= 1e300)
			w.place.prefetch = 1; /* nothing fits: the most frugal depth says why */
		if (b.step < 1e300)
			w.place.prefetch = b.prefetch;
		memcpy(p->act, b.act, (size_t)L);
		memcpy(p->dev_update, b.dev, (size_t)n);
		if (b.step >= 1e300 && choose_act) /* nothing fits: the most frugal plan says why */
			act_counts(p->act, L, 0, 0, L);
		/* the chosen (or forced) plan, loud this time (not over a search
		 * that ran out of memory) */
		if (rc == ST_OK)
			rc = layout(p, pm, o);
		p->prefetch = w.place.prefetch;
		if (!p->candidates)
			p->candidates = 1;
	}
	if (rc == ST_OK && prof)
		plan_predict(&p->t, pm, prof, p, o->place.prefetch, o->threaded_updates && p->place.offloaded);
	free(b.act);
	free(b.dev);
	if (rc != ST_OK)
		plan_free(p);
	return rc;
}

void plan_free(struct st_plan *p)
{
	place_free(&p->place);
	free(p->act);
	free(p->dev_update);
	memset(p, 0, sizeof *p);
}

int plan_parse_act(const char *s, int n_layers, unsigned char *act, int *forced)
{
	static const char *words[ST_ACT__COUNT] = {"keep", "recompute", "host", "disk"};
	*forced = 1;
	if (!s || !*s || !strcmp(s, "auto")) {
		*forced = 0;
		memset(act, ST_ACT_KEEP, (size_t)n_layers);
		return ST_OK;
	}
	for (int k = 0; k < ST_ACT__COUNT; k++)
		if (!strcmp(s, words[k])) {
			memset(act, k, (size_t)n_layers);
			return ST_OK;
		}
	const char *hint = "use --activations auto, keep, recompute, host, disk, or one letter per "
			   "layer from the first (k keep, r recompute, h host, d disk), e.g. ddhhrrkk";
	ST_CHECK_USAGE((int)strlen(s) == n_layers, hint,
		 "--activations '%s': %zu letter%s for a model of %d layer%s", s, strlen(s),
		 strlen(s) == 1 ? "" : "s", n_layers, n_layers == 1 ? "" : "s");
	for (int l = 0; l < n_layers; l++) {
		const char *at = strchr("krhd", s[l]);
		ST_CHECK_USAGE(s[l] && at, hint, "--activations '%s': '%c' is not k, r, h or d", s, s[l]);
		act[l] = (unsigned char)(at - "krhd");
	}
	return ST_OK;
}
