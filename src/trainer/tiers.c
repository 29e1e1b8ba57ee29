/* Where a run's slabs live (see tiers.h): the budgets from the flags or the
 * machine, the choices the flags force, the hardware profile when anything
 * must leave the device, the plan, and the store started on it; and
 * `strata plan`, which stops after printing the plan. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/memavail.h"
#include "engine/plan.h"
#include "engine/profile.h"
#include "io/fsutil.h"
#include "model/hf.h"
#include "optim/galore.h"
#include "store/io.h"
#include "trainer/offdirs.h"
#include "trainer/perlayer.h"
#include "trainer/planview.h"
#include "trainer/tiers.h"
#include "util/check.h"

static int alloc_state(struct st_trainer *tr)
{
	const struct st_model *m = &tr->s.model;
	for (int u = 0; u < m->n_units; u++)
		if (tr->opt.unit_bytes[u])
			ST_TRY(store_alloc(&tr->s.store, u, ST_SLAB_S,
					   place_home(&tr->plan.place, u, ST_SLAB_S), tr->opt.unit_bytes[u]));
	return ST_OK;
}

int tiers_budgets(const char *device_mem, const char *host_mem, size_t need,
		  size_t budgets[ST_TIER__COUNT])
{
	ST_TRY(parse_bytes(device_mem, &budgets[ST_TIER_DEVICE], "--device-mem"));
	ST_TRY(parse_bytes(host_mem, &budgets[ST_TIER_HOST], "--host-mem"));
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
		/* the tier left to the machine gets its share of what the given
		 * one leaves of 90% (a twentieth of the memory at least): it took
		 * its share of all of it, and a 20 GiB --device-mem on 22.6 GiB
		 * got a 13.6 GiB host tier beside it. Both tiers are host RAM on
		 * the CPU backend (as `held` below assumes); a GPU's device tier
		 * would not come out of the host's share. */
		const double given = (double)(dev_given    ? budgets[ST_TIER_DEVICE]
					      : host_given ? budgets[ST_TIER_HOST]
							   : 0);
		const double left = fmax(0.9 * (double)avail - given, 0.05 * (double)avail);
		if (!dev_given)
			budgets[ST_TIER_DEVICE] = (size_t)fmin(0.3 * (double)avail, left);
		if (!host_given)
			budgets[ST_TIER_HOST] = (size_t)fmin(0.6 * (double)avail, left);
		st_log_info("the run's state, %s, exceeds 90%% of the available memory (%s%s): budgets "
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
		st_log_warn("%s let%s the run hold %s, more than the %s of memory available%s: it may "
			    "be killed for memory (lower %s, or leave %s out to size %s from the "
			    "machine)",
			    dev_given && host_given ? "--device-mem and --host-mem"
			    : dev_given		    ? "--device-mem and the host share left beside it"
						    : "--host-mem and the device share left beside it",
			    dev_given && host_given ? "" : "s", fmt_bytes(b1, sizeof b1, held),
			    fmt_bytes(b2, sizeof b2, (double)avail),
			    ma.from_cgroup ? " (the cgroup limit)" : "",
			    dev_given && host_given ? "them" : "it", dev_given && host_given ? "them" : "it",
			    dev_given && host_given ? "them" : "it");
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
	double *upd_flops;   /* GaLore's projections, per unit: by the update */
	double *hook_flops;  /* and by per-layer GaLore's backward hook */
	double *bf16_flops;  /* of flops, the bf16 matmuls' (--matmul-precision bf16) */
	double *attn_flops;  /* of flops, attention's */
	double *ew_fwd, *ew_bwd; /* bytes of the other kernels, forward and backward */
	unsigned char *act;  /* forced activation policy, when po.act */
	struct st_profile prof;
	int have_prof;
	char dirbuf[ST_PATH];
	const char *dirs[64];
	int n_dirs;
	int prefetch_asked; /* a --prefetch past the units ahead (capped), said if the plan streams */
};

static void tier_choice_free(struct tier_choice *ch)
{
	free(ch->wb);
	free(ch->gb);
	free(ch->numel);
	free(ch->flops);
	free(ch->upd_flops);
	free(ch->hook_flops);
	free(ch->bf16_flops);
	free(ch->attn_flops);
	free(ch->ew_fwd);
	free(ch->ew_bwd);
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
	/* a read-only directory said as such first (it was measured in
	 * whatever room the probe found, then refused as not writable) */
	int rc = fs_exists(ch->dirs[0]) ? io_check_writable(ch->dirs[0]) : ST_OK;
	if (rc == ST_OK)
		rc = profile_measure_disk(&ch->prof, tr->s.ops, ch->dirs[0]);
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

/* The cache only saves the next run its measurement: a place that cannot
 * take it (a read-only home, a full disk) is said, not fatal. */
static void save_profile(const struct st_profile *p, const char *path)
{
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
		rc = profile_save(p, path);
	st_log_mute(old);
	if (rc != ST_OK)
		st_log_warn("the measured profile could not be cached (%s): this run uses it, and the "
			    "next one measures again (give --profile FILE or $STRATA_PROFILE a writable "
			    "path to keep it)",
			    st_log_last_error());
}

/* Load the profile, or measure this machine and cache it. Measured again:
 * a profile without a disk rate once a run has an offload directory, and
 * the default cache written by an older strata (its copy rates counted each
 * byte twice) or with another thread count than this run's (the matmul and
 * CPU optimizer rates scale with it: a 2-thread profile predicted a
 * --threads 1 run 1.7x fast); a profile given by --profile or
 * $STRATA_PROFILE is the user's, whatever its format, and another thread
 * count there is only said. */
static int get_profile(struct st_trainer *tr, struct tier_choice *ch)
{
	char path[ST_PATH + 64];
	profile_path(&tr->o, path, sizeof path);
	const char *env = getenv("STRATA_PROFILE");
	const int cached = !*tr->o.profile && !(env && *env);
	const int threads = omp_get_max_threads();
	/* the measurement's arrays (about 4.5 x probe + 8 MiB) within what the budgets
	 * allow, as the run is (a first run with 40 MiB of budgets peaked at
	 * 317 MiB measuring); 64 MiB each without budgets. The device tier is
	 * host RAM on the CPU backend only: on a GPU they are the host
	 * budget's alone. */
	const int device_is_host = !strcmp(tr->s.ops->name, "cpu");
	const size_t *bud = ch->po.place.budget;
	const double budgets = (double)bud[ST_TIER_HOST] + (device_is_host ? (double)bud[ST_TIER_DEVICE] : 0);
	const int unlimited = !bud[ST_TIER_HOST] || (device_is_host && !bud[ST_TIER_DEVICE]);
	const int probe = unlimited ? 64 : (int)fmax(8, fmin(64, budgets / 8 / 1048576));
	int stale = 0, other = 0, small = 0;
	const int bf16 = tr->s.model.matmul_bf16;
	struct st_profile was = {0};
	if (fs_exists(path)) {
		ST_TRY(profile_load(&ch->prof, path));
		was = ch->prof;
		stale = cached && ch->prof.format < ST_PROFILE_FORMAT;
		other = cached && !stale && (int)ch->prof.threads != threads;
		small = cached && !stale && !other && ch->prof.probe_mib < probe;
		/* measured before --matmul-precision existed: a given profile
		 * is said; the cache's other rates stand, and the bf16 one alone
		 * is measured and saved (the whole profile was measured again,
		 * the disk too). A cache measured again below gets it anyway. */
		const int used = (!ch->n_dirs || ch->prof.disk_read_gbs > 0) && !stale && !other &&
				 !small; /* as it is (else measured again below) */
		const int no_bf16 = bf16 && used && !(ch->prof.bf16_matmul_gflops > 0);
		if (no_bf16 && !cached)
			st_log_warn("the profile %s has no bf16_matmul_gflops: the plan prices the bf16 "
				    "matmuls at its fp32 rate, so it predicts a longer step than the run "
				    "takes (remove the file to have it measured again, or add the key)",
				    path);
		if (no_bf16 && cached) {
			st_log_info("measuring the bf16 matmul rate for the planner (the cached profile "
				    "%s has none)",
				    path);
			ST_TRY(profile_measure_bf16(&ch->prof, tr->s.ops, probe));
			save_profile(&ch->prof, path);
		}
		if (used && !cached && !(ch->prof.attention_gflops > 0 && ch->prof.elementwise_gbs > 0))
			st_log_warn("the profile %s has no attention_gflops or elementwise_gbs (measured "
				    "since 2026-11-25): the plan prices attention at the matmul rate and "
				    "leaves out the norms, RoPE, SwiGLU and residual adds, so it predicts "
				    "a shorter step than the run takes (remove the file to have it "
				    "measured again, or add the keys)",
				    path);
		if (used) {
			if (ch->prof.threads && (int)ch->prof.threads != threads)
				st_log_warn("the profile %s was measured with %d CPU thread%s and this run "
					    "has %d: its compute and CPU update rates, and the plan's "
					    "predictions, may be off by about that ratio",
					    path, (int)ch->prof.threads, ch->prof.threads == 1 ? "" : "s",
					    threads);
			ch->have_prof = 1;
			return ST_OK;
		}
	}
	if (stale && was.format >= 2)
		st_log_info("the cached profile %s is from an older strata, without the attention and "
			    "elementwise rates and with a matmul rate on warm caches",
			    path);
	else if (stale)
		st_log_info("the cached profile %s is from an older strata, whose copy rates counted "
			    "each byte twice",
			    path);
	else if (other && was.threads)
		st_log_info("the cached profile %s was measured with %d CPU thread%s, and this run has %d",
			    path, (int)was.threads, was.threads == 1 ? "" : "s", threads);
	else if (other)
		st_log_info("the cached profile %s records no thread count", path);
	else if (small)
		st_log_info("the cached profile %s was measured over %d MiB arrays (within small "
			    "budgets), and this run's budgets allow %d MiB",
			    path, (int)was.probe_mib, probe);
	char over[96] = "";
	if (probe < 64)
		snprintf(over, sizeof over, ", over %d MiB arrays to stay within the budgets", probe);
	st_log_info("measuring this machine for the planner (matmul, copy, optimizers%s%s; cached in "
		    "%s)",
		    ch->n_dirs ? ", the first offload directory" : "", over, path);
	ST_TRY(profile_measure(&ch->prof, tr->s.ops, probe));
	ch->have_prof = 1;
	if (ch->n_dirs)
		ST_TRY(measure_disk(tr, ch));
	/* the disk's rates kept for the next run that has one (none measured
	 * now, or a measurement the run could do without failed); format 2's
	 * were measured as now */
	if ((!stale || was.format >= 2) && was.disk_read_gbs > 0 && !ch->prof.disk_read_gbs) {
		ch->prof.disk_read_gbs = was.disk_read_gbs;
		ch->prof.disk_write_gbs = was.disk_write_gbs;
		ch->prof.disk_cpu_share = was.disk_cpu_share;
		ch->prof.disk_fs_magic = was.disk_fs_magic;
	}
	save_profile(&ch->prof, path);
	return ST_OK;
}

static int is_galore(const struct st_trainer *tr)
{
	return tr->opt.cfg.kind == ST_OPT_GALORE_ADAMW || tr->opt.cfg.kind == ST_OPT_GALORE_ADAMW8;
}

/* An empty value is auto, as for --device-mem, --place and the other
 * placement options ("--recompute ''" was refused, "--activations ''"
 * conflicted with a --recompute). */
static int is_auto(const char *s)
{
	return !*s || !strcmp(s, "auto");
}

/* The flags' forced choices: --recompute N|all (the first N layers, the rest
 * kept) or --activations; --device-updates. */
static int forced_choices(struct st_trainer *tr, struct tier_choice *ch)
{
	const int L = tr->s.model.cfg.n_layers;
	const int rc_set = !is_auto(tr->o.recompute);
	const int act_set = !is_auto(tr->o.activations);
	ST_CHECK_USAGE(!(rc_set && act_set), "give one of --recompute and --activations",
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
		ST_CHECK_USAGE(!end || (!*end && end != tr->o.recompute && v >= 0 && v <= L),
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
	if (!is_auto(tr->o.device_updates)) {
		char *end;
		long v = strtol(tr->o.device_updates, &end, 10);
		ST_CHECK_USAGE(!*end && end != tr->o.device_updates && v >= 0 && v <= tr->s.model.n_units,
			 "use --device-updates N (0 to the number of units) or auto",
			 "--device-updates '%s' is not a unit count between 0 and %d", tr->o.device_updates,
			 tr->s.model.n_units);
		ST_CHECK_USAGE(!(v && tr->per_layer), "leave --device-updates at auto (0 for GaLore)",
			 "GaLore's per-layer updates read accumulators the backward fills on the CPU; "
			 "they cannot move to the device");
		if (v && is_galore(tr)) {
			ST_USAGE_ERROR("leave --device-updates at auto (0 for GaLore)",
				 "GaLore's updates run on the CPU's update thread alone: one projection "
				 "scratch serves them, and a device unit's update beside it gave wrong "
				 "weights or a crash");
			/* a run saved before the refusal keeps its own */
			if (*tr->o.resume && !tr->o.device_updates_given)
				st_log_info("a resumed run keeps the --device-updates it was started with "
					    "(here: %ld); --device-updates auto lets the planner choose",
					    v);
			return ST_FAIL;
		}
		ch->po.device_updates = (int)v;
	}
	return ST_OK;
}

/* An offload directory refused on a resume that kept the run's own (said):
 * where it came from. The fresh run's hint alone does not cover it. */
static int offdirs_resume_note(const struct st_trainer *tr)
{
	if (*tr->o.resume && !tr->o.offload_dir_given)
		st_log_info("a resumed run keeps the offload directories it was started with (here: "
			    "%s); --offload-dir DIR names others, --offload-dir '' drops them",
			    tr->o.offload_dir);
	return ST_FAIL;
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
	ch->upd_flops = st_calloc((size_t)n, sizeof *ch->upd_flops);
	ch->hook_flops = st_calloc((size_t)n, sizeof *ch->hook_flops);
	ch->bf16_flops = st_calloc((size_t)n, sizeof *ch->bf16_flops);
	ch->attn_flops = st_calloc((size_t)n, sizeof *ch->attn_flops);
	ch->ew_fwd = st_calloc((size_t)n, sizeof *ch->ew_fwd);
	ch->ew_bwd = st_calloc((size_t)n, sizeof *ch->ew_bwd);
	ch->gb = st_calloc((size_t)n, sizeof *ch->gb);
	if (!ch->wb || !ch->numel || !ch->flops || !ch->upd_flops || !ch->hook_flops || !ch->gb ||
	    !ch->bf16_flops || !ch->attn_flops || !ch->ew_fwd || !ch->ew_bwd)
		return ST_FAIL;
	/* GaLore's matmuls: each matrix's gradient projected (R = P^T G or
	 * G P^T: 2 r m n), in every micro-batch's backward hook with per-layer
	 * updates, by the update otherwise, and the update projected back (2 r
	 * m n). A projector's refresh, once per --galore-update-gap, is left
	 * out: over the default 200 updates it adds a few percent. Left out of
	 * the prediction, a 60M run at rank 128 took 3.5x its predicted step. */
	for (int i = 0; i < m->n_params; i++) {
		const struct st_pstate *ps = &tr->opt.ps[i];
		if (!ps->galore)
			continue;
		const double proj = 2.0 * ps->rank * (double)ps->rows * ps->cols;
		const int u = m->params[i].unit;
		ch->upd_flops[u] += tr->per_layer ? proj : 2 * proj;
		ch->hook_flops[u] += tr->per_layer ? proj : 0;
	}
	size_t need = 0;
	for (int u = 0; u < n; u++) {
		ch->numel[u] = m->units[u].numel;
		ch->wb[u] = m->units[u].numel * sizeof(float);
		ch->flops[u] = model_unit_fwd_flops(m, u, T) * B * T;
		ch->bf16_flops[u] = m->matmul_bf16 ? model_unit_linear_flops(m, u) * B * T : 0;
		if (m->units[u].kind == ST_UNIT_LAYER)
			ch->attn_flops[u] = model_attention_flops(m->cfg.n_heads, m->cfg.head_dim, T) *
					    B * T;
		model_unit_ew_bytes(m, u, &ch->ew_fwd[u], &ch->ew_bwd[u]);
		ch->ew_fwd[u] *= (double)B * T;
		ch->ew_bwd[u] *= (double)B * T;
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
		.n_units = n, .n_layers = m->cfg.n_layers, .width = m->cfg.dim, .seq_len = T, .w_bytes = ch->wb,
		.g_bytes = ch->gb, .s_bytes = tr->opt.unit_bytes,
		.numel = ch->numel, .fwd_flops = ch->flops, .upd_flops = ch->upd_flops,
		.hook_flops = ch->hook_flops, .fwd_bf16_flops = ch->bf16_flops,
		.fwd_attn_flops = ch->attn_flops, .fwd_ew_bytes = ch->ew_fwd, .bwd_ew_bytes = ch->ew_bwd,
		.act_layer = acts_layer_floats(m, B, T) * sizeof(float),
		.act_input = acts_input_floats(m, B, T) * sizeof(float),
		.act_rest = acts_rest_floats(m, B, T) * sizeof(float),
		.grad_accum = tr->o.grad_accum,
		.quantized = tr->opt.cfg.kind == ST_OPT_ADAMW8 || tr->opt.cfg.kind == ST_OPT_GALORE_ADAMW8,
		.state_in_backward = tr->per_layer};
	/* no unit has more than n - 1 others ahead of it: a deeper prefetch
	 * only adds staging slots that never fill */
	ch->po.place.prefetch = tr->o.prefetch;
	if (n > 1 && tr->o.prefetch > n - 1) {
		ch->prefetch_asked = tr->o.prefetch;
		ch->po.place.prefetch = n - 1;
	}
	ch->po.threaded_updates = 1;
	/* GaLore's projection scratch (the projector's LAPACK workspace above
	 * all: an exact SVD's for a 2048 x 5632 matrix makes it 147 MiB) and
	 * per-layer GaLore's accumulators are host memory the run holds beside
	 * the store: in the host budget below, and in what the budgets are
	 * sized for */
	ch->po.place.host_scratch = galore_scratch_bytes(&tr->opt);
	if (tr->per_layer) {
		ch->po.place.host_fixed = perlayer_host_bytes(&tr->opt);
		if (ch->po.place.host_fixed == SIZE_MAX)
			return ST_FAIL; /* out of memory counting them (said) */
	}
	need += ch->po.place.host_scratch + ch->po.place.host_fixed;
	ST_TRY(tiers_budgets(tr->o.device_mem, tr->o.host_mem, need, ch->po.place.budget));
	ST_TRY(forced_choices(tr, ch));
	ST_TRY(parse_place(tr->o.place, ch->po.place.force));
	/* GaLore's projection scratch (optim.h) is one, for one update at a
	 * time: a device unit's update runs on the compute thread while the CPU
	 * worker updates others, and the two wrote it at once (a segfault, or
	 * other weights than in memory with exit 0), so the planner gives it no
	 * device updates. A scratch per updating thread would allow them. */
	if (is_galore(tr))
		ch->po.device_updates = 0;
	ch->po.place.host_scratch_what = "GaLore's projection scratch";
	ch->po.place.host_scratch_hint =
		tr->opt.cfg.galore_proj == ST_GALORE_SVD
			? "raise --host-mem, or use --galore-proj randomized (less scratch)"
			: "raise --host-mem, or lower --galore-rank";
	if (tr->per_layer) {
		const int g = ch->po.place.force[ST_SLAB_G];
		ST_CHECK_USAGE(g < 0 || g == ST_TIER_DEVICE,
			 "give --galore-per-layer false to place gradients elsewhere",
			 "GaLore's per-layer updates keep their gradients on the device; --place "
			 "gradients=%s cannot apply",
			 g == ST_TIER_HOST ? "host" : "disk");
		ch->po.place.force[ST_SLAB_G] = ST_TIER_DEVICE;
		ch->po.device_updates = 0; /* its updates run in the backward's hook */
		/* every layer's accumulator lives until the step's norm is known */
		ch->po.place.host_fixed_what =
			"per-layer GaLore's gradient accumulators and projector backups";
		ch->po.place.host_fixed_hint = "raise --host-mem, or lower --galore-rank";
	}
	/* the directories, split at commas */
	snprintf(ch->dirbuf, sizeof ch->dirbuf, "%s", tr->o.offload_dir);
	for (char *save = NULL, *d = strtok_r(ch->dirbuf, ",", &save); d;
	     d = strtok_r(NULL, ",", &save)) {
		ST_CHECK_USAGE(ch->n_dirs < 64, "give at most 64 --offload-dir directories",
			 "too many offload directories");
		ch->dirs[ch->n_dirs++] = d;
	}
	ch->po.place.n_dirs = ch->n_dirs;
	/* plan checks as train does (trainer/offdirs.h), and passes a directory
	 * train would make (its --out) */
	if (offdirs_check_exist(ch->dirs, ch->n_dirs, tr->o.out) != ST_OK)
		return offdirs_resume_note(tr);
	ST_CHECK_USAGE(tr->o.io_depth >= 0 && tr->o.io_depth <= 4096, "use e.g. --io-depth 16",
		 "--io-depth %d must be between 1 and 4096 (0: 16)", tr->o.io_depth);
	/* before a profile is measured; a resume's saved --place named as
	 * such: "--offload-dir ''" left it asking for the disk, and the hint
	 * alone said to give a directory */
	if (place_check_disk(ch->po.place.force, ch->n_dirs) != ST_OK) {
		if (*tr->o.resume && !tr->o.place_given)
			st_log_info("a resumed run keeps the --place it was started with (here: %s); "
				    "--place auto lets the planner choose",
				    tr->o.place);
		return ST_FAIL;
	}
	ST_TRY(parse_bytes(tr->o.io_block, &ch->po.place.io_block, "--io-block"));
	if (!ch->po.place.io_block)
		ch->po.place.io_block = 1u << 20; /* "auto": the store's default */
	ST_CHECK_USAGE(ch->po.place.io_block % ST_IO_ALIGN == 0 && ch->po.place.io_block <= (64u << 20),
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
	const struct st_plan *p = &tr->plan;
	/* the directories the plan writes to, before anything is written */
	size_t ckpt = 0;
	for (int u = 0; u < n; u++)
		ckpt += ch->wb[u] + tr->opt.unit_bytes[u];
	const struct offdirs_need room = {.disk = p->place.bytes[ST_TIER_DISK],
					  .io_block = ch->po.place.io_block, .ckpt = ckpt,
					  .out = tr->o.out};
	if (offdirs_check_room(ch->dirs, ch->po.place.n_dirs, &room) != ST_OK)
		return offdirs_resume_note(tr);
	if (p->place.bytes[ST_TIER_DISK])
		note_disk_rates(tr, ch);
	/* where nothing streams the depth is moot (it was said anyway) */
	if (ch->prefetch_asked && p->place.offloaded)
		st_log_warn("--prefetch %d is more than the %d units ahead of the model's first (it "
			    "has %d): using %d",
			    ch->prefetch_asked, n - 1, n, n - 1);
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
	char pf[32] = "nothing streams"; /* as `strata plan` says it */
	if (p->place.offloaded)
		snprintf(pf, sizeof pf, "prefetch %d", p->prefetch);
	st_log_info("plan: predicted %.3f s per step, bound by %s, %s (%d plans compared)",
		    p->t.step_s, p->t.bound, pf, p->candidates);
	return ST_OK;
}

/* A held-out evaluation streams the offloaded weights once per group of
 * micro-batches (engine/exec.h: as many as 1 GiB, an eighth of the
 * available memory and the host budget's headroom hold); where memory allows only small groups that can
 * be more than training moves (one micro-batch at a time, the defaults'
 * 131072 tokens at 2 x 64 are 1024 passes over the weights). Said where an
 * evaluation costs more than a tenth of the weight traffic of the steps
 * between two. */
void tiers_note_eval_traffic(const struct st_trainer *tr)
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
	const long batches = (windows + tr->o.micro_batch - 1) / tr->o.micro_batch;
	const long group = exec_eval_group_max(&tr->s.exec);
	const long passes = (batches + group - 1) / group;
	/* a training step streams them forward and backward per micro-batch */
	const double steps = (double)passes / (2.0 * tr->o.grad_accum);
	/* the steps between two evaluations: the interval, or what is left of
	 * the run (one at its end) */
	const long left = tr->total_steps - tr->step;
	const long interval = tr->o.eval_interval > 0 && tr->o.eval_interval < left ? tr->o.eval_interval
										     : left;
	if (interval < 1 || steps < 0.1 * (double)interval)
		return;
	/* one pass over the weights, at the run's end alone: nothing to advise */
	if (passes == 1 && interval == left)
		return;
	char b1[32], b2[32], nsteps[32]; /* a fraction of a step is no "about 0" */
	snprintf(nsteps, sizeof nsteps, steps < 9.95 ? "%.1f" : "%.0f", steps);
	char per[96] = "once per micro-batch";
	if (passes == 1)
		snprintf(per, sizeof per, "once, the least an evaluation streams");
	else if (group > 1)
		snprintf(per, sizeof per, "once per group of %ld micro-batches", group);
	char when[64]; /* the last evaluation alone: at the end of what is left */
	if (interval < left)
		snprintf(when, sizeof when, "every %ld step%s", interval, interval == 1 ? "" : "s");
	else /* a fresh run evaluates at step 0 too (trainer.c): it said "once" */
		snprintf(when, sizeof when, "%s at the end of %ld step%s",
			 tr->step == 0 && tr->o.eval_interval > 0 ? "at the start and" : "once", left,
			 left == 1 ? "" : "s");
	st_log_warn("each held-out evaluation (%ld window%s in %ld micro-batch%s) streams the "
		    "offloaded weights (%s) %s: %s, the weight traffic of about %s training step%s, "
		    "%s; %s",
		    windows, windows == 1 ? "" : "s", batches, batches == 1 ? "" : "es",
		    fmt_bytes(b1, sizeof b1, streamed), per,
		    fmt_bytes(b2, sizeof b2, streamed * (double)passes), nsteps,
		    strcmp(nsteps, "1.0") ? "s" : "", when,
		    /* one pass already: fewer tokens would stream the same */
		    passes == 1	     ? "raise --eval-interval (0: at the end only)"
		    : interval < left ? "lower --eval-tokens or raise --eval-interval"
				      : "lower --eval-tokens");
}

/* Decide every slab's home, allocate the slabs and the executor, start the
 * store (staging pools, disk tier) and load the weights. */
int tiers_setup(struct st_trainer *tr, const char *model_dir, int grads)
{
	struct st_session *s = &tr->s;
	struct tier_choice ch;
	int rc = decide_tiers(tr, &ch);
	for (int t = 0; rc == ST_OK && t < ST_TIER__COUNT; t++)
		s->store.tiers[t].budget = ch.po.place.budget[t];
	/* memory the run holds outside the store (per-layer GaLore's
	 * accumulators) counts as the host tier's, as the plan counted it: what
	 * is left there sizes the evaluation's groups */
	if (rc == ST_OK) {
		const struct st_place *pl = &tr->plan.place;
		s->store.tiers[ST_TIER_HOST].used = s->store.tiers[ST_TIER_HOST].peak =
			pl->host_fixed + pl->host_scratch;
		s->store.outside[0] = (struct st_outside){
			pl->host_fixed, "accumulators",
			"per-layer GaLore's gradient accumulators and projector backups"};
		s->store.outside[1] = (struct st_outside){pl->host_scratch, "scratch",
							  "GaLore's projection scratch"};
	}
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

int trainer_plan(const struct st_train_opts *o, int json)
{
	struct st_trainer *tr = st_calloc(1, sizeof *tr);
	if (!tr)
		return ST_FAIL;
	tr->o = *o;
	tr->plan_only = 1;
	if (tr->o.steps == 0 && tr->o.max_tokens <= 0)
		tr->o.steps = 1; /* a plan needs no training length (but -1 is no length) */
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
		ST_USAGE_ERROR("pass --model DIR", "strata plan: no model (--model DIR)");
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
		ST_USAGE_ERROR("lower --seq-len", "--seq-len %d exceeds the model's max_position_embeddings %d",
			 tr->o.seq_len, cfg.max_seq);
		rc = ST_FAIL;
	}
	if (rc == ST_OK)
		rc = session_build(&tr->s, ops, &cfg, NULL);
	built = rc == ST_OK;
	if (rc == ST_OK)
		rc = session_matmul_precision(&tr->s, tr->o.matmul_precision, "--matmul-precision");
	/* the weights' headers against config.json, as train checks them (a
	 * config.json alone plans a model not yet made: said) */
	if (rc == ST_OK && weights_present(model_dir))
		rc = session_check_weights(&tr->s, model_dir);
	else if (rc == ST_OK)
		st_log_info("%s holds no weights (model.safetensors): planned from its config.json "
			    "alone", model_dir);
	/* as train sets it up: GaLore's projector sizes the scratch */
	const struct st_optim_cfg oc = trainer_optim_cfg(&tr->o, kind);
	if (rc == ST_OK)
		rc = optim_init(&tr->opt, &oc, &tr->s.model);
	optim = rc == ST_OK;
	if (rc == ST_OK && *tr->o.resume)
		rc = ckpt_check_state_settings(tr, model_dir);
	struct tier_choice ch = {0};
	if (rc == ST_OK)
		rc = decide_tiers(tr, &ch);
	if (rc == ST_OK && json)
		rc = plan_print_json(&tr->s.model, &tr->plan, &ch.pm, &tr->o,
				     ch.have_prof ? &ch.prof : NULL);
	else if (rc == ST_OK)
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
