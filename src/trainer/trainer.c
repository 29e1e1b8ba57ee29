/* The training loop; see trainer.h.
 *
 * Exactness under gradient accumulation and clipping: every micro-batch adds
 * d(loss_sum * scale)/dW into the G slabs, with scale = 1 / (target tokens in
 * the whole step), so after the last micro-batch G is the gradient of the
 * step's mean loss whatever the split. The global norm is then summed over
 * the units' G slabs in unit order (double), and the clip factor reaches the
 * optimizer as grad_scale, so no extra pass rewrites the gradients. */
#define _GNU_SOURCE /* vasprintf */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "io/fsutil.h"
#include "model/hf.h"
#include "engine/memavail.h"
#include "engine/plan.h"
#include "engine/profile.h"
#include "store/io.h"
#include "trainer/interrupt.h"
#include "trainer/offdirs.h"
#include "trainer/planview.h"
#include "trainer/progress.h"
#include "trainer/trainer.h"
#include "util/check.h"
#include "util/finite.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void train_schedule(const struct st_train_opts *o, long done, double tokens_seen, long *total,
		    long *warmup)
{
	const double tokens_per_step = (double)o->micro_batch * o->seq_len * o->grad_accum;
	if (o->steps > 0) {
		*total = o->steps;
	} else {
		/* a token budget: the steps done, then what is left of the budget
		 * at this run's tokens per step (a resume may change them) */
		const double left = o->max_tokens - tokens_seen;
		*total = done + (left > 0 ? (long)ceil(left / tokens_per_step) : 0);
	}
	*warmup = o->warmup >= 0 ? o->warmup : *total / 10;
}

double lr_at(const struct st_train_opts *o, long step, long total, long warmup)
{
	if (warmup > 0 && step <= warmup)
		return o->lr * (double)step / (double)warmup;
	/* llm.c's cosine: the first step after warmup takes the full rate and
	 * the decay runs toward the floor over the rest, the last step just
	 * above it (a step at the floor itself would, at --min-lr-ratio 0, do
	 * nothing; a one-step run took the floor) */
	double span = (double)(total - warmup);
	double frac = span > 0 ? (double)(step - 1 - warmup) / span : 1.0;
	if (frac > 1)
		frac = 1;
	double lo = o->lr * o->min_lr_ratio;
	return lo + 0.5 * (o->lr - lo) * (1.0 + cos(M_PI * frac));
}

static int alloc_state(struct st_trainer *tr)
{
	const struct st_model *m = &tr->s.model;
	tr->state = st_calloc((size_t)m->n_units, sizeof *tr->state);
	if (!tr->state)
		return ST_FAIL;
	for (int u = 0; u < m->n_units; u++) {
		if (!tr->opt.unit_bytes[u])
			continue;
		ST_TRY(store_alloc(&tr->s.store, u, ST_SLAB_S, place_home(&tr->plan.place, u, ST_SLAB_S),
				   tr->opt.unit_bytes[u]));
		if (!store_is_staged(&tr->s.store, u, ST_SLAB_S))
			tr->state[u] = store_acquire(&tr->s.store, u, ST_SLAB_S);
	}
	return ST_OK;
}

/* Budgets: the flags, or from the machine. On the CPU backend the device
 * tier is RAM too, so "auto" leaves both unlimited while the whole training
 * state fits in 90% of the available memory, and otherwise gives the device
 * 30% and the host 60% of it (offload then needs --offload-dir). With one
 * budget given, the other tier gets its share of that rule (unlimited, it
 * would take the rest of the state, more than memory holds). Budgets above
 * the available memory are warned. The available memory is the smaller of
 * MemAvailable and the cgroup's headroom (engine/memavail.h): under a
 * container's or a job's limit the host's RAM is not the run's; which one
 * it is, is said. */
static int choose_budgets(struct st_trainer *tr, size_t budgets[ST_TIER__COUNT], size_t need)
{
	ST_TRY(parse_bytes(tr->o.device_mem, &budgets[ST_TIER_DEVICE], "--device-mem"));
	ST_TRY(parse_bytes(tr->o.host_mem, &budgets[ST_TIER_HOST], "--host-mem"));
	budgets[ST_TIER_DISK] = 0;
	struct st_mem_avail ma;
	mem_avail_read(&ma);
	const size_t avail = ma.bytes;
	const int dev_given = budgets[ST_TIER_DEVICE] != 0, host_given = budgets[ST_TIER_HOST] != 0;
	char b1[32], b2[32], b3[32], b4[32];
	const char *src = ma.from_cgroup ? ", the cgroup limit" : "";
	if (ma.from_cgroup)
		st_log_info("host memory: %s available (cgroup limit: %s, %s in use, %s; MemAvailable "
			    "%s)",
			    fmt_bytes(b1, sizeof b1, (double)avail),
			    fmt_bytes(b2, sizeof b2, (double)ma.cgroup_limit),
			    fmt_bytes(b3, sizeof b3, (double)ma.cgroup_used), ma.cgroup_file,
			    ma.meminfo ? fmt_bytes(b4, sizeof b4, (double)ma.meminfo) : "unknown");
	if (avail && (double)need > 0.9 * (double)avail && (!dev_given || !host_given)) {
		if (!dev_given)
			budgets[ST_TIER_DEVICE] = (size_t)(0.3 * (double)avail);
		if (!host_given)
			budgets[ST_TIER_HOST] = (size_t)(0.6 * (double)avail);
		st_log_info("training state %s exceeds 90%% of the available memory (%s%s): budgets "
			    "device %s%s, host %s%s (set --device-mem / --host-mem to choose)",
			    fmt_bytes(b1, sizeof b1, (double)need), fmt_bytes(b2, sizeof b2, (double)avail),
			    src, fmt_bytes(b3, sizeof b3, (double)budgets[ST_TIER_DEVICE]),
			    dev_given ? " (given)" : "",
			    fmt_bytes(b4, sizeof b4, (double)budgets[ST_TIER_HOST]),
			    host_given ? " (given)" : "");
	}
	/* what the budgets can take of RAM: both tiers on the CPU backend (a
	 * given one and a share sized here alike; an unlimited one holds what
	 * the other leaves), and no more than the state itself */
	const double held = budgets[ST_TIER_DEVICE] && budgets[ST_TIER_HOST]
				    ? fmin((double)budgets[ST_TIER_DEVICE] + (double)budgets[ST_TIER_HOST],
					   (double)need)
				    : (double)need;
	if (avail && (dev_given || host_given) && held > (double)avail)
		st_log_warn("--device-mem and --host-mem let the run hold %s, more than the %s of "
			    "memory available%s: it may be killed for memory (lower them, or leave "
			    "them out to size them from the machine)",
			    fmt_bytes(b1, sizeof b1, held), fmt_bytes(b2, sizeof b2, (double)avail),
			    ma.from_cgroup ? " (the cgroup limit)" : "");
	return ST_OK;
}

/* What the tiers will hold: the plan (engine/plan.h) from the budgets, the
 * choices forced by flags and, once anything must leave the device, the
 * hardware profile. dirs point into dirbuf. */
struct tier_choice {
	struct st_plan_opts po;
	struct st_plan_model pm;
	size_t *wb, *numel;
	size_t *gb;          /* per-layer GaLore's gradient slabs (else the weights' sizes) */
	double *flops;
	unsigned char *act;  /* forced activation policy, when po.act */
	struct st_profile prof;
	int have_prof;
	char dirbuf[ST_PATH];
	const char *dirs[64];
	int n_dirs;
};

static void tier_choice_free(struct tier_choice *ch)
{
	free(ch->wb);
	free(ch->gb);
	free(ch->numel);
	free(ch->flops);
	free(ch->act);
	memset(ch, 0, sizeof *ch);
}

/* The profile file: --profile, else $STRATA_PROFILE, else
 * ~/.cache/strata/profile.json. */
static void profile_path(const struct st_train_opts *o, char *buf, size_t n)
{
	const char *home = getenv("HOME"), *env = getenv("STRATA_PROFILE");
	if (*o->profile)
		snprintf(buf, n, "%s", o->profile);
	else if (env && *env)
		snprintf(buf, n, "%s", env);
	else
		snprintf(buf, n, "%s/.cache/strata/profile.json", home && *home ? home : ".");
}

/* Whether the run has no plan without the disk tier (its state does not
 * fit the budgets, or a kind or activations are placed there). */
static int needs_disk(const struct tier_choice *ch)
{
	struct st_plan_opts po = ch->po;
	po.place.n_dirs = 0;
	struct st_plan p;
	const int old = st_log_mute(1);
	const int rc = plan_make(&p, &ch->pm, &ch->prof, &po);
	st_log_mute(old);
	if (rc == ST_OK)
		plan_free(&p);
	return rc != ST_OK;
}

/* The disk's rates for the profile, in the first offload directory. Where
 * they cannot be measured (a full or read-only file system, or one too
 * small for even the least measurement) and the run has a plan without the
 * disk, that is said and the run goes on with no disk tier: the
 * measurement must not stop a run whose state fits in memory. */
static int measure_disk(struct st_trainer *tr, struct tier_choice *ch)
{
	const int needed = needs_disk(ch);
	const int old = st_log_mute(!needed);
	const int rc = profile_measure_disk(&ch->prof, tr->s.ops, ch->dirs[0]);
	st_log_mute(old);
	if (rc == ST_OK || needed)
		return rc;
	st_log_warn("the disk could not be measured for the planner (%s): the run's state fits "
		    "without it, so it is planned with no disk tier",
		    st_log_last_error());
	ch->po.place.n_dirs = 0;
	return ST_OK;
}

/* A plan that streams from disk predicts with the profile's disk rates:
 * measured with 1 MiB requests 16 deep on one file system. Other request
 * sizes or depths, or another kind of file system, are said, since the
 * prediction (and the plan chosen by it) assumes those rates (a 4 KiB,
 * depth-1 run took 14.5x its predicted step). */
static void note_disk_rates(const struct st_trainer *tr, const struct tier_choice *ch)
{
	const int depth = tr->o.io_depth ? tr->o.io_depth : ST_PROFILE_IO_DEPTH;
	if (ch->po.place.io_block != ST_PROFILE_IO_BLOCK || depth != ST_PROFILE_IO_DEPTH)
		st_log_warn("--io-block %s and --io-depth %d: the profile's disk rates were measured "
			    "with 1M requests 16 deep, and the plan predicts with them; the disk may "
			    "be slower (or faster) than predicted",
			    tr->o.io_block, depth);
	const unsigned long was = (unsigned long)ch->prof.disk_fs_magic,
			    now = profile_fs_magic(ch->dirs[0]);
	if (was && now && was != now) {
		char b1[40], b2[40], path[ST_PATH + 64];
		profile_path(&tr->o, path, sizeof path);
		st_log_warn("the profile's disk rates were measured on %s, but %s is on %s: the plan "
			    "predicts with another disk's rates (delete %s, or give --profile NEW, to "
			    "measure this one)",
			    profile_fs_name(was, b1, sizeof b1), ch->dirs[0],
			    profile_fs_name(now, b2, sizeof b2), path);
	}
}

/* Load the profile, or measure this machine and cache it (a profile without
 * a disk rate is measured again once a run has an offload directory). */
static int get_profile(struct st_trainer *tr, struct tier_choice *ch)
{
	char path[ST_PATH + 64];
	profile_path(&tr->o, path, sizeof path);
	if (fs_exists(path)) {
		ST_TRY(profile_load(&ch->prof, path));
		if (!ch->n_dirs || ch->prof.disk_read_gbs > 0) {
			ch->have_prof = 1;
			return ST_OK;
		}
	}
	st_log_info("measuring this machine for the planner (matmul, copy, optimizers%s; cached in %s)",
		    ch->n_dirs ? ", the first offload directory" : "", path);
	ST_TRY(profile_measure(&ch->prof, tr->s.ops));
	ch->have_prof = 1;
	if (ch->n_dirs)
		ST_TRY(measure_disk(tr, ch));
	/* the cache only saves the next run its measurement: a place that
	 * cannot take it (a read-only home, a full disk) is said, not fatal */
	char dir[ST_PATH + 64];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	const int old = st_log_mute(1);
	int rc = ST_OK;
	if (slash && slash != dir) {
		*slash = '\0';
		rc = fs_mkdir_p(dir);
	}
	if (rc == ST_OK)
		rc = profile_save(&ch->prof, path);
	st_log_mute(old);
	if (rc != ST_OK)
		st_log_warn("the measured profile could not be cached (%s): this run uses it, and the "
			    "next one measures again (give --profile FILE or $STRATA_PROFILE a writable "
			    "path to keep it)",
			    st_log_last_error());
	return ST_OK;
}

/* The flags' forced choices: --recompute N|all (the first N layers, the rest
 * kept) or --activations; --device-updates. */
static int forced_choices(struct st_trainer *tr, struct tier_choice *ch)
{
	const int L = tr->s.model.cfg.n_layers;
	const int rc_set = strcmp(tr->o.recompute, "auto") != 0;
	const int act_set = strcmp(tr->o.activations, "auto") != 0;
	ST_CHECK(!(rc_set && act_set), "give one of --recompute and --activations",
		 "--recompute %s and --activations %s both choose the activation policy",
		 tr->o.recompute, tr->o.activations);
	ch->act = st_calloc((size_t)L + 1, 1);
	if (!ch->act)
		return ST_FAIL;
	if (rc_set) {
		long v = L;
		char *end = NULL;
		if (strcmp(tr->o.recompute, "all"))
			v = strtol(tr->o.recompute, &end, 10);
		ST_CHECK(!end || (!*end && end != tr->o.recompute && v >= 0 && v <= L),
			 "use --recompute N (0 to the number of layers), all, or auto",
			 "--recompute '%s' is not a layer count between 0 and %d", tr->o.recompute, L);
		for (int l = 0; l < L; l++)
			ch->act[l] = l < v ? ST_ACT_RECOMPUTE : ST_ACT_KEEP;
		ch->po.act = ch->act;
	} else {
		int forced;
		ST_TRY(plan_parse_act(tr->o.activations, L, ch->act, &forced));
		ch->po.act = forced ? ch->act : NULL;
	}
	ch->po.device_updates = -1;
	if (strcmp(tr->o.device_updates, "auto")) {
		char *end;
		long v = strtol(tr->o.device_updates, &end, 10);
		ST_CHECK(!*end && end != tr->o.device_updates && v >= 0 && v <= tr->s.model.n_units,
			 "use --device-updates N (0 to the number of units) or auto",
			 "--device-updates '%s' is not a unit count between 0 and %d", tr->o.device_updates,
			 tr->s.model.n_units);
		ST_CHECK(!(v && tr->per_layer), "give --galore-per-layer false for device updates",
			 "GaLore's per-layer updates run as backward goes; they cannot move to the device");
		ch->po.device_updates = (int)v;
	}
	return ST_OK;
}

static int decide_tiers(struct st_trainer *tr, struct tier_choice *ch)
{
	struct st_session *s = &tr->s;
	const struct st_model *m = &s->model;
	const int n = m->n_units, B = tr->o.micro_batch, T = tr->o.seq_len;
	memset(ch, 0, sizeof *ch);
	ch->wb = st_calloc((size_t)n, sizeof *ch->wb);
	ch->numel = st_calloc((size_t)n, sizeof *ch->numel);
	ch->flops = st_calloc((size_t)n, sizeof *ch->flops);
	ch->gb = st_calloc((size_t)n, sizeof *ch->gb);
	if (!ch->wb || !ch->numel || !ch->flops || !ch->gb)
		return ST_FAIL;
	size_t need = 0;
	for (int u = 0; u < n; u++) {
		ch->numel[u] = m->units[u].numel;
		ch->wb[u] = m->units[u].numel * sizeof(float);
		ch->flops[u] = model_unit_fwd_flops(m, u, T) * B * T;
		need += 2 * ch->wb[u] + tr->opt.unit_bytes[u];
	}
	/* Per-layer GaLore: the layers share one gradient slab of the largest
	 * layer's size, held by the first layer (session_alloc), and the other
	 * units keep their own; all on the device, where the session puts the
	 * shared one. (Counting none let a plan that "fits" fail at setup.) */
	int first_layer = -1;
	for (int u = 0; u < n; u++) {
		const int layer = m->units[u].kind == ST_UNIT_LAYER;
		if (layer && first_layer < 0)
			first_layer = u;
		ch->gb[u] = layer && tr->per_layer ? 0 : ch->wb[u];
		if (layer && tr->per_layer && ch->wb[u] > ch->gb[first_layer])
			ch->gb[first_layer] = ch->wb[u];
	}
	need += acts_total_floats(m, B, T, 0) * sizeof(float);
	ch->pm = (struct st_plan_model){
		.n_units = n, .n_layers = m->cfg.n_layers, .w_bytes = ch->wb,
		.g_bytes = ch->gb, .s_bytes = tr->opt.unit_bytes,
		.numel = ch->numel, .fwd_flops = ch->flops,
		.act_layer = acts_layer_floats(m, B, T) * sizeof(float),
		.act_input = acts_input_floats(m, B, T) * sizeof(float),
		.act_rest = acts_rest_floats(m, B, T) * sizeof(float),
		.grad_accum = tr->o.grad_accum,
		.quantized = tr->opt.cfg.kind == ST_OPT_ADAMW8 || tr->opt.cfg.kind == ST_OPT_GALORE_ADAMW8};
	ch->po.place.prefetch = tr->o.prefetch;
	ch->po.threaded_updates = !tr->per_layer;
	ST_TRY(choose_budgets(tr, ch->po.place.budget, need));
	ST_TRY(forced_choices(tr, ch));
	ST_TRY(parse_place(tr->o.place, ch->po.place.force));
	if (tr->per_layer) {
		const int g = ch->po.place.force[ST_SLAB_G];
		ST_CHECK(g < 0 || g == ST_TIER_DEVICE,
			 "give --galore-per-layer false to place gradients elsewhere",
			 "GaLore's per-layer updates keep their gradients on the device; --place "
			 "gradients=%s cannot apply",
			 g == ST_TIER_HOST ? "host" : "disk");
		ch->po.place.force[ST_SLAB_G] = ST_TIER_DEVICE;
		ch->po.device_updates = 0; /* its updates run in the backward's hook */
	}
	/* the directories, split at commas */
	snprintf(ch->dirbuf, sizeof ch->dirbuf, "%s", tr->o.offload_dir);
	for (char *save = NULL, *d = strtok_r(ch->dirbuf, ",", &save); d;
	     d = strtok_r(NULL, ",", &save)) {
		ST_CHECK(ch->n_dirs < 64, "give at most 64 --offload-dir directories",
			 "too many offload directories");
		ch->dirs[ch->n_dirs++] = d;
	}
	ch->po.place.n_dirs = ch->n_dirs;
	/* plan checks as train does (trainer/offdirs.h), and passes a directory
	 * train would make (its --out) */
	ST_TRY(offdirs_check_exist(ch->dirs, ch->n_dirs, tr->o.out));
	ST_CHECK(tr->o.io_depth >= 0 && tr->o.io_depth <= 4096, "use e.g. --io-depth 16",
		 "--io-depth %d must be between 1 and 4096 (0: 16)", tr->o.io_depth);
	ST_TRY(place_check_disk(ch->po.place.force, ch->n_dirs)); /* before a profile is measured */
	ST_TRY(parse_bytes(tr->o.io_block, &ch->po.place.io_block, "--io-block"));
	if (!ch->po.place.io_block)
		ch->po.place.io_block = 1u << 20; /* "auto": the store's default */
	ST_CHECK(ch->po.place.io_block % ST_IO_ALIGN == 0 && ch->po.place.io_block <= (64u << 20),
		 "use e.g. --io-block 1M (a multiple of 4K, at most 64M)",
		 "--io-block %s must be a multiple of %d bytes, at most 64 MiB", tr->o.io_block,
		 ST_IO_ALIGN);

	/* Everything on the device with nothing forced elsewhere needs no
	 * prediction (and no profile): no plan moves fewer bytes. */
	int all_keep = 1;
	for (int l = 0; ch->po.act && l < m->cfg.n_layers; l++)
		all_keep &= ch->po.act[l] == ST_ACT_KEEP;
	if (all_keep && ch->po.device_updates <= 0) {
		struct st_plan_opts keep = ch->po;
		unsigned char *keep_all = st_calloc((size_t)m->cfg.n_layers + 1, 1);
		if (!keep_all)
			return ST_FAIL;
		keep.act = keep_all;
		keep.device_updates = 0;
		const int old = st_log_mute(1);
		int rc = plan_make(&tr->plan, &ch->pm, NULL, &keep);
		st_log_mute(old);
		free(keep_all);
		if (rc == ST_OK && !tr->plan.place.offloaded)
			return ST_OK;
		plan_free(&tr->plan);
	}
	ST_TRY(get_profile(tr, ch));
	ST_TRY(plan_make(&tr->plan, &ch->pm, &ch->prof, &ch->po));
	ST_CHECK(!(tr->per_layer && tr->plan.place.offloaded),
		 "give --galore-per-layer false to offload GaLore, or raise the budgets",
		 "GaLore's per-layer updates keep every slab in memory; this run needs offload");
	const struct st_plan *p = &tr->plan;
	/* the directories the plan writes to, before anything is written */
	size_t ckpt = 0;
	for (int u = 0; u < n; u++)
		ckpt += ch->wb[u] + tr->opt.unit_bytes[u];
	const struct offdirs_need room = {.disk = p->place.bytes[ST_TIER_DISK],
					  .io_block = ch->po.place.io_block, .ckpt = ckpt,
					  .out = tr->o.out};
	ST_TRY(offdirs_check_room(ch->dirs, ch->po.place.n_dirs, &room));
	if (p->place.bytes[ST_TIER_DISK])
		note_disk_rates(tr, ch);
	if (tr->plan_only)
		return ST_OK;
	if (p->n_act[ST_ACT_KEEP] < m->cfg.n_layers) {
		char b1[32], b2[32];
		st_log_info("activations: %d layers kept, %d recomputed in backward, %d swapped to the "
			    "host, %d to disk (%s on the device instead of %s)",
			    p->n_act[ST_ACT_KEEP], p->n_act[ST_ACT_RECOMPUTE], p->n_act[ST_ACT_HOST],
			    p->n_act[ST_ACT_DISK], fmt_bytes(b1, sizeof b1, (double)p->act_device),
			    fmt_bytes(b2, sizeof b2, (double)acts_total_floats(m, B, T, 0) * sizeof(float)));
	}
	if (p->n_dev_updates)
		st_log_info("optimizer: %d of %d units update on the device", p->n_dev_updates, n);
	st_log_info("plan: predicted %.3f s per step, bound by %s, prefetch %d (%d plans compared)",
		    p->t.step_s, p->t.bound, p->prefetch, p->candidates);
	return ST_OK;
}

/* A held-out evaluation runs the forward once per micro-batch of windows,
 * so weights that stream from the host or disk stream once per micro-batch:
 * with the defaults (131072 tokens at 2 x 64) that is 1024 passes over the
 * weights, more than 100 training steps move. Said where an evaluation
 * costs more than a tenth of the weight traffic of the steps between two. */
static void note_eval_traffic(const struct st_trainer *tr)
{
	const struct st_model *m = &tr->s.model;
	const struct st_place *pl = &tr->plan.place;
	if (!tr->data.has_val || !pl->home)
		return;
	double streamed = 0;
	for (int u = 0; u < m->n_units; u++) {
		const enum st_tier h = place_home(pl, u, ST_SLAB_W);
		if (h != ST_TIER_DEVICE && h != slab_work_tier(ST_SLAB_W))
			streamed += (double)m->units[u].numel * sizeof(float);
	}
	if (!streamed)
		return;
	const long windows = data_eval_windows(&tr->data, tr->o.seq_len, tr->o.eval_tokens);
	const long passes = (windows + tr->o.micro_batch - 1) / tr->o.micro_batch;
	/* a training step streams them forward and backward per micro-batch */
	const double steps = (double)passes / (2.0 * tr->o.grad_accum);
	/* the steps between two evaluations: the interval, or what is left of
	 * the run (one at its end) */
	const long left = tr->total_steps - tr->step;
	const long interval = tr->o.eval_interval > 0 && tr->o.eval_interval < left ? tr->o.eval_interval
										     : left;
	if (interval < 1 || steps < 0.1 * (double)interval)
		return;
	char b1[32], b2[32];
	st_log_warn("each held-out evaluation (%ld micro-batches of %ld windows) streams the offloaded "
		    "weights (%s) once per micro-batch: %s, the weight traffic of about %.0f training "
		    "steps, every %ld steps; lower --eval-tokens or raise --eval-interval",
		    passes, windows, fmt_bytes(b1, sizeof b1, streamed),
		    fmt_bytes(b2, sizeof b2, streamed * (double)passes), steps, interval);
}

/* Decide every slab's home, allocate the slabs and the executor, start the
 * store (staging pools, disk tier) and load the weights. */
static int setup_tiers(struct st_trainer *tr, const char *model_dir, int grads)
{
	struct st_session *s = &tr->s;
	struct tier_choice ch;
	int rc = decide_tiers(tr, &ch);
	for (int t = 0; rc == ST_OK && t < ST_TIER__COUNT; t++)
		s->store.tiers[t].budget = ch.po.place.budget[t];
	if (rc == ST_OK)
		rc = session_alloc(s, &tr->plan.place, grads);
	if (rc == ST_OK)
		rc = alloc_state(tr);
	if (rc == ST_OK)
		rc = session_exec_policy(s, tr->o.micro_batch, tr->o.seq_len, tr->plan.act);
	size_t block = 0;
	if (rc == ST_OK)
		rc = parse_bytes(tr->o.io_block, &block, "--io-block");
	struct st_offload_cfg oc = {.dirs = ch.dirs, .n_dirs = ch.n_dirs, .io_block = block,
				    .io_depth = tr->o.io_depth};
	memcpy(oc.pool_slots, tr->plan.place.pool_slots, sizeof oc.pool_slots);
	if (rc == ST_OK)
		rc = store_start(&s->store, &oc);
	tier_choice_free(&ch);
	ST_TRY(rc);
	s->exec.prefetch = tr->plan.prefetch;
	rc = session_load_weights(s, model_dir);
	if (rc != ST_OK && *tr->o.resume)
		ckpt_name_earlier(model_dir);
	return rc;
}

int trainer_plan(const struct st_train_opts *o)
{
	struct st_trainer *tr = st_calloc(1, sizeof *tr);
	if (!tr)
		return ST_FAIL;
	tr->o = *o;
	tr->plan_only = 1;
	if (tr->o.steps <= 0 && tr->o.max_tokens <= 0)
		tr->o.steps = 1; /* a plan needs no training length */
	const struct st_ops *ops;
	enum st_optim_kind kind;
	char model_dir[4096], path[4200];
	struct st_config cfg;
	int rc = train_opts_validate(&tr->o);
	if (rc == ST_OK)
		rc = session_backend(&ops, tr->o.device, tr->o.threads);
	if (rc == ST_OK)
		rc = optim_parse_kind(&kind, tr->o.optimizer);
	if (rc == ST_OK && *tr->o.resume)
		rc = ckpt_resolve(model_dir, sizeof model_dir, tr->o.resume);
	else if (rc == ST_OK && !*tr->o.model) {
		ST_ERROR("pass --model DIR", "strata plan: no model (--model DIR)");
		rc = ST_FAIL;
	} else if (rc == ST_OK)
		snprintf(model_dir, sizeof model_dir, "%s", tr->o.model);
	tr->per_layer = (kind == ST_OPT_GALORE_ADAMW || kind == ST_OPT_GALORE_ADAMW8) &&
			tr->o.galore_per_layer;
	if (rc == ST_OK) {
		snprintf(path, sizeof path, "%s/config.json", model_dir);
		rc = config_load(&cfg, path);
	}
	int built = 0, optim = 0;
	if (rc == ST_OK && tr->o.seq_len > cfg.max_seq) { /* train refuses it: see trainer_open */
		ST_ERROR("lower --seq-len", "--seq-len %d exceeds the model's max_position_embeddings %d",
			 tr->o.seq_len, cfg.max_seq);
		rc = ST_FAIL;
	}
	if (rc == ST_OK)
		rc = session_build(&tr->s, ops, &cfg, NULL);
	built = rc == ST_OK;
	/* the weights' headers against config.json, as train checks them (a
	 * config.json alone plans a model not yet made: said) */
	if (rc == ST_OK && weights_present(model_dir))
		rc = session_check_weights(&tr->s, model_dir);
	else if (rc == ST_OK)
		st_log_info("%s holds no weights (model.safetensors): planned from its config.json "
			    "alone", model_dir);
	struct st_optim_cfg oc = {.kind = kind, .beta1 = (float)tr->o.beta1, .beta2 = (float)tr->o.beta2,
				  .eps = (float)tr->o.eps, .momentum = (float)tr->o.momentum,
				  .weight_decay = (float)tr->o.weight_decay,
				  .quant_block = tr->o.quant_block, .quant_min_numel = tr->o.quant_min_size,
				  .galore_rank = tr->o.galore_rank, .galore_gap = tr->o.galore_update_gap,
				  .galore_spread = tr->o.galore_start_spread,
				  .galore_scale = (float)tr->o.galore_scale, .seed = (uint64_t)tr->o.seed};
	if (rc == ST_OK)
		rc = optim_init(&tr->opt, &oc, &tr->s.model);
	optim = rc == ST_OK;
	if (rc == ST_OK && *tr->o.resume)
		rc = ckpt_check_state_settings(tr, model_dir);
	struct tier_choice ch = {0};
	if (rc == ST_OK)
		rc = decide_tiers(tr, &ch);
	if (rc == ST_OK)
		plan_print(&tr->s.model, &tr->plan, &ch.pm, &tr->o, ch.have_prof ? &ch.prof : NULL);
	tier_choice_free(&ch);
	plan_free(&tr->plan);
	if (optim)
		optim_free(&tr->opt);
	if (built)
		session_close(&tr->s);
	free(tr);
	return rc;
}

static void wait_update(void *ctx, int unit)
{
	updater_wait_unit(ctx, unit);
}

/* One run per run directory: an exclusive flock on OUT/.lock, held until
 * trainer_close (or the process ends, however it ends, so a killed run leaves
 * no stale lock). Two runs into one directory would write the same step-N and
 * remove each other's temporary checkpoints. The holder writes its PID into
 * the file for the refusal to name; the file itself stays. */
static int lock_run_dir(struct st_trainer *tr)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/.lock", tr->o.out);
	/* A run that could not start removes the lock file it made with the
	 * directory (cmd_train.c): a lock taken on a file since unlinked is
	 * nobody's, so the file is checked to still be the one locked. */
	for (int tries = 0;; tries++) {
		const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		ST_CHECK(fd >= 0, "choose a writable --out directory", "cannot open %s: %s", path,
			 strerror(errno));
		if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
			const int err = errno;
			if (err != EWOULDBLOCK) { /* a file system without flock (some FUSE ones) */
				st_log_warn("cannot lock %s (%s): a second run started into %s would "
					    "not be refused",
					    path, strerror(err), tr->o.out);
				tr->lock_fd = fd; /* unlocked; kept so that a failed start removes it */
				return ST_OK;
			}
			char pid[32] = "";
			const ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
			close(fd);
			pid[n > 0 ? n : 0] = '\0';
			pid[strcspn(pid, "\n")] = '\0';
			ST_ERROR("wait for that run to end, or pick another --out",
				 "the run directory %s is in use by another strata train (pid %s)",
				 tr->o.out, *pid ? pid : "unknown");
			return ST_FAIL;
		}
		struct stat held, now;
		if (fstat(fd, &held) == 0 && stat(path, &now) == 0 && held.st_dev == now.st_dev &&
		    held.st_ino == now.st_ino) {
			char pid[32];
			const int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
			if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len)
				st_log_warn("cannot write the PID into %s: %s", path, strerror(errno));
			tr->lock_fd = fd;
			return ST_OK;
		}
		close(fd);
		ST_CHECK(tries < 10, "try again", "the lock file %s keeps being replaced", path);
	}
}

/* The paths a checkpoint's trainer.json saves, made absolute: a --resume
 * from another working directory reads them back. (On a resume "model" is
 * the original run's, for the record only: it stays as saved.) */
static int absolute_paths(struct st_train_opts *o, int resuming)
{
	char *paths[] = {o->data, o->val, o->out, o->profile, o->trace, resuming ? "" : o->model};
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
		ST_TRY(fs_absolute(paths[i], ST_PATH));
	/* --offload-dir: a comma-separated list */
	char joined[sizeof o->offload_dir] = "", *save = NULL;
	for (char *d = strtok_r(o->offload_dir, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
		char one[ST_PATH];
		snprintf(one, sizeof one, "%s", d);
		ST_TRY(fs_absolute(one, sizeof one));
		const size_t len = strlen(joined);
		ST_CHECK(len + strlen(one) + 2 < sizeof joined, "use shorter --offload-dir paths",
			 "--offload-dir: the absolute paths are too long together");
		snprintf(joined + len, sizeof joined - len, "%s%s", len ? "," : "", one);
	}
	memcpy(o->offload_dir, joined, sizeof joined);
	return ST_OK;
}

static int check_run_dir(struct st_trainer *tr, int resuming)
{
	const struct st_train_opts *o = &tr->o;
	ST_CHECK(*o->out, "pass --out DIR", "no run directory given (--out)");
	if (fs_mkdir_p(o->out) != ST_OK) {
		ST_ERROR("choose a writable --out directory", "cannot create the run directory %s",
			 o->out);
		return ST_FAIL;
	}
	/* a model (or checkpoint) directory as --out: its root config.json would
	 * then shadow the run's `latest` for eval, sample and --resume */
	char model_conf[4200];
	snprintf(model_conf, sizeof model_conf, "%s/config.json", o->out);
	ST_CHECK(!fs_exists(model_conf), "give the run its own --out directory",
		 "%s holds a model (config.json); a run directory keeps its checkpoints in "
		 "step-NNNNNN subdirectories and must not be one",
		 o->out);
	ST_TRY(lock_run_dir(tr));
	char probe[4096];
	snprintf(probe, sizeof probe, "%s/.write-test", o->out);
	if (fs_write_file_atomic(probe, "ok", 2) != ST_OK) {
		/* the write's own error (no space, no permission) came first, with its hint */
		ST_ERROR(NULL, "the run cannot start: nothing can be written in its directory %s",
			 o->out);
		return ST_FAIL;
	}
	unlink(probe);
	char latest[4096];
	snprintf(latest, sizeof latest, "%s/latest", o->out);
	struct stat st;
	long first;
	/* `latest`, even dangling, or a step directory (a run killed before its
	 * first `latest`) */
	const int holds = lstat(latest, &st) == 0 || ckpt_count_later(o->out, -1, LONG_MAX, &first);
	ST_CHECK(resuming || !holds, "resume it with --resume DIR, or pick another --out",
		 "the run directory %s already holds checkpoints; refusing to overwrite them", o->out);
	if (resuming && holds) {
		/* a resume writes into the checkpoint's own run directory (where it
		 * is, or where it was saved: a step directory copied out and
		 * resumed back), or one without checkpoints: never among another
		 * run's */
		char ckpt[4096], parent[4096], real_parent[PATH_MAX], real_out[PATH_MAX];
		char real_saved[PATH_MAX];
		ST_TRY(ckpt_resolve(ckpt, sizeof ckpt, o->resume));
		ST_CHECK(realpath(ckpt, parent), NULL, "cannot resolve %s: %s", ckpt, strerror(errno));
		fs_dirname(real_parent, sizeof real_parent, parent);
		struct st_train_opts saved;
		train_opts_defaults(&saved);
		const int own = realpath(o->out, real_out) &&
				(!strcmp(real_parent, real_out) ||
				 (ckpt_read_options(&saved, ckpt) == ST_OK && realpath(saved.out, real_saved) &&
				  !strcmp(real_saved, real_out)));
		ST_CHECK(own,
			 "give --out an empty or new directory, or resume that run itself with --resume DIR",
			 "%s holds the checkpoints of another run than %s; a resume writes only into its "
			 "own run directory or a new one",
			 o->out, ckpt);
	}
	return ST_OK;
}

/* A metrics.jsonl whose last line is cut short (a run killed in a write, a
 * power loss, or a full disk where the cut back failed) is cut back to its
 * last complete line, warned: the next record, a resume marker, would
 * otherwise be glued onto it and both lost to a JSON reader. */
static void metrics_trim_partial(int fd, const char *path)
{
	const off_t size = lseek(fd, 0, SEEK_END);
	char buf[4096];
	off_t keep = size;
	while (keep > 0) {
		const off_t at = keep > (off_t)sizeof buf ? keep - (off_t)sizeof buf : 0;
		const ssize_t r = pread(fd, buf, (size_t)(keep - at), at);
		if (r != keep - at)
			return; /* unreadable: left as it is */
		ssize_t k = r;
		while (k > 0 && buf[k - 1] != '\n')
			k--;
		if (k > 0) {
			keep = at + k;
			break;
		}
		keep = at;
	}
	if (keep == size)
		return;
	if (ftruncate(fd, keep) == 0)
		st_log_warn("%s ended in a partial line (a run killed while writing it): cut back to "
			    "its last complete line (%lld bytes dropped)",
			    path, (long long)(size - keep));
	else
		st_log_warn("%s ends in a partial line and cannot be cut back (%s): the next record "
			    "follows it on the same line",
			    path, strerror(errno));
}

int trainer_open(struct st_trainer *tr, const struct st_train_opts *o)
{
	memset(tr, 0, sizeof *tr);
	tr->lock_fd = -1;
	tr->o = *o;
	tr->last_loss = tr->last_val_loss = NAN; /* none yet */
	pthread_mutex_init(&tr->ck.mu, NULL);
	pthread_cond_init(&tr->ck.cv, NULL);
	ST_TRY(train_opts_validate(&tr->o));
	const int resuming = *tr->o.resume != 0;
	ST_TRY(check_run_dir(tr, resuming));

	const struct st_ops *ops;
	ST_TRY(session_backend(&ops, tr->o.device, tr->o.threads));
	enum st_optim_kind kind;
	ST_TRY(optim_parse_kind(&kind, tr->o.optimizer));
	tr->per_layer = (kind == ST_OPT_GALORE_ADAMW || kind == ST_OPT_GALORE_ADAMW8) &&
			tr->o.galore_per_layer;
	const int grads = tr->per_layer ? ST_GRADS_SHARED_LAYERS : ST_GRADS_ALL;
	char model_dir[4096], path[4200];
	if (resuming) {
		ST_TRY(ckpt_resolve(tr->ckpt_loaded, sizeof tr->ckpt_loaded, tr->o.resume));
		snprintf(model_dir, sizeof model_dir, "%s", tr->ckpt_loaded);
	} else {
		ST_CHECK(*tr->o.model, "create one with `strata init --config tiny --out DIR`",
			 "no model given (--model DIR)");
		snprintf(model_dir, sizeof model_dir, "%s", tr->o.model);
	}
	snprintf(tr->model_dir, sizeof tr->model_dir, "%s", model_dir);
	ST_TRY(ckpt_read_tokenizer_files(tr));
	struct st_config cfg;
	snprintf(path, sizeof path, "%s/config.json", model_dir);
	if (config_load(&cfg, path) != ST_OK) {
		if (resuming)
			ckpt_name_earlier(model_dir);
		return ST_FAIL;
	}
	ST_TRY(session_build(&tr->s, ops, &cfg, NULL));
	/* the weights' headers against config.json before anything is sized by it */
	if (session_check_weights(&tr->s, model_dir) != ST_OK) {
		if (resuming)
			ckpt_name_earlier(model_dir);
		return ST_FAIL;
	}
	const struct st_model *m = &tr->s.model;
	ST_CHECK(tr->o.seq_len <= m->cfg.max_seq, "lower --seq-len",
		 "--seq-len %d exceeds the model's max_position_embeddings %d", tr->o.seq_len,
		 m->cfg.max_seq);

	ST_TRY(data_open(&tr->data, tr->o.data, tr->o.val, m->cfg.vocab_size, 1));
	ST_TRY(absolute_paths(&tr->o, resuming)); /* trainer.json must name them from anywhere */
	ST_TRY(data_check_tokenizer(&tr->data, model_dir));
	ST_CHECK(tr->data.train.n_tokens > (uint64_t)tr->o.seq_len,
		 "use more text, or a shorter --seq-len",
		 "the training data %s holds %llu tokens, fewer than one window of %d + 1",
		 tr->data.train.path, (unsigned long long)tr->data.train.n_tokens, tr->o.seq_len);
	if (!tr->data.has_val)
		st_log_warn("no validation shard: evaluation is skipped (give --val FILE)");

	struct st_optim_cfg oc = {.beta1 = (float)tr->o.beta1, .beta2 = (float)tr->o.beta2,
				  .eps = (float)tr->o.eps, .momentum = (float)tr->o.momentum,
				  .weight_decay = (float)tr->o.weight_decay,
				  .decay_norms = tr->o.decay_norms, .decay_embed = tr->o.decay_embed,
				  .quant_block = tr->o.quant_block,
				  .quant_min_numel = tr->o.quant_min_size,
				  .galore_rank = tr->o.galore_rank,
				  .galore_gap = tr->o.galore_update_gap,
				  .galore_spread = tr->o.galore_start_spread,
				  .galore_scale = (float)tr->o.galore_scale,
				  .galore_proj = strcmp(tr->o.galore_proj, "svd") ? ST_GALORE_RANDOMIZED
										   : ST_GALORE_SVD,
				  .galore_rotate = !strcmp(tr->o.galore_moments, "rotate"),
				  .seed = (uint64_t)tr->o.seed};
	ST_TRY(optim_parse_kind(&oc.kind, tr->o.optimizer));
	ST_TRY(optim_init(&tr->opt, &oc, m));
	ST_TRY(setup_tiers(tr, model_dir, grads));
	tr->grad_sumsq = st_calloc((size_t)m->n_units, sizeof *tr->grad_sumsq);
	if (!tr->grad_sumsq)
		return ST_FAIL;
	if (!tr->per_layer) {
		ST_TRY(updater_init(&tr->up, ops, &tr->opt, m, &tr->s.store, tr->plan.prefetch,
				    tr->o.threads, tr->plan.place.offloaded));
		tr->s.exec.before_unit = wait_update;
		tr->s.exec.before_unit_ctx = &tr->up;
		tr->up.before_update = ckpt_wait_unit;
		tr->up.before_update_ctx = &tr->ck;
		tr->up.on_device = tr->plan.dev_update;
	}
	if (tr->per_layer)
		ST_TRY(perlayer_init(&tr->pl, ops, &tr->opt, &tr->s.store, tr->state,
				     tr->o.grad_accum));

	if (resuming)
		ST_TRY(ckpt_load_state(tr, tr->ckpt_loaded));
	train_schedule(&tr->o, tr->step, tr->tokens_seen, &tr->total_steps, &tr->warmup);
	if (tr->warmup > tr->total_steps)
		st_log_warn("--warmup %ld is longer than the run (%ld steps): the learning rate ends "
			    "at %.3g, never reaching --lr %g, and never decays",
			    tr->warmup, tr->total_steps,
			    lr_at(&tr->o, tr->total_steps, tr->total_steps, tr->warmup), tr->o.lr);
	else if (tr->warmup > 0 && tr->warmup >= tr->total_steps - 1 && tr->total_steps > 2)
		/* the step after warmup takes the full rate: the decay would begin
		 * only after the last step */
		st_log_warn("--warmup %ld spans the whole run (%ld steps): the learning rate reaches "
			    "--lr %g at step %ld and never decays",
			    tr->warmup, tr->total_steps, tr->o.lr, tr->warmup);
	note_eval_traffic(tr);

	const size_t n = (size_t)tr->o.grad_accum * tr->o.micro_batch * tr->o.seq_len;
	tr->tokens = st_malloc(n * sizeof *tr->tokens);
	tr->targets = st_malloc(n * sizeof *tr->targets);
	if (!tr->tokens || !tr->targets)
		return ST_FAIL;
	if (*tr->o.trace) {
		ST_TRY(trace_open(&tr->trace, tr->o.trace));
		tr->s.store.trace = tr->s.exec.trace = tr->up.trace = &tr->trace;
		tr->trace_until = tr->step + tr->o.trace_steps;
	}
	snprintf(path, sizeof path, "%s/metrics.jsonl", tr->o.out);
	tr->metrics = fopen(path, "a+"); /* read too: metrics_trim_partial */
	ST_CHECK(tr->metrics, "choose a writable --out directory", "cannot open %s: %s", path,
		 strerror(errno));
	metrics_trim_partial(fileno(tr->metrics), path);
	return ST_OK;
}

/* One metrics.jsonl record, written whole or not at all. On a full disk the
 * file is cut back to its last complete line and one warning says the
 * records stop there; training goes on (a checkpoint that cannot be written
 * stops it with its own error). */
static void metrics_write(struct st_trainer *tr, const char *fmt, ...)
{
	if (!tr->metrics || tr->metrics_lost)
		return;
	char *line = NULL; /* a resume marker holds a path, escaped: any length */
	va_list ap;
	va_start(ap, fmt);
	const int len = vasprintf(&line, fmt, ap);
	va_end(ap);
	if (len <= 0) {
		free(len < 0 ? NULL : line);
		return;
	}
	const int fd = fileno(tr->metrics);
	const off_t end = lseek(fd, 0, SEEK_END);
	size_t done = 0;
	int err = 0;
	while (done < (size_t)len) {
		const ssize_t w = write(fd, line + done, (size_t)len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			err = w < 0 ? errno : ENOSPC;
			break;
		}
		done += (size_t)w;
	}
	free(line);
	if (done == (size_t)len)
		return;
	if (end >= 0 && ftruncate(fd, end) != 0)
		st_log_warn("metrics.jsonl keeps a partial last line: %s", strerror(errno));
	tr->metrics_lost = 1;
	st_log_warn("cannot write %s/metrics.jsonl (%s): it records nothing from step %ld on; "
		    "training goes on",
		    tr->o.out, strerror(err), tr->step);
}

/* The first record of every run that trains: where it starts. Records from
 * an earlier run in the same directory may follow a step past from_step
 * (the resumed run does those steps again), so a reader keeps, at each
 * start record, only the records before it with step <= from_step. */
static void metrics_run_start(struct st_trainer *tr)
{
	char when[32];
	const time_t t = time(NULL);
	struct tm tm;
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
	if (!tr->step) {
		metrics_write(tr, "{\"event\": \"start\", \"from_step\": 0, \"to_step\": %ld, "
				  "\"time\": \"%s\"}\n",
			      tr->total_steps, when);
		return;
	}
	cJSON *path = cJSON_CreateString(tr->ckpt_loaded); /* quoted and escaped */
	char *quoted = path ? cJSON_PrintUnformatted(path) : NULL;
	cJSON_Delete(path);
	metrics_write(tr, "{\"event\": \"resume\", \"from_step\": %ld, \"to_step\": %ld, "
			  "\"checkpoint\": %s, \"time\": \"%s\"}\n",
		      tr->step, tr->total_steps, quoted ? quoted : "null", when);
	free(quoted);
}

void trainer_close(struct st_trainer *tr)
{
	if (tr->metrics)
		fclose(tr->metrics);
	data_close(&tr->data);
	updater_free(&tr->up); /* finishes queued updates before the store goes */
	ckpt_finish(tr);       /* and a checkpoint still being written */
	pthread_mutex_destroy(&tr->ck.mu);
	pthread_cond_destroy(&tr->ck.cv);
	session_close(&tr->s); /* joins the transfer threads */
	trace_close(&tr->trace); /* no thread records any more */
	plan_free(&tr->plan);
	free(tr->grad_sumsq);
	if (tr->per_layer)
		perlayer_free(&tr->pl);
	optim_free(&tr->opt);
	free(tr->state);
	free(tr->tokens);
	free(tr->targets);
	if (tr->lock_fd >= 0)
		close(tr->lock_fd); /* the run directory is free */
	for (int i = 0; i < ST_TOK_FILES; i++)
		free(tr->tok_text[i]);
	memset(tr, 0, sizeof *tr);
	tr->lock_fd = -1;
}

int evaluate(struct st_session *s, const struct st_data *d, int b, int t, long max_tokens,
	     double *loss, long *n_tokens)
{
	ST_CHECK(d->has_val, "give a validation shard", "no validation data");
	ST_TRY(session_exec(s, b, t));
	const long windows = data_eval_windows(d, t, max_tokens);
	int32_t *tok = st_malloc((size_t)b * t * sizeof *tok);
	int32_t *tgt = st_malloc((size_t)b * t * sizeof *tgt);
	if (!tok || !tgt) {
		free(tok);
		free(tgt);
		return ST_FAIL;
	}
	double sum = 0;
	long count = 0;
	for (long w = 0; w < windows; w += b) {
		data_val_batch(d, tok, tgt, b, t, w);
		for (int r = 0; r < b; r++) /* rows past the requested windows are ignored */
			if (w + r >= windows)
				for (int i = 0; i < t; i++)
					tgt[(size_t)r * t + i] = -1;
		long c = 0;
		sum += exec_micro_step(&s->exec, tok, tgt, 0.0f, &c);
		count += c;
	}
	free(tok);
	free(tgt);
	*loss = count ? sum / (double)count : NAN; /* none: every target masked (prompts) */
	*n_tokens = count;
	return ST_OK;
}

static int run_eval(struct st_trainer *tr, struct st_progress *pg)
{
	if (!tr->data.has_val)
		return ST_OK;
	double loss;
	long n;
	const double t0 = now_s();
	ST_TRY(evaluate(&tr->s, &tr->data, tr->o.micro_batch, tr->o.seq_len, tr->o.eval_tokens,
			&loss, &n));
	progress_eval(pg, tr->step, loss, n, now_s() - t0);
	if (!n) {
		/* the windows scored hold only masked targets: no loss, said once,
		 * and training goes on (its checkpoints are not lost to it) */
		if (!tr->no_val_targets_said && tr->o.eval_tokens)
			st_log_warn("the first %ld held-out tokens hold no loss targets (prompts only, "
				    "under the loss mask): no held-out loss; give a larger --eval-tokens "
				    "(0: the whole val.bin)",
				    tr->o.eval_tokens);
		else if (!tr->no_val_targets_said)
			st_log_warn("val.bin holds no loss target that fits a --seq-len %d window "
				    "(prompts only, under the loss mask): no held-out loss; a longer "
				    "--seq-len fits more completions",
				    tr->o.seq_len);
		tr->no_val_targets_said = 1;
		metrics_write(tr, "{\"step\": %ld, \"val_loss\": null, \"val_ppl\": null, "
				  "\"val_tokens\": 0, \"elapsed_s\": %.3f}\n",
			      tr->step, now_s() - tr->loop_t0);
		return ST_OK;
	}
	tr->last_val_loss = loss;
	if (!isfinite(loss))
		st_log_warn("the held-out loss at step %ld is not finite: the model's outputs "
			    "overflow", tr->step);
	char l[32], p[32];
	metrics_write(tr, "{\"step\": %ld, \"val_loss\": %s, \"val_ppl\": %s, \"val_tokens\": %ld, "
			  "\"elapsed_s\": %.3f}\n",
		      tr->step, st_json_num(l, sizeof l, "%.6f", loss),
		      st_json_num(p, sizeof p, "%.4f", exp(loss)), n, now_s() - tr->loop_t0);
	return ST_OK;
}

/* One optimizer step: all micro-batches, norm, clip, per-unit updates.
 *
 * Without per-layer GaLore the updates are queued to the updater (trainer/
 * updater.h) and run while the next step's forward proceeds; every gradient
 * slab is zero when a step starts (fresh, or discarded by its last update).
 * Per-layer GaLore consumes each layer's gradient in the executor's callback
 * and applies its updates here. */
/* A GaLore projector that was due at a zero gradient (galore_refresh keeps
 * the previous one), said once, naming the first such matrix: the optimizer
 * may note it on its own thread a step after it ran. */
static void note_galore_zero(struct st_trainer *tr)
{
	const int i = tr->opt.g_zero_first ? __atomic_load_n(tr->opt.g_zero_first, __ATOMIC_RELAXED)
					   : -1;
	if (i < 0 || tr->galore_zero_said++)
		return;
	st_log_warn("GaLore: %s got a zero gradient when its projector was due (a step without "
		    "loss targets, or weights that start at zero): it keeps its previous subspace, "
		    "or the first r coordinates until its next refresh, %d updates on; other such "
		    "matrices are not named",
		    tr->s.model.params[i].name, tr->o.galore_update_gap);
}

static int train_step(struct st_trainer *tr, double *loss_out, double *gnorm_out, double *lr_out)
{
	note_galore_zero(tr);
	struct st_session *s = &tr->s;
	const struct st_ops *ops = s->ops;
	const struct st_model *m = &s->model;
	const int B = tr->o.micro_batch, T = tr->o.seq_len, A = tr->o.grad_accum;
	const long step = tr->step + 1;
	const size_t per = (size_t)B * T;

	long n_targets = 0;
	for (int j = 0; j < A; j++) {
		data_train_batch(&tr->data, tr->tokens + j * per, tr->targets + j * per, B, T,
				 (uint64_t)tr->o.seed, step, j);
		for (size_t i = 0; i < per; i++)
			n_targets += tr->targets[j * per + i] >= 0;
	}
	struct st_perlayer *pl = tr->per_layer ? &tr->pl : NULL;
	if (pl) {
		for (int u = 0; u < m->n_units; u++)
			memset(store_acquire(&s->store, u, ST_SLAB_G), 0,
			       m->units[u].numel * sizeof(float));
		perlayer_begin(pl, tr->updates + 1);
		s->exec.on_unit_grad = perlayer_on_unit;
		s->exec.on_unit_grad_ctx = pl;
	}

	/* a step whose windows hold no loss target (all prompt, with masks) has
	 * a zero gradient and loss 0, not a division by zero */
	const float scale = n_targets ? 1.0f / (float)n_targets : 0.0f;
	double loss_sum = 0;
	/* zero unless a backward runs (none does when no window has a target) */
	memset(tr->grad_sumsq, 0, (size_t)m->n_units * sizeof *tr->grad_sumsq);
	for (int j = 0; j < A; j++) {
		long c;
		/* the last micro-batch leaves each unit's gradient norm behind */
		s->exec.grad_sumsq = !pl && j == A - 1 ? tr->grad_sumsq : NULL;
		loss_sum += exec_micro_step(&s->exec, tr->tokens + j * per, tr->targets + j * per,
					    scale, &c);
		/* no target, no backward: the layers' zero gradients are handed to
		 * per-layer GaLore here (its accumulators held another step's) */
		for (int u = 0; pl && !n_targets && u < m->n_units; u++)
			perlayer_on_unit(pl, u);
		if (pl)
			perlayer_end_micro(pl);
	}
	s->exec.grad_sumsq = NULL;
	ST_TRY(store_ok(&s->store));
	const int head = model_head_unit(m);
	/* test hook: the head's first gradient made NaN, or the finite value
	 * STRATA_FAULT_GRAD_VALUE, at this step */
	const char *fault = getenv("STRATA_FAULT_NAN_AT_STEP");
	if (fault && atol(fault) == step) {
		float *g = store_acquire(&s->store, head, ST_SLAB_G);
		const char *value = getenv("STRATA_FAULT_GRAD_VALUE");
		g[0] = value ? strtof(value, NULL) : NAN;
		tr->grad_sumsq[head] = ops->sumsq(g, m->units[head].numel);
		store_release(&s->store, head, ST_SLAB_G, 1);
	}
	double sumsq = 0; /* in unit order, whatever order the norms came in */
	for (int u = 0; u < m->n_units; u++)
		sumsq += pl ? (m->units[u].kind == ST_UNIT_LAYER
				       ? perlayer_unit_sumsq(pl, u)
				       : ops->sumsq(store_acquire(&s->store, u, ST_SLAB_G),
						    m->units[u].numel))
			    : tr->grad_sumsq[u];
	const double gnorm = sqrt(sumsq), loss = n_targets ? loss_sum / (double)n_targets : 0.0;
	*loss_out = loss;
	*gnorm_out = gnorm;
	*lr_out = 0;
	/* A finite gradient whose clipped norm reaches sqrt(FLT_MAX) can hold an
	 * element whose square is inf in fp32: Adam's v would become inf (an
	 * 8-bit block's absmax with it, zeroing the block's other codes and
	 * making them NaN at the next decode). Such a step is skipped as a
	 * non-finite one is. Only reachable with --grad-clip 0 or a huge clip. */
	const double clipped = tr->o.grad_clip > 0 && gnorm > tr->o.grad_clip ? tr->o.grad_clip : gnorm;
	const int overflow = isfinite(gnorm) && clipped >= 0x1p64;
	if (!isfinite(gnorm) || !isfinite(loss) || overflow) {
		/* Skip the update, keep every weight and moment as it was (never zero
		 * them, as bitsandbytes does), count it, and stop after too many. */
		if (pl)
			perlayer_undo(pl);
		else
			updater_submit(&tr->up, 0, 0, 0, 0); /* only clears the gradients */
		tr->step = step;
		tr->tokens_seen += (double)per * A;
		tr->skipped++;
		st_log_warn("step %ld: %s (loss %g, gradient norm %g): update skipped (%ld so far, limit %d)",
			    step,
			    !isfinite(loss)	 ? "non-finite loss"
			    : !isfinite(gnorm) ? "non-finite gradient"
					       : "gradient too large for fp32 (its square overflows)",
			    loss, gnorm, tr->skipped, tr->o.max_skipped_steps);
		char ls[32], gs[32]; /* numbers, null where not finite (JSON has no nan) */
		metrics_write(tr, "{\"step\": %ld, \"skipped\": true, \"loss\": %s, \"grad_norm\": %s}\n",
			      step, st_json_num(ls, sizeof ls, "%g", loss),
			      st_json_num(gs, sizeof gs, "%g", gnorm));
		ST_CHECK(tr->skipped <= tr->o.max_skipped_steps,
			 "lower --lr, or resume from the last checkpoint with different settings",
			 "%ld step%s skipped for non-finite or overflowing gradients (limit "
			 "--max-skipped-steps %d); stopping",
			 tr->skipped, tr->skipped == 1 ? "" : "s", tr->o.max_skipped_steps);
		return ST_OK;
	}
	float clip = 1.0f;
	if (tr->o.grad_clip > 0 && gnorm > tr->o.grad_clip)
		clip = (float)(tr->o.grad_clip / (gnorm + 1e-6));
	const double lr = lr_at(&tr->o, step, tr->total_steps, tr->warmup);
	tr->updates++;
	if (pl) {
		for (int u = 0; u < m->n_units; u++)
			if (m->units[u].kind == ST_UNIT_LAYER)
				perlayer_apply(pl, u, s->w[u], (float)lr, clip);
			else
				optim_step_unit(ops, &tr->opt, u, s->w[u],
						store_acquire(&s->store, u, ST_SLAB_G), tr->state[u],
						tr->updates, (float)lr, clip);
	} else {
		updater_submit(&tr->up, 1, tr->updates, (float)lr, clip);
	}
	tr->step = step;
	tr->tokens_seen += (double)per * A;
	*lr_out = lr;
	if (!n_targets) {
		/* no loss to report (0 would read as a perfect one); the update ran
		 * on momentum and weight decay alone, as any optimizer's does with
		 * a zero gradient */
		*loss_out = NAN;
		if (!tr->no_targets_said++)
			st_log_warn("step %ld: its windows hold no loss target (prompts only, under the "
				    "loss mask): no loss, and the update moves the weights by momentum "
				    "and weight decay alone; a longer --seq-len fits more completions",
				    step);
	}
	return ST_OK;
}

/* Every queued update done and written back (before evaluation reads the
 * weights from outside the executor, checkpoints, and the end). */
static int settle(struct st_trainer *tr)
{
	if (!tr->per_layer)
		updater_drain(&tr->up);
	store_drain(&tr->s.store);
	return store_ok(&tr->s.store);
}

/* The queue counters. They run over the whole process, and the queues work
 * for evaluations and checkpoints too (an update can finish under the next
 * evaluation), so the report takes them over the training loop, from q_snap
 * at its start, against the loop's wall time. */
static void q_snap(const struct st_trainer *tr, double v[5])
{
	const struct st_store *s = &tr->s.store;
	v[0] = s->wait_s[0];
	v[1] = s->q_copy.busy_s;
	v[2] = s->q_disk.busy_s;
	v[3] = tr->up.busy_s;
	v[4] = tr->up.wait_s;
}

/* How busy each queue was over the training loop, and which one bounds the
 * step: compute (the main thread, less its waits), the copy and disk
 * transfer queues, and the optimizer thread. Printed, and appended to
 * metrics.jsonl as {"queues": ...} for bench/offload. */
static void report_queues(struct st_trainer *tr)
{
	const struct st_store *s = &tr->s.store;
	const double wall = now_s() - tr->loop_t0;
	if (wall <= 0 || !tr->timed_steps)
		return;
	double q[5];
	q_snap(tr, q);
	for (int i = 0; i < 5; i++)
		q[i] -= tr->q_start[i];
	const double waits = q[0] + q[4];
	const double busy[4] = {wall - waits, q[1], q[2], q[3]};
	const char *names[4] = {"compute", "copy", "disk", "optimizer"};
	int bound = 0;
	for (int i = 1; i < 4; i++)
		if (busy[i] > busy[bound])
			bound = i;
	st_log_info("queues over %ld steps (%.2f s/step; the loop took %.2f s with evaluations and "
		    "checkpoints): compute %.0f%%, copy %.0f%%, disk %.0f%%, optimizer %.0f%% busy; "
		    "the main thread waited %.2f s for transfers and %.2f s for updates; bound by %s",
		    tr->timed_steps, tr->train_s / (double)tr->timed_steps, wall, 100 * busy[0] / wall,
		    100 * busy[1] / wall, 100 * busy[2] / wall, 100 * busy[3] / wall, q[0], q[4],
		    names[bound]);
	if (tr->plan.t.step_s > 0)
		st_log_info("step time: measured %.3f s, the plan predicted %.3f s (measured / predicted "
			    "%.2f)", tr->train_s / (double)tr->timed_steps, tr->plan.t.step_s,
			    tr->train_s / (double)tr->timed_steps / tr->plan.t.step_s);
	if (s->io_ready)
		st_log_info("disk: read %.2f GiB, wrote %.2f GiB (%.2f GB/s while busy)",
			    (double)s->io.bytes_read / 1073741824.0,
			    (double)s->io.bytes_written / 1073741824.0,
			    s->io.busy_s > 0 ? (double)(s->io.bytes_read + s->io.bytes_written) /
						   s->io.busy_s / 1e9
					     : 0.0);
	metrics_write(tr,
		"{\"queues\": {\"steps\": %ld, \"steps_s\": %.4f, \"wall_s\": %.4f, \"compute_s\": %.4f, \"copy_s\": %.4f, "
		"\"disk_s\": %.4f, \"optimizer_s\": %.4f, \"wait_transfer_s\": %.4f, "
		"\"wait_update_s\": %.4f, \"disk_read_bytes\": %llu, \"disk_write_bytes\": %llu, "
		"\"bound\": \"%s\", \"predicted_step_s\": %.4f}}\n",
		tr->timed_steps, tr->train_s, wall, busy[0], busy[1], busy[2], busy[3], q[0], q[4],
		(unsigned long long)s->io.bytes_read, (unsigned long long)s->io.bytes_written,
		names[bound], tr->plan.t.step_s);
}

int trainer_run(struct st_trainer *tr)
{
	const struct st_model *m = &tr->s.model;
	const double flops_tok = model_flops_per_token(m, tr->o.seq_len);
	const double tok_step = (double)tr->o.micro_batch * tr->o.seq_len * tr->o.grad_accum;
	char b1[32];
	st_log_info("model: %zu parameters (%s), %d layers, dim %d, heads %d/%d, ffn %d, vocab %d%s",
		    m->numel, fmt_bytes(b1, sizeof b1, (double)m->numel * 4), m->cfg.n_layers,
		    m->cfg.dim, m->cfg.n_heads, m->cfg.n_kv_heads, m->cfg.ffn_dim,
		    m->cfg.vocab_size, m->cfg.tied ? ", tied head" : "");
	st_log_info("backend: %s, %d thread%s, matmul %s", tr->s.ops->name, omp_get_max_threads(),
		    omp_get_max_threads() == 1 ? "" : "s", tr->s.ops->matmul_lib);
	st_log_info("training: %s, %ld step%s of %.0f tokens (%d x %d x %d), lr %g, warmup %ld%s",
		    tr->o.optimizer, tr->total_steps, tr->total_steps == 1 ? "" : "s", tok_step,
		    tr->o.micro_batch, tr->o.seq_len,
		    tr->o.grad_accum, tr->o.lr, tr->warmup,
		    tr->step ? ", resumed" : "");
	/* windows are drawn at random offsets (data.c): "passes" counts tokens
	 * drawn over tokens held, not epochs of a shuffled order */
	const double held = (double)tr->data.train.n_tokens;
	st_log_info("data: %.0f training tokens; the run draws %.3g times that (%.0f tokens, in "
		    "windows at random offsets)",
		    held, tok_step * (double)tr->total_steps / held, tok_step * (double)tr->total_steps);
	if (tok_step > held)
		st_log_warn("one step draws %.0f tokens, more than the %.0f the training data holds: "
			    "each step sees some of them several times (give more data, or a smaller "
			    "--micro-batch or --grad-accum)",
			    tok_step, held);
	if (tr->step)
		st_log_info("resumed from %s at step %ld; checkpoints go to %s", tr->ckpt_loaded,
			    tr->step, tr->o.out);
	/* oneDNN's sgemm rounds differently for another thread count: the run
	 * goes on correctly, but not bit for bit as it would have */
	if (tr->step && tr->ckpt_threads && tr->ckpt_threads != omp_get_max_threads() &&
	    !strcmp(tr->s.ops->name, "cpu"))
		st_log_warn("the checkpoint's run used %d threads, this one %d: the matmuls round "
			    "differently, so the run will not match an uninterrupted one bit for bit "
			    "(give --threads %d for that)",
			    tr->ckpt_threads, omp_get_max_threads(), tr->ckpt_threads);
	if (tr->step && tr->skipped > tr->o.max_skipped_steps && tr->step < tr->total_steps)
		st_log_warn("the run has skipped %ld step%s already, more than --max-skipped-steps %d: "
			    "the next skip stops it",
			    tr->skipped, tr->skipped == 1 ? "" : "s", tr->o.max_skipped_steps);
	long later_first = 0;
	const int later = tr->step < tr->total_steps
				  ? ckpt_count_later(tr->o.out, tr->step, LONG_MAX, &later_first)
				  : 0;
	if (later)
		st_log_warn("%s holds %d checkpoint%s of steps after %ld (the first: step-%06ld), from "
			    "the run resumed here at an earlier step: this run replaces those it saves at "
			    "the same steps and leaves the others, which --keep-ckpts neither counts nor "
			    "removes; give --out DIR to keep this run apart",
			    tr->o.out, later, later == 1 ? "" : "s", tr->step, later_first);
	if (tr->step && tr->step >= tr->total_steps && tr->o.steps > 0)
		st_log_warn("the checkpoint is at step %ld and this run ends at step %ld: nothing to "
			    "train; give --steps above %ld to go on",
			    tr->step, tr->total_steps, tr->step);
	else if (tr->step && tr->step >= tr->total_steps)
		st_log_warn("the checkpoint is at step %ld, having seen %.0f tokens of the %.0f that "
			    "--max-tokens allows: nothing to train; give a larger --max-tokens (or "
			    "--steps) to go on",
			    tr->step, tr->tokens_seen, tr->o.max_tokens);
	store_report(&tr->s.store);
	{
		/* what the state would take as fp32 AdamW, for comparison */
		char b2[32], b3[32];
		st_log_info("optimizer state: %s, %s (%.3f B/param; fp32 AdamW: %s, 8 B/param)",
			    optim_kind_name(tr->opt.cfg.kind),
			    fmt_bytes(b2, sizeof b2, (double)tr->opt.total_bytes),
			    (double)tr->opt.total_bytes / (double)m->numel,
			    fmt_bytes(b3, sizeof b3, 8.0 * (double)m->numel));
		if (tr->opt.galore_weights) {
			size_t gbytes = 0;
			int last_start = 1, rmin = INT_MAX, rmax = 0;
			for (int i = 0; i < m->n_params; i++)
				if (tr->opt.ps[i].galore) {
					gbytes += optim_param_state_bytes(&tr->opt, i);
					if (tr->opt.ps[i].start > last_start)
						last_start = tr->opt.ps[i].start;
					rmin = tr->opt.ps[i].rank < rmin ? tr->opt.ps[i].rank : rmin;
					rmax = tr->opt.ps[i].rank > rmax ? tr->opt.ps[i].rank : rmax;
				}
			/* the ranks the matrices got (a fraction of the width, or capped
			 * at a matrix's smaller side), not only the option as given */
			char ranks[96];
			if (rmin == rmax)
				snprintf(ranks, sizeof ranks, "rank %d", rmin);
			else
				snprintf(ranks, sizeof ranks, "ranks %d-%d", rmin, rmax);
			if (tr->o.galore_rank != (double)rmin || rmin != rmax)
				snprintf(ranks + strlen(ranks), sizeof ranks - strlen(ranks),
					 " (--galore-rank %g)", tr->o.galore_rank);
			st_log_info("GaLore: %zu weights in attention/MLP matrices, %s, first projectors "
				    "over updates 1-%d, refresh every %d updates (%s), scale %g: their state %s "
				    "(%.3f B/weight; AdamW: %s, 8 B/weight)",
				    tr->opt.galore_weights, ranks, last_start,
				    tr->o.galore_update_gap, tr->o.galore_proj, tr->o.galore_scale,
				    fmt_bytes(b2, sizeof b2, (double)gbytes),
				    (double)gbytes / (double)tr->opt.galore_weights,
				    fmt_bytes(b3, sizeof b3, 8.0 * (double)tr->opt.galore_weights));
			/* a matrix trains from its first projector on: one that gets it
			 * after the run's last update never trains */
			const long max_updates = tr->updates + (tr->total_steps - tr->step);
			int late = 0, n_gal = 0;
			for (int i = 0; i < m->n_params; i++) {
				n_gal += tr->opt.ps[i].galore;
				late += tr->opt.ps[i].galore && tr->opt.ps[i].start > max_updates;
			}
			char fix[160];
			if (tr->step)
				snprintf(fix, sizeof fix, "give a longer --steps (the resumed run's "
					 "spread is fixed)");
			else if (max_updates > 1)
				snprintf(fix, sizeof fix, "give --galore-start-spread %ld or less (1: all "
					 "at the first update), or a longer --steps",
					 max_updates);
			else
				snprintf(fix, sizeof fix, "give --galore-start-spread 1 (all at the first "
					 "update), or a longer --steps");
			if (late)
				st_log_warn("%d of the %d GaLore matrices get their first projector after "
					    "the run's last update (%ld): they will not train; %s",
					    late, n_gal, max_updates, fix);
			double gb = tr->per_layer ? (double)tr->pl.acc_bytes : 0;
			for (int u = 0; u < m->n_units; u++) {
				const struct st_slab *sl = store_slab(&tr->s.store, u, ST_SLAB_G);
				if (sl->shared_from < 0)
					gb += (double)sl->bytes;
			}
			st_log_info("gradients: %s (%s; AdamW: %s)", fmt_bytes(b2, sizeof b2, gb),
				    tr->per_layer ? "per-layer: one layer's gradient, low-rank accumulators"
						  : "every unit's gradient kept (--galore-per-layer false)",
				    fmt_bytes(b3, sizeof b3, 4.0 * (double)m->numel));
		}
	}

	if (tr->step < tr->total_steps && *tr->ckpt_loaded)
		ST_TRY(ckpt_mark_resumed(tr));
	if (tr->step < tr->total_steps)
		metrics_run_start(tr);
	struct st_progress *pg = &tr->pg;
	progress_init(pg, tr->o.progress, tr->total_steps, tr->step, tr->o.log_interval,
		      tr->o.eval_interval, tr->data.has_val);
	tr->loop_t0 = now_s();
	q_snap(tr, tr->q_start);
	if (tr->step == 0 && tr->o.eval_interval > 0)
		ST_TRY(run_eval(tr, pg));
	/* A signal (interrupt.h) is read once per step, after it: the step is
	 * then saved whatever the schedule says, and the loop ends. */
	int stop = 0;
	while (tr->step < tr->total_steps && !stop) {
		ST_TRY(ckpt_poll(tr));
		double t0 = now_s(), loss, gnorm, lr;
		const long skipped_before = tr->skipped;
		ST_TRY(train_step(tr, &loss, &gnorm, &lr));
		double dt = now_s() - t0;
		tr->train_s += dt;
		tr->timed_steps++;
		if (tr->trace.f && tr->step >= tr->trace_until) {
			pthread_mutex_lock(&tr->trace.mu);
			tr->trace.on = 0;
			pthread_mutex_unlock(&tr->trace.mu);
		}
		if (tr->skipped == skipped_before) { /* a skipped step was logged already */
			if (!isnan(loss)) /* NaN: no loss target in the step */
				tr->last_loss = loss;
			char ls[32];
			metrics_write(tr,
				"{\"step\": %ld, \"loss\": %s, \"lr\": %.6g, \"grad_norm\": %.6g, "
				"\"tokens\": %.0f, \"step_s\": %.4f, \"predicted_s\": %.4f, \"tok_per_s\": %.1f, "
				"\"gflops\": %.2f, \"elapsed_s\": %.3f}\n",
				tr->step, st_json_num(ls, sizeof ls, "%.6f", loss), lr, gnorm, tr->tokens_seen,
				dt, tr->plan.t.step_s, tok_step / dt, flops_tok * tok_step / dt / 1e9,
				now_s() - tr->loop_t0);
			progress_step(pg, tr->step, loss, lr, tok_step, flops_tok * tok_step, dt);
		}
		const int last = tr->step == tr->total_steps;
		if (last || (tr->o.eval_interval > 0 && tr->step % tr->o.eval_interval == 0))
			ST_TRY(run_eval(tr, pg));
		/* A checkpoint due at a skipped step waits for the next step that
		 * updates (or the last): a run whose weights have gone bad and
		 * whose every later step is skipped then writes no checkpoints
		 * that would push the good ones out under --keep-ckpts. */
		const int skipped = tr->skipped != skipped_before;
		stop = interrupt_signal();
		const int due = last || stop || tr->ckpt_deferred ||
				(tr->o.ckpt_interval > 0 && tr->step % tr->o.ckpt_interval == 0);
		if (due && skipped && !last && !stop) {
			if (!tr->ckpt_deferred)
				st_log_info("step %ld was skipped: its checkpoint waits for the next step "
					    "that updates",
					    tr->step);
			tr->ckpt_deferred = 1;
		} else if (due) {
			tr->ckpt_deferred = 0;
			progress_pause(pg);
			const double ts = now_s();
			ST_TRY(settle(tr)); /* the step's updates: part of its time */
			tr->train_s += now_s() - ts;
			if (last && tr->plan.place.offloaded) /* before the checkpoint's own I/O */
				report_queues(tr);
			/* per-layer GaLore updates in this thread, past the hook: wait */
			ST_TRY(tr->per_layer ? ckpt_save(tr) : ckpt_begin(tr));
		}
	}
	progress_done(pg);
	const double ts = now_s();
	ST_TRY(settle(tr));
	note_galore_zero(tr); /* one the last updates noted */
	tr->train_s += now_s() - ts;
	ST_TRY(ckpt_finish(tr));
	if (stop && tr->step < tr->total_steps) {
		tr->interrupted = stop;
		st_log_warn("stopped by %s at step %ld of %ld, saved; go on with: strata train "
			    "--resume %s",
			    stop == SIGINT ? "SIGINT" : "SIGTERM", tr->step, tr->total_steps, tr->o.out);
	}
	return ST_OK;
}
