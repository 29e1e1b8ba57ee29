/* bench/train: throughput of a full training step (forward, backward, AdamW)
 * for the GaLore paper's 60M and 130M LLaMA presets, as a ratio against the
 * best fp32 matmul rate measured in the same run on the step's own matmul
 * shapes (oneDNN, the library strata uses, and OpenBLAS, its alternative).
 * Where the CPU has a bf16 matrix unit (AMX, AVX512-BF16), the same step
 * with --matmul-precision bf16 too: its speed-up over the fp32 step, and its
 * ratio to the bf16 matmuls' own rate on the step's linear shapes (their
 * operands rounded as the step rounds them).
 *
 * usage: train [--presets llama-60m,llama-130m] [--batch 8] [--seq 256]
 *              [--vocab 32000] [--steps 4] [--json FILE]
 * The default vocabulary is LLaMA's 32000, so the presets have the paper's
 * parameter counts (with strata's byte tokenizer they are smaller).
 * Prints a table; --json writes the figures for the README. */
#include <limits.h>
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "engine/session.h"
#include "optim/optim.h"
#include "util/check.h"
#include "util/rng.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

struct shape {
	int m, n, k, ta, tb;
	double count; /* how many times per step */
	void *ws;     /* gemm_bf16's workspace */
	size_t ws_bytes;
};

typedef void (*gemm_fn)(const struct shape *s, float *a, float *b, float *c);

static void gemm_dnnl(const struct shape *s, float *a, float *b, float *c)
{
	const struct st_ops *ops = ops_cpu();
	int lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
	ops->matmul(c, a, b, s->m, s->n, s->k, s->ta, s->tb, 1.0f, 0.0f, lda, ldb, s->n);
}

/* the bf16 product as the linear layers run it, in the step's workspace
 * (model_matmul_ws_bytes) */
static void gemm_bf16(const struct shape *s, float *a, float *b, float *c)
{
	const struct st_ops *ops = ops_cpu();
	int lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
	ops->matmul_bf16(c, a, b, s->m, s->n, s->k, s->ta, s->tb, 1.0f, 0.0f, lda, ldb, s->n, s->ws,
			 s->ws_bytes);
}

static void gemm_openblas(const struct shape *s, float *a, float *b, float *c)
{
	int lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
	cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans,
		    s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);
}

/* seconds per call, best of a few timed repetitions */
static double time_gemm(gemm_fn f, const struct shape *s, float *a, float *b, float *c)
{
	f(s, a, b, c);
	double best = 1e30;
	for (int r = 0; r < 3; r++) {
		int it = 0;
		double t0 = now(), t;
		do {
			f(s, a, b, c);
			it++;
		} while ((t = now() - t0) < 0.15);
		if (t / it < best)
			best = t / it;
	}
	return best;
}

/* The matmuls of one training step: for each linear y = x W^T (N x out x in):
 * forward, input gradient, weight gradient. */
static int step_shapes(const struct st_model *m, int N, struct shape *s)
{
	const struct st_config *c = &m->cfg;
	const int C = c->dim, F = c->ffn_dim, QD = c->n_heads * c->head_dim,
		  KD = c->n_kv_heads * c->head_dim, V = c->vocab_size, L = c->n_layers;
	int lin[][3] = {{C, QD, L}, {C, KD, 2 * L}, {QD, C, L}, {C, F, 2 * L}, {F, C, L}, {C, V, 1}};
	int n = 0;
	for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
		int in = lin[i][0], out = lin[i][1];
		double cnt = lin[i][2];
		s[n++] = (struct shape){.m = N, .n = out, .k = in, .tb = 1, .count = cnt}; /* forward */
		s[n++] = (struct shape){.m = N, .n = in, .k = out, .count = cnt};          /* dx */
		s[n++] = (struct shape){.m = out, .n = in, .k = N, .ta = 1, .count = cnt}; /* dW */
	}
	return n;
}

struct result {
	const char *preset;
	double params, tok_s, step_gflops, ceil_dnnl, ceil_oblas, ratio, step_s;
	double attn_share;
};

static int bench_preset(const char *preset, int B, int T, int V, int steps, int bf16,
			struct result *r)
{
	struct st_config cfg;
	ST_TRY(config_preset(&cfg, preset));
	cfg.max_seq = T > cfg.max_seq ? T : cfg.max_seq;
	cfg.vocab_size = V;
	struct st_session s;
	ST_TRY(session_create(&s, ops_cpu(), &cfg, 1));
	session_init_random(&s, 1);
	ST_TRY(session_matmul_precision(&s, bf16 ? "bf16" : "fp32", "bench/train"));
	ST_TRY(session_exec(&s, B, T));
	const struct st_model *m = &s.model;
	const int N = B * T;

	/* the real step: forward + backward + AdamW over all units */
	struct st_optim_cfg oc = {.kind = ST_OPT_ADAMW, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
				  .weight_decay = 0.1f};
	struct st_optim opt;
	ST_TRY(optim_init(&opt, &oc, m));
	void **state = calloc((size_t)m->n_units, sizeof *state);
	for (int u = 0; u < m->n_units; u++)
		state[u] = calloc(opt.unit_bytes[u], 1);
	int32_t *tok = malloc((size_t)N * 4), *tgt = malloc((size_t)N * 4);
	struct st_rng rng;
	rng_seed(&rng, 3, 0);
	for (int i = 0; i < N; i++) {
		tok[i] = (int32_t)(rng_next(&rng) % (uint64_t)cfg.vocab_size);
		tgt[i] = (int32_t)(rng_next(&rng) % (uint64_t)cfg.vocab_size);
	}
	double best = 1e30;
	for (int it = 0; it < steps + 1; it++) {
		double t0 = now();
		for (int u = 0; u < m->n_units; u++)
			memset(store_acquire(&s.store, u, ST_SLAB_G), 0, m->units[u].numel * 4);
		long n;
		exec_micro_step(&s.exec, tok, tgt, 1.0f / N, &n);
		double ss = 0;
		for (int u = 0; u < m->n_units; u++)
			ss += s.ops->sumsq(store_acquire(&s.store, u, ST_SLAB_G), m->units[u].numel);
		for (int u = 0; u < m->n_units; u++)
			optim_step_unit(s.ops, &opt, u, s.w[u], store_acquire(&s.store, u, ST_SLAB_G),
					state[u], it + 1, 1e-4f, ss > 1 ? (float)(1 / sqrt(ss)) : 1.0f);
		double dt = now() - t0;
		if (it > 0 && dt < best) /* first step warms caches and allocators */
			best = dt;
	}
	/* ceiling: the step's matmuls, all of them by one library, the faster of
	 * oneDNN's and OpenBLAS's totals (a step uses one library: the best
	 * shape-by-shape mix of the two would be a slightly stricter ceiling no
	 * single library reaches); measured after the step, so OpenBLAS's
	 * spinning threads cannot slow the step */
	struct shape sh[32];
	int ns = step_shapes(m, N, sh);
	size_t maxe = 0;
	for (int i = 0; i < ns; i++) {
		size_t e1 = (size_t)sh[i].m * sh[i].k, e2 = (size_t)sh[i].k * sh[i].n,
		       e3 = (size_t)sh[i].m * sh[i].n;
		maxe = e1 > maxe ? e1 : maxe;
		maxe = e2 > maxe ? e2 : maxe;
		maxe = e3 > maxe ? e3 : maxe;
	}
	float *a = st_aligned_alloc(maxe * 4), *b = st_aligned_alloc(maxe * 4),
	      *c = st_aligned_alloc(maxe * 4);
	const size_t ws_bytes = bf16 ? model_matmul_ws_bytes(m, (size_t)N) : 0;
	void *ws = bf16 ? st_aligned_alloc(ws_bytes) : NULL;
	if (!a || !b || !c || (bf16 && !ws))
		return ST_FAIL;
	for (int i = 0; i < ns; i++) {
		sh[i].ws = ws;
		sh[i].ws_bytes = ws_bytes;
	}
	for (size_t i = 0; i < maxe; i++)
		a[i] = b[i] = 0.01f * (float)(i % 97);
	double flops = 0, t_dnnl = 0, t_oblas = 0;
	for (int i = 0; i < ns; i++) {
		double f = 2.0 * sh[i].m * sh[i].n * sh[i].k * sh[i].count;
		flops += f;
		t_dnnl += time_gemm(bf16 ? gemm_bf16 : gemm_dnnl, &sh[i], a, b, c) * sh[i].count;
		t_oblas += bf16 ? 0 : time_gemm(gemm_openblas, &sh[i], a, b, c) * sh[i].count;
	}
	free(a), free(b), free(c), free(ws);

	const double model_flops = model_flops_per_token(m, T) * N;
	r->preset = preset;
	r->params = (double)m->numel;
	r->step_s = best;
	r->tok_s = N / best;
	r->step_gflops = model_flops / best / 1e9;
	r->ceil_dnnl = flops / t_dnnl / 1e9;
	r->ceil_oblas = bf16 ? 0 : flops / t_oblas / 1e9;
	double ceil = r->ceil_dnnl > r->ceil_oblas ? r->ceil_dnnl : r->ceil_oblas;
	r->ratio = r->step_gflops / ceil;
	r->attn_share = (model_flops - flops) / model_flops;
	for (int u = 0; u < m->n_units; u++)
		free(state[u]);
	free(state), free(tok), free(tgt);
	optim_free(&opt);
	session_close(&s);
	return ST_OK;
}

static const char usage[] =
	"usage: bench/train [--presets llama-60m,llama-130m] [--batch 8] [--seq 256]\n"
	"                   [--vocab 32000] [--steps 4] [--json FILE]\n"
	"Training-step throughput of the presets against the best fp32 matmul rate\n"
	"(oneDNN, OpenBLAS) on the step's own shapes, measured in the same run; with a\n"
	"bf16 matrix unit (AMX, AVX512-BF16), the bf16-matmul step beside it.\n";

int main(int argc, char **argv)
{
	struct cli_args args;
	const int rc = cli_start(&args, argc, argv, usage);
	if (rc != CLI_RUN)
		return rc;
	const char *presets;
	FILE *jf;
	long lb, lt, lv, ls;
	if (cli_get_str(&args, "presets", "llama-60m,llama-130m", &presets) != ST_OK ||
	    cli_get_out(&args, "json", &jf) != ST_OK ||
	    cli_get_long(&args, "batch", 8, LONG_MIN, LONG_MAX, &lb) != ST_OK ||
	    cli_get_long(&args, "seq", 256, LONG_MIN, LONG_MAX, &lt) != ST_OK ||
	    cli_get_long(&args, "vocab", 32000, LONG_MIN, LONG_MAX, &lv) != ST_OK ||
	    cli_get_long(&args, "steps", 4, LONG_MIN, LONG_MAX, &ls) != ST_OK ||
	    cli_check_unused(&args, "bench/train") != ST_OK)
		return 2;
	if (lb < 1 || lb > 4096 || lt < 2 || lt > 65536 || lv < 256 || lv > 1 << 20 || ls < 1 ||
	    ls > 100000) {
		fprintf(stderr, "bench/train: need 1 <= --batch <= 4096, 2 <= --seq <= 65536, "
				"256 <= --vocab <= 1048576, 1 <= --steps <= 100000\n");
		return 2;
	}
	const int B = (int)lb, T = (int)lt, V = (int)lv, steps = (int)ls;
	/* every name before anything is measured (a bad one came after minutes
	 * of the good ones, and left the JSON's temporary file) */
	char list[256];
	snprintf(list, sizeof list, "%s", presets);
	int named = 0;
	for (char *p = strtok(list, ","); p; p = strtok(NULL, ","), named++) {
		struct st_config cfg;
		if (config_preset(&cfg, p) != ST_OK)
			return 2;
	}
	if (!named) {
		fprintf(stderr, "bench/train: --presets names none (have %s)\n", config_preset_names());
		return 2;
	}
	printf("bench/train: %d threads, B=%d T=%d V=%d, matmul %s; OpenBLAS core %s\n",
	       omp_get_max_threads(), B, T, V, ops_cpu()->matmul_lib, openblas_get_corename());
	printf("%-15s %8s %9s %9s %12s %12s %12s %7s\n", "preset", "params", "step s", "tok/s",
	       "step GFLOP/s", "oneDNN ceil", "OpenBLAS ceil", "ratio");
	if (jf)
		fprintf(jf, "{\"threads\": %d, \"batch\": %d, \"seq\": %d, \"vocab\": %d, \"matmul\": \"%s\", \"openblas_core\": \"%s\", \"results\": [",
			omp_get_max_threads(), B, T, V, ops_cpu()->matmul_lib, openblas_get_corename());
	snprintf(list, sizeof list, "%s", presets);
	int first = 1;
	const char *impl;
	const int bf16_here = ops_cpu()->matmul_bf16_native(&impl);
	for (char *p = strtok(list, ","); p; p = strtok(NULL, ",")) {
		struct result r[2];
		for (int bf = 0; bf <= bf16_here; bf++) {
			if (bench_preset(p, B, T, V, steps, bf, &r[bf]) != ST_OK)
				return 1;
			char name[40];
			snprintf(name, sizeof name, "%s%s", p, bf ? " bf16" : "");
			char oblas[32] = "-"; /* no bf16 matmul in OpenBLAS 0.3.21 */
			if (!bf)
				snprintf(oblas, sizeof oblas, "%.1f", r[bf].ceil_oblas);
			printf("%-15s %7.1fM %9.3f %9.0f %12.1f %12.1f %12s %6.0f%%\n", name,
			       r[bf].params / 1e6, r[bf].step_s, r[bf].tok_s, r[bf].step_gflops,
			       r[bf].ceil_dnnl, oblas, 100 * r[bf].ratio);
			/* the step's GFLOP/s count attention, which the matmul-only
			 * ceiling does not: its share, so the ratio can be read
			 * either way */
			printf("%-15s attention is %.1f%% of the step's FLOPs; on matmul FLOPs alone the "
			       "ratio is %.0f%%\n",
			       "", 100 * r[bf].attn_share, 100 * r[bf].ratio * (1 - r[bf].attn_share));
			if (bf)
				printf("%-15s --matmul-precision bf16 (oneDNN %s; its ceiling is the bf16 "
				       "matmuls' rate, rounding included): %.2fx the fp32 step's tok/s\n",
				       "", impl, r[1].tok_s / r[0].tok_s);
			if (jf)
				fprintf(jf, "%s{\"preset\": \"%s\", \"matmul_precision\": \"%s\", \"params\": %.0f, \"step_s\": %.4f, \"tok_per_s\": %.1f, "
					"\"step_gflops\": %.2f, \"ceiling_onednn_gflops\": %.2f, \"ceiling_openblas_gflops\": %.2f, "
					"\"ratio_to_best_ceiling\": %.4f, \"attention_flop_share\": %.4f",
					first ? "" : ", ", p, bf ? "bf16" : "fp32", r[bf].params, r[bf].step_s,
					r[bf].tok_s, r[bf].step_gflops, r[bf].ceil_dnnl, r[bf].ceil_oblas,
					r[bf].ratio, r[bf].attn_share);
			if (jf && bf)
				fprintf(jf, ", \"speedup_over_fp32\": %.4f, \"bf16_kernel\": \"%s\"",
					r[1].tok_s / r[0].tok_s, impl);
			if (jf)
				fprintf(jf, "}");
			first = 0;
		}
	}
	if (jf) {
		fprintf(jf, "]}\n");
		if (cli_close_out(&args, "json", jf) != ST_OK)
			return 1;
	}
	return 0;
}
