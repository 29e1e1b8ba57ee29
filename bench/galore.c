/* bench/galore: step time of GaLore-AdamW and GaLore-AdamW8bit against AdamW
 * on the GaLore paper's 60M and 130M presets (LLaMA's 32000-token
 * vocabulary), and the cost of projector refreshes: amortized over the
 * refresh gap, and at the worst step.
 *
 * usage: galore [--presets llama-60m,llama-130m] [--batch 4] [--seq 256]
 *               [--steps 20] [--gap 200] [--spread 8] [--proj randomized|svd]
 *               [--json FILE]
 *        galore --projectors [--json FILE]
 *
 * Each optimizer runs the same steps (forward, backward, global norm,
 * update) on the same random tokens. The first projectors are spread over
 * the first --spread updates (the trainer's --galore-start-spread; 1 puts
 * them all in step 1, as the paper); later steps refresh the matrices whose
 * staggered phase comes up, at most ceil(matrices / gap) per step. Reported
 * per optimizer: the median of the steady steps (those after the spread),
 * the slowest step (step 1 included) and its ratio to that median. The
 * refresh cost is timed directly too: every GaLore matrix's projector
 * recomputed from its last gradient, warm (from its previous projector, as
 * a refresh) and cold (from nothing, as a first projector); amortized
 * overhead = the warm total / (gap x the median GaLore step). Ranks are the
 * paper's (60M: 128, 130M: 256). */
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "engine/session.h"
#include "optim/galore.h"
#include "optim/galore_proj.h"
#include "optim/optim.h"
#include "util/check.h"
#include "util/rng.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

enum { MAX_STEPS = 64 };

struct run {
	const char *opt;
	double median, worst, worst_later, first, state_mib;
	double step_s[MAX_STEPS]; /* every step, in order */
	int n_steps;
};

struct result {
	char preset[32];
	int rank, matrices;
	struct run runs[3];
	double refresh_total_s, refresh_max_s, cold_total_s, amortized, worst_over_median,
		later_over_median;
};

/* of n sorted values: the middle one, or the mean of the middle two */
static double median_sorted(const double *x, int n)
{
	return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static int bench_preset(const char *preset, int B, int T, int steps, int gap, int spread_opt,
			enum st_galore_proj proj, struct result *res)
{
	struct st_config cfg;
	ST_TRY(config_preset(&cfg, preset));
	cfg.vocab_size = 32000;
	cfg.max_seq = T > cfg.max_seq ? T : cfg.max_seq;
	const int rank = cfg.dim >= 768 ? 256 : 128;
	const enum st_optim_kind kinds[3] = {ST_OPT_ADAMW, ST_OPT_GALORE_ADAMW, ST_OPT_GALORE_ADAMW8};
	snprintf(res->preset, sizeof res->preset, "%s", preset);
	res->rank = rank;
	const int N = B * T;
	const int spread = spread_opt < gap ? spread_opt : gap; /* as galore.c caps it */
	for (int k = 0; k < 3; k++) {
		struct st_session s;
		ST_TRY(session_create(&s, ops_cpu(), &cfg, 1));
		session_init_random(&s, 1);
		ST_TRY(session_exec(&s, B, T));
		const struct st_model *m = &s.model;
		struct st_optim_cfg oc = {.kind = kinds[k], .beta1 = 0.9f, .beta2 = 0.95f,
					  .eps = 1e-8f, .weight_decay = 0.1f, .quant_block = 256,
					  .quant_min_numel = 4096, .galore_rank = rank,
					  .galore_gap = gap, .galore_spread = spread,
					  .galore_scale = 0.25f,
					  .galore_proj = proj, .seed = 1};
		struct st_optim opt;
		ST_TRY(optim_init(&opt, &oc, m));
		void **state = calloc((size_t)m->n_units, sizeof *state);
		for (int u = 0; u < m->n_units; u++)
			state[u] = st_aligned_alloc(opt.unit_bytes[u] + 64);
		for (int u = 0; u < m->n_units; u++)
			memset(state[u], 0, opt.unit_bytes[u]);
		int32_t *tok = malloc((size_t)N * 4), *tgt = malloc((size_t)N * 4);
		struct st_rng rng;
		rng_seed(&rng, 3, 0);
		for (int i = 0; i < N; i++) {
			tok[i] = (int32_t)(rng_next(&rng) % (uint64_t)cfg.vocab_size);
			tgt[i] = (int32_t)(rng_next(&rng) % (uint64_t)cfg.vocab_size);
		}
		double *dt = calloc((size_t)steps, sizeof *dt);
		for (int it = 0; it < steps; it++) {
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
						state[u], it + 1, 1e-3f, ss > 1 ? (float)(1 / sqrt(ss)) : 1.0f);
			dt[it] = now() - t0;
			fprintf(stderr, "  %s %s step %d: %.2f s\n", preset, optim_kind_name(kinds[k]),
				it + 1, dt[it]);
		}
		struct run *r = &res->runs[k];
		r->opt = optim_kind_name(kinds[k]);
		r->first = dt[0];
		r->n_steps = steps;
		memcpy(r->step_s, dt, (size_t)steps * sizeof *dt);
		r->worst = r->worst_later = 0;
		for (int it = 0; it < steps; it++) {
			r->worst = fmax(r->worst, dt[it]);
			if (it > 0)
				r->worst_later = fmax(r->worst_later, dt[it]);
		}
		/* the median of the steady steps: after the first projectors, which
		 * would otherwise make the median itself a spread step */
		const int from = steps - spread >= 3 ? spread : 0;
		qsort(dt + from, (size_t)(steps - from), sizeof *dt, cmp_double);
		r->median = median_sorted(dt + from, steps - from);
		r->state_mib = (double)opt.total_bytes / 1048576.0;

		if (kinds[k] == ST_OPT_GALORE_ADAMW) {
			/* every projector again, from the last gradient, timed one by one */
			res->refresh_total_s = res->refresh_max_s = res->cold_total_s = 0;
			res->matrices = 0;
			size_t wmax = 0, pmax = 0;
			for (int i = 0; i < m->n_params; i++)
				if (opt.ps[i].galore) {
					const struct st_pstate *ps = &opt.ps[i];
					size_t w = galore_proj_work_bytes(ps->rows, ps->cols, ps->rank,
									  (enum galore_proj_method)proj);
					wmax = w > wmax ? w : wmax;
					pmax = galore_proj_numel(ps) > pmax ? galore_proj_numel(ps) : pmax;
				}
			void *work = st_aligned_alloc(wmax + 64);
			float *p = st_aligned_alloc(pmax * 4 + 64);
			for (int i = 0; i < m->n_params; i++) {
				const struct st_pstate *ps = &opt.ps[i];
				if (!ps->galore)
					continue;
				const struct st_param *pp = &m->params[i];
				const float *g = (const float *)store_acquire(&s.store, pp->unit, ST_SLAB_G) +
						 pp->offset;
				const float *prev = (const float *)((char *)state[pp->unit] + ps->proj_off);
				double t0 = now();
				galore_projector(p, g, ps->rows, ps->cols, ps->rank,
						 (enum galore_proj_method)proj, prev, 7, work);
				double t = now() - t0;
				res->refresh_total_s += t;
				res->refresh_max_s = fmax(res->refresh_max_s, t);
				res->matrices++;
				t0 = now();
				galore_projector(p, g, ps->rows, ps->cols, ps->rank,
						 (enum galore_proj_method)proj, NULL, 7, work);
				res->cold_total_s += now() - t0;
			}
			free(work);
			free(p);
		}
		for (int u = 0; u < m->n_units; u++)
			free(state[u]);
		free(state), free(tok), free(tgt), free(dt);
		optim_free(&opt);
		session_close(&s);
	}
	res->amortized = res->refresh_total_s / ((double)gap * res->runs[1].median);
	res->worst_over_median = fmax(res->runs[1].worst / res->runs[1].median,
				      res->runs[2].worst / res->runs[2].median);
	res->later_over_median = fmax(res->runs[1].worst_later / res->runs[1].median,
				      res->runs[2].worst_later / res->runs[2].median);
	return ST_OK;
}

/* --projectors: one projector of each of three gradient shapes (r: the
 * paper's rank for the model the shape is from) by each method: the exact
 * SVD, randomized from nothing (a first projector), randomized warm from the
 * previous projector (a refresh, G having moved by a tenth of its norm).
 * Each the best of 3 on a random normal G; the threads are OpenBLAS's
 * (OMP_NUM_THREADS). */
static int bench_projectors(FILE *jf)
{
	static const int shapes[3][3] = {{512, 1376, 128}, {768, 2048, 256}, {2048, 5461, 512}};
	static const char *const names[3] = {"svd", "randomized", "warm"};
	double best[3][3];
	for (int s = 0; s < 3; s++) {
		const int m = shapes[s][0], n = shapes[s][1], r = shapes[s][2];
		const size_t mn = (size_t)m * n, pn = (size_t)r * (size_t)(m < n ? m : n);
		float *G = st_malloc(mn * sizeof *G), *G2 = st_malloc(mn * sizeof *G2);
		float *P = st_malloc(pn * sizeof *P), *P0 = st_malloc(pn * sizeof *P0);
		const size_t wb = galore_proj_work_bytes(m, n, r, GALORE_PROJ_SVD) >
						  galore_proj_work_bytes(m, n, r, GALORE_PROJ_RANDOMIZED)
					  ? galore_proj_work_bytes(m, n, r, GALORE_PROJ_SVD)
					  : galore_proj_work_bytes(m, n, r, GALORE_PROJ_RANDOMIZED);
		void *work = st_malloc(wb);
		if (!G || !G2 || !P || !P0 || !work)
			return ST_FAIL;
		struct st_rng rng;
		rng_seed(&rng, 7, (uint64_t)s);
		for (size_t i = 0; i < mn; i++)
			G[i] = (float)rng_normal(&rng);
		for (size_t i = 0; i < mn; i++)
			G2[i] = G[i] + 0.1f * (float)rng_normal(&rng);
		if (galore_projector(P0, G, m, n, r, GALORE_PROJ_RANDOMIZED, NULL, 1, work) != ST_OK)
			return ST_FAIL;
		for (int k = 0; k < 3; k++) {
			best[s][k] = 1e300;
			for (int rep = 0; rep < 3; rep++) {
				const double t0 = now();
				const int rc = galore_projector(
					P, k == 2 ? G2 : G, m, n, r, k ? GALORE_PROJ_RANDOMIZED : GALORE_PROJ_SVD,
					k == 2 ? P0 : NULL, 1, work);
				const double t = now() - t0;
				if (rc != ST_OK)
					return ST_FAIL;
				best[s][k] = t < best[s][k] ? t : best[s][k];
			}
		}
		const int th = omp_get_max_threads();
		printf("%4d x %-4d r %-3d  svd %.3f s  randomized %.3f s  warm %.3f s  (%d thread%s)\n",
		       m, n, r, best[s][0], best[s][1], best[s][2], th, th == 1 ? "" : "s");
		free(G);
		free(G2);
		free(P);
		free(P0);
		free(work);
	}
	if (jf) {
		fprintf(jf, "{\"projectors\": [");
		for (int s = 0; s < 3; s++) {
			fprintf(jf, "%s{\"m\": %d, \"n\": %d, \"rank\": %d", s ? ", " : "", shapes[s][0],
				shapes[s][1], shapes[s][2]);
			for (int k = 0; k < 3; k++)
				fprintf(jf, ", \"%s_s\": %.4f", names[k], best[s][k]);
			fprintf(jf, "}");
		}
		fprintf(jf, "], \"threads\": %d}\n", omp_get_max_threads());
	}
	return ST_OK;
}

static const char usage[] =
	"usage: bench/galore [--presets llama-60m,llama-130m] [--batch 4] [--seq 256]\n"
	"                    [--steps 20] [--gap 200] [--spread 8] [--proj randomized|svd]\n"
	"                    [--json FILE]\n"
	"       bench/galore --projectors [--json FILE]\n"
	"Step times of GaLore-AdamW and GaLore-AdamW8bit against AdamW on the\n"
	"presets, and the cost of projector refreshes (see the file's comment).\n"
	"--projectors: one projector of three gradient shapes by the exact SVD,\n"
	"randomized and warm-started randomized, on OMP_NUM_THREADS threads.\n";

int main(int argc, char **argv)
{
	struct cli_args args;
	const int rc = cli_start(&args, argc, argv, usage);
	if (rc != CLI_RUN)
		return rc;
	const char *presets, *projs;
	FILE *jf;
	long lb, lt, ls, lg, lsp;
	int projectors;
	if (cli_get_bool(&args, "projectors", &projectors) != ST_OK ||
	    cli_get_str(&args, "presets", "llama-60m,llama-130m", &presets) != ST_OK ||
	    cli_get_out(&args, "json", &jf) != ST_OK ||
	    cli_get_str(&args, "proj", "randomized", &projs) != ST_OK ||
	    cli_get_long(&args, "batch", 4, LONG_MIN, LONG_MAX, &lb) != ST_OK ||
	    cli_get_long(&args, "seq", 256, LONG_MIN, LONG_MAX, &lt) != ST_OK ||
	    cli_get_long(&args, "steps", 20, LONG_MIN, LONG_MAX, &ls) != ST_OK ||
	    cli_get_long(&args, "gap", 200, LONG_MIN, LONG_MAX, &lg) != ST_OK ||
	    cli_get_long(&args, "spread", 8, LONG_MIN, LONG_MAX, &lsp) != ST_OK ||
	    cli_check_unused(&args, "bench/galore") != ST_OK)
		return 2;
	if (lb < 1 || lb > 4096 || lt < 2 || lt > 65536 || ls < 3 || ls > MAX_STEPS || lg < 1 ||
	    lg > 1000000 || lsp < 1 || lsp > 1000000 ||
	    (strcmp(projs, "svd") && strcmp(projs, "randomized"))) {
		fprintf(stderr, "bench/galore: need 1 <= --batch <= 4096, 2 <= --seq <= 65536, "
				"3 <= --steps <= %d, --gap and --spread >= 1, --proj randomized or svd\n",
			MAX_STEPS);
		return 2;
	}
	if (projectors) {
		const int prc = bench_projectors(jf);
		if (prc != ST_OK || (jf && cli_close_out(&args, "json", jf) != ST_OK))
			return 1;
		return 0;
	}
	/* the spread the runs use: capped at the gap, as galore.c caps it (the
	 * report gave the option) */
	const int B = (int)lb, T = (int)lt, steps = (int)ls, gap = (int)lg,
		  spread = (int)lsp < gap ? (int)lsp : gap;
	const enum st_galore_proj proj = strcmp(projs, "svd") ? ST_GALORE_RANDOMIZED : ST_GALORE_SVD;
	struct result res[8];
	int nr = 0;
	char list[256];
	snprintf(list, sizeof list, "%s", presets);
	for (char *save = NULL, *p = strtok_r(list, ",", &save); p && nr < 8;
	     p = strtok_r(NULL, ",", &save))
		if (bench_preset(p, B, T, steps, gap, spread, proj, &res[nr]) == ST_OK)
			nr++;
		else
			return 1;
	printf("bench/galore: batch %d x %d tokens, %d steps, gap %d, first projectors over %d "
	       "steps, %s projector, %d threads\n",
	       B, T, steps, gap, spread, projs, omp_get_max_threads());
	printf("%-11s %-17s %9s %9s %12s %11s %10s\n", "preset", "optimizer", "median s", "step 1 s",
	       "worst 2.. s", "worst/med", "state MiB");
	for (int i = 0; i < nr; i++)
		for (int k = 0; k < 3; k++) {
			const struct run *r = &res[i].runs[k];
			printf("%-11s %-17s %9.3f %9.3f %12.3f %10.2fx %10.1f\n", res[i].preset, r->opt,
			       r->median, r->first, r->worst_later, r->worst_later / r->median,
			       r->state_mib);
		}
	for (int i = 0; i < nr; i++)
		printf("%s: rank %d, %d matrices: all refreshes %.3f s (slowest %.3f s), all first "
		       "projectors %.3f s; refreshes amortized over gap %d: %.2f%% of the GaLore step "
		       "(target <= 3%%); worst step / median %.2f (target <= 1.5); worst step after "
		       "the first / median %.2f\n",
		       res[i].preset, res[i].rank, res[i].matrices, res[i].refresh_total_s,
		       res[i].refresh_max_s, res[i].cold_total_s, gap, 100 * res[i].amortized,
		       res[i].worst_over_median, res[i].later_over_median);
	if (jf) {
		fprintf(jf, "{\"batch\": %d, \"seq\": %d, \"steps\": %d, \"gap\": %d, \"spread\": %d, "
			   "\"proj\": \"%s\", \"threads\": %d, \"results\": [",
			B, T, steps, gap, spread, projs, omp_get_max_threads());
		for (int i = 0; i < nr; i++) {
			fprintf(jf, "%s{\"preset\": \"%s\", \"rank\": %d, \"matrices\": %d, "
				   "\"refresh_total_s\": %.4f, \"refresh_max_s\": %.4f, "
				   "\"cold_total_s\": %.4f, "
				   "\"amortized_overhead\": %.5f, \"worst_over_median\": %.3f, "
				   "\"later_over_median\": %.3f, \"runs\": [",
				i ? ", " : "", res[i].preset, res[i].rank, res[i].matrices,
				res[i].refresh_total_s, res[i].refresh_max_s, res[i].cold_total_s,
				res[i].amortized,
				res[i].worst_over_median, res[i].later_over_median);
			for (int k = 0; k < 3; k++) {
				const struct run *r = &res[i].runs[k];
				fprintf(jf, "%s{\"optimizer\": \"%s\", \"median_s\": %.4f, \"worst_s\": %.4f, "
					   "\"worst_after_first_s\": %.4f, \"first_s\": %.4f, \"state_mib\": %.2f, "
					   "\"step_s\": [",
					k ? ", " : "", r->opt, r->median, r->worst, r->worst_later, r->first,
					r->state_mib);
				for (int j = 0; j < r->n_steps; j++)
					fprintf(jf, "%s%.4f", j ? ", " : "", r->step_s[j]);
				fprintf(jf, "]}");
			}
			fprintf(jf, "]}");
		}
		fprintf(jf, "]}\n");
		if (cli_close_out(&args, "json", jf) != ST_OK)
			return 1;
	}
	return 0;
}
