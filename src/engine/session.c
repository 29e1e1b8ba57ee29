/* Sessions; see session.h. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/memavail.h"
#include "engine/session.h"
#include "io/safetensors.h"
#include "model/hf.h"
#include "util/check.h"

int session_check_device(const char *device)
{
	ST_CHECK_USAGE(!strcmp(device, "cpu") || !strcmp(device, "cuda") || !strcmp(device, "auto"),
		 "use --device cpu, cuda or auto", "unknown device '%s'", device);
	return ST_OK;
}

int session_backend(const struct st_ops **ops, const char *device, int threads)
{
	ST_TRY(session_check_device(device));
	if (threads > 0)
		omp_set_num_threads(threads);
	if (threads > omp_get_num_procs())
		st_log_warn("--threads %d is more than the %d CPUs this process may use: the threads "
			    "would take turns on them, and each step be slower than with %d",
			    threads, omp_get_num_procs(), omp_get_num_procs());
	/* A CPU quota (docker --cpus) leaves every CPU visible, so a thread
	 * per CPU spun on a share of them: on a 2-CPU quota of many CPUs, each
	 * step many times slower (see README, On a shared CPU). The default
	 * takes the quota, rounded up; OMP_NUM_THREADS or --threads decides
	 * otherwise. */
	const double quota = cpu_quota();
	const int fit = quota > 0 ? (int)ceil(quota - 1e-9) : 0;
	const char *omp_env = getenv("OMP_NUM_THREADS");
	if (threads <= 0 && fit > 0 && fit < omp_get_num_procs() && !(omp_env && *omp_env)) {
		omp_set_num_threads(fit);
		st_log_info("threads: %d, for the cgroup's CPU quota of %.3g CPU%s (of %d here; "
			    "--threads N to choose)",
			    fit, quota, quota == 1 ? "" : "s", omp_get_num_procs());
	} else if (threads > fit && fit > 0 && threads <= omp_get_num_procs()) {
		st_log_warn("--threads %d is more than the cgroup's CPU quota of %.3g CPU%s: the threads "
			    "would take turns, and each step be slower than with %d",
			    threads, quota, quota == 1 ? "" : "s", fit);
	}
	const struct st_ops *cuda = NULL;
	if (strcmp(device, "cpu") != 0)
		cuda = ops_cuda();
	if (!strcmp(device, "cuda")) {
		/* ops_cuda() has no kernel table yet (src/ops/cuda/ops_cuda.cu): a
		 * GPU or nvcc changes nothing, so the message must not send the
		 * user looking for one. The CUDA backend's issue rewords this. */
		ST_CHECK(cuda,
			 "use --device cpu, or auto (which runs on the CPU until the CUDA backend "
			 "exists); `strata --version` says what this build holds",
			 "--device cuda: strata has no CUDA backend yet (a build with nvcc holds only "
			 "the CUDA optimizer kernels, which the commands do not use)");
		*ops = cuda;
		return ST_OK;
	}
	*ops = cuda ? cuda : ops_cpu();
	return ST_OK;
}

int session_build(struct st_session *s, const struct st_ops *ops, const struct st_config *cfg,
		  const size_t budgets[ST_TIER__COUNT])
{
	memset(s, 0, sizeof *s);
	s->ops = ops;
	ST_TRY(model_build(&s->model, cfg));
	ST_TRY(store_init(&s->store, s->model.n_units, budgets));
	return ST_OK;
}

int session_check_matmul_precision(const char *precision, const char *flag)
{
	ST_CHECK_USAGE(!strcmp(precision, "fp32") || !strcmp(precision, "bf16"),
		       "give fp32 or bf16", "%s must be fp32 or bf16 (got '%s')", flag, precision);
	return ST_OK;
}

int session_matmul_precision(struct st_session *s, const char *precision, const char *flag)
{
	ST_TRY(session_check_matmul_precision(precision, flag));
	s->model.matmul_bf16 = 0;
	if (!strcmp(precision, "fp32"))
		return ST_OK;
	const char *impl;
	const int native = ops_bf16_native(s->ops, &impl);
	ST_CHECK_USAGE(native,
		       "use --matmul-precision fp32 here: bf16 matmuls pay off on CPUs with AMX "
		       "(Intel Xeon since Sapphire Rapids)",
		       "%s bf16: this CPU has no bf16 matrix unit oneDNN uses (its bf16 matmul: %s), "
		       "so bf16 would be slower than fp32",
		       flag, impl);
	/* AVX512-BF16 dot products without AMX: on the Xeon VM with AMX hidden
	 * (DNNL_MAX_CPU_ISA=AVX512_CORE_BF16) they ran at 0.55x the fp32
	 * matmul (bench/results/train-bf16-20261125-xeon2/); other CPUs (AMD
	 * Zen 4 and 5) were not measured, so this is said, not refused */
	if (!ops_bf16_amx(impl))
		st_log_warn("%s bf16: oneDNN multiplies bf16 here with AVX512-BF16 dot products (%s), "
			    "not AMX; on a Xeon with AMX hidden those ran at about half the fp32 "
			    "matmul's rate (bench/train measures this CPU both ways)",
			    flag, impl);
	s->model.matmul_bf16 = 1;
	snprintf(s->matmul_name, sizeof s->matmul_name,
		 "bf16 inputs and fp32 sums in the linear layers (oneDNN %s), %s in attention", impl,
		 s->ops->matmul_lib);
	return ST_OK;
}

int session_cpu_bf16(const char **impl)
{
	return ops_bf16_native(ops_cpu(), impl);
}

const char *session_matmul_name(const struct st_session *s)
{
	return s->model.matmul_bf16 ? s->matmul_name : s->ops->matmul_lib;
}

int session_alloc(struct st_session *s, const struct st_place *pl, int with_grads)
{
	const struct st_model *m = &s->model;
	s->w = st_calloc((size_t)m->n_units, sizeof *s->w);
	if (!s->w)
		return ST_FAIL;
	size_t layer_max = 0; /* the shared layer gradient holds the largest layer */
	for (int u = 0; u < m->n_units; u++)
		if (m->units[u].kind == ST_UNIT_LAYER && m->units[u].numel > layer_max)
			layer_max = m->units[u].numel;
	int first_layer = -1;
	for (int u = 0; u < m->n_units; u++) {
		size_t bytes = m->units[u].numel * sizeof(float);
		enum st_tier wt = pl ? place_home(pl, u, ST_SLAB_W) : ST_TIER_DEVICE;
		enum st_tier gt = pl ? place_home(pl, u, ST_SLAB_G) : ST_TIER_DEVICE;
		ST_TRY(store_alloc(&s->store, u, ST_SLAB_W, wt, bytes));
		/* fp32 compute: the master weights are the compute weights */
		store_alias(&s->store, u, ST_SLAB_M, ST_SLAB_W);
		if (with_grads == ST_GRADS_SHARED_LAYERS && m->units[u].kind == ST_UNIT_LAYER) {
			if (first_layer < 0) {
				ST_TRY(store_alloc(&s->store, u, ST_SLAB_G, ST_TIER_DEVICE,
						   layer_max * sizeof(float)));
				first_layer = u;
			} else
				store_share(&s->store, u, ST_SLAB_G, first_layer);
		} else if (with_grads)
			ST_TRY(store_alloc(&s->store, u, ST_SLAB_G, gt, bytes));
		s->w[u] = store_is_staged(&s->store, u, ST_SLAB_W) ? NULL
								 : store_acquire(&s->store, u, ST_SLAB_W);
	}
	return ST_OK;
}

int session_create(struct st_session *s, const struct st_ops *ops, const struct st_config *cfg,
		   int with_grads)
{
	ST_TRY(session_build(s, ops, cfg, NULL));
	return session_alloc(s, NULL, with_grads);
}

int session_load_weights(struct st_session *s, const char *dir)
{
	struct st_weight_files wf;
	ST_TRY(weights_open(&wf, dir));
	int rc = ST_OK;
	for (int u = 0; u < s->model.n_units && rc == ST_OK; u++) {
		float *w = store_acquire(&s->store, u, ST_SLAB_W);
		rc = model_load_unit(&s->model, &wf, u, w);
		store_release(&s->store, u, ST_SLAB_W, 1);
	}
	if (rc == ST_OK)
		rc = model_check_extra(&s->model, &wf);
	weights_close(&wf);
	if (rc == ST_OK)
		rc = store_ok(&s->store);
	return rc;
}

int session_check_weights(const struct st_session *s, const char *dir)
{
	struct st_weight_files wf;
	ST_TRY(weights_open(&wf, dir));
	int rc = model_check_files(&s->model, &wf);
	weights_close(&wf);
	return rc;
}

int session_open(struct st_session *s, const struct st_ops *ops, const char *dir, int with_grads)
{
	char path[4096];
	struct st_config cfg;
	snprintf(path, sizeof path, "%s/config.json", dir);
	ST_TRY(config_load(&cfg, path));
	ST_TRY(session_build(s, ops, &cfg, NULL));
	ST_TRY(session_check_weights(s, dir));
	ST_TRY(session_alloc(s, NULL, with_grads));
	return session_load_weights(s, dir);
}

void session_init_random(struct st_session *s, unsigned long seed)
{
	for (int u = 0; u < s->model.n_units; u++) {
		model_init_unit(&s->model, u, store_acquire(&s->store, u, ST_SLAB_W), seed);
		store_release(&s->store, u, ST_SLAB_W, 1);
	}
}

int session_exec(struct st_session *s, int b, int t)
{
	return session_exec_policy(s, b, t, NULL);
}

int session_exec_policy(struct st_session *s, int b, int t, const unsigned char *act)
{
	if (s->exec_ready) {
		ST_CHECK(s->exec.b == b && s->exec.t == t, NULL,
			 "internal: executor shape changed (%dx%d -> %dx%d)", s->exec.b, s->exec.t, b, t);
		return ST_OK;
	}
	ST_CHECK(!s->dec_ready, NULL, "internal: an executor beside a decoder");
	if (exec_init(&s->exec, s->ops, &s->model, &s->store, b, t, act) != ST_OK) {
		exec_free(&s->exec); /* what it allocated before it failed */
		return ST_FAIL;
	}
	s->exec_ready = 1;
	return ST_OK;
}

int session_decoder(struct st_session *s, int t_max)
{
	if (s->dec_ready) {
		ST_CHECK(s->dec.t_max == t_max, NULL, "internal: decoder size changed (%d -> %d)",
			 s->dec.t_max, t_max);
		return ST_OK;
	}
	ST_CHECK(!s->exec_ready, NULL, "internal: a decoder beside an executor");
	if (decoder_init(&s->dec, s->ops, &s->model, &s->store, t_max) != ST_OK) {
		decoder_free(&s->dec); /* its slabs are freed with the store */
		return ST_FAIL;
	}
	s->dec_ready = 1;
	return ST_OK;
}

/* Saving reads each unit's weights through the store (staged ones too). */
static const float *weights_get(void *ctx, int unit)
{
	struct st_session *s = ctx;
	return store_acquire_as(&s->store, unit, ST_SLAB_W, ST_ACCESS_READ);
}

static void weights_put(void *ctx, int unit)
{
	struct st_session *s = ctx;
	store_release(&s->store, unit, ST_SLAB_W, 0);
}

int session_save_model(struct st_session *s, const char *dir)
{
	/* config.json last (hf.h: model_dir_clear) */
	ST_TRY(model_save_weights_dir(&s->model, dir, s->shard_bytes ? s->shard_bytes
								  : ST_DEFAULT_SHARD_BYTES,
				      weights_get, weights_put, s, NULL));
	ST_TRY(store_ok(&s->store));
	char path[4096];
	snprintf(path, sizeof path, "%s/config.json", dir);
	return config_save(&s->model.cfg, path);
}

void session_close(struct st_session *s)
{
	if (s->exec_ready)
		exec_free(&s->exec);
	if (s->dec_ready)
		decoder_free(&s->dec);
	store_free(&s->store);
	model_free(&s->model);
	free(s->w);
	memset(s, 0, sizeof *s);
}
