/* `strata plan`'s table and prediction; see planview.h. */
#include <stdio.h>
#include <string.h>

#include "trainer/planview.h"
#include "util/check.h"

void plan_predict(struct st_plan_prediction *pr, const struct st_model *m, const struct st_place *pl,
		  const size_t *s_bytes, const struct st_train_opts *o, int n_recompute,
		  const struct st_profile *prof)
{
	memset(pr, 0, sizeof *pr);
	const double tokens = (double)o->micro_batch * o->seq_len * o->grad_accum;
	const double flops = model_flops_per_token(m, o->seq_len) * tokens;
	/* a recomputed layer runs its forward twice: a third of its training FLOPs */
	const double extra = flops * (double)n_recompute / (double)m->cfg.n_layers / 3.0;
	pr->compute_s = (flops + extra) / (prof->matmul_gflops * 1e9);
	pr->optimizer_s = (double)m->numel / (prof->adamw_mparams * 1e6);
	const double A = o->grad_accum;
	int staged = 0;
	for (int u = 0; u < m->n_units; u++) {
		const double wb = (double)m->units[u].numel * sizeof(float);
		/* reads and writes per step of each kind's slab when staged */
		const struct {
			enum st_slab_kind kind;
			double rd, wr;
		} traffic[3] = {{ST_SLAB_W, 3 * wb, wb},
				{ST_SLAB_G, A * wb, A * wb},
				{ST_SLAB_S, (double)s_bytes[u], (double)s_bytes[u]}};
		for (int k = 0; k < 3; k++) {
			enum st_tier t = place_home(pl, u, traffic[k].kind);
			if (t == ST_TIER_DEVICE || t == slab_work_tier(traffic[k].kind) ||
			    !(traffic[k].rd + traffic[k].wr))
				continue;
			staged = 1;
			if (t == ST_TIER_DISK) {
				pr->disk_read += traffic[k].rd;
				pr->disk_written += traffic[k].wr;
			} else {
				pr->copied += traffic[k].rd + traffic[k].wr;
			}
		}
	}
	if (prof->disk_read_gbs > 0 && prof->disk_write_gbs > 0)
		pr->disk_s = pr->disk_read / (prof->disk_read_gbs * 1e9) +
			     pr->disk_written / (prof->disk_write_gbs * 1e9);
	if (prof->copy_gbs > 0)
		pr->copy_s = pr->copied / (prof->copy_gbs * 1e9);
	if (!staged) {
		pr->step_s = pr->compute_s + pr->optimizer_s;
		pr->bound = "compute + optimizer (in memory, one after the other)";
		return;
	}
	const double q[4] = {pr->compute_s, pr->optimizer_s, pr->disk_s, pr->copy_s};
	const char *names[4] = {"compute", "optimizer", "disk", "copy"};
	int bq = 0;
	for (int i = 1; i < 4; i++)
		if (q[i] > q[bq])
			bq = i;
	pr->step_s = q[bq];
	pr->bound = names[bq];
}

void plan_print(const struct st_model *m, const struct st_place *pl, const struct st_train_opts *o,
		const struct st_optim *opt, int n_recompute, size_t act, const struct st_profile *prof)
{
	char b[4][32];
	printf("plan: %zu parameters, %d layers; micro-batch %d x %d tokens x %d; %s\n", m->numel,
	       m->cfg.n_layers, o->micro_batch, o->seq_len, o->grad_accum, o->optimizer);
	printf("%-12s %12s %12s %12s\n", "", "device", "host", "disk");
	const enum st_slab_kind kinds[3] = {ST_SLAB_W, ST_SLAB_G, ST_SLAB_S};
	for (int k = 0; k < 3; k++) {
		double t[ST_TIER__COUNT] = {0};
		for (int u = 0; u < m->n_units; u++) {
			double bytes = kinds[k] == ST_SLAB_S ? (double)opt->unit_bytes[u]
							     : (double)m->units[u].numel * sizeof(float);
			t[place_home(pl, u, kinds[k])] += bytes;
		}
		printf("%-12s %12s %12s %12s%s\n", slab_kind_name(kinds[k]),
		       fmt_bytes(b[0], 32, t[0]), fmt_bytes(b[1], 32, t[1]), fmt_bytes(b[2], 32, t[2]),
		       pl->pool_slots[kinds[k]] ? "  (streamed)" : "");
	}
	printf("%-12s %12s %12s %12s%s\n", "activations", fmt_bytes(b[0], 32, (double)act), "-", "-",
	       n_recompute ? "  (some layers recomputed)" : "");
	if (n_recompute)
		printf("recompute:   %d of %d layers keep only their input\n", n_recompute, m->cfg.n_layers);
	printf("%-12s %12s %12s %12s   (pools included)\n", "tier total",
	       fmt_bytes(b[0], 32, (double)pl->bytes[ST_TIER_DEVICE]),
	       fmt_bytes(b[1], 32, (double)pl->bytes[ST_TIER_HOST]),
	       fmt_bytes(b[2], 32, (double)pl->bytes[ST_TIER_DISK]));
	printf("%-12s %12s %12s %12s\n", "budget",
	       pl->budget[ST_TIER_DEVICE] ? fmt_bytes(b[0], 32, (double)pl->budget[ST_TIER_DEVICE]) : "unlimited",
	       pl->budget[ST_TIER_HOST] ? fmt_bytes(b[1], 32, (double)pl->budget[ST_TIER_HOST]) : "unlimited",
	       "-");
	if (!prof)
		return;
	struct st_plan_prediction pr;
	plan_predict(&pr, m, pl, opt->unit_bytes, o, n_recompute, prof);
	printf("profile: matmul %.1f GFLOP/s, copy %.1f GB/s, AdamW %.0f M params/s, disk %.2f / %.2f GB/s read / write\n",
	       prof->matmul_gflops, prof->copy_gbs, prof->adamw_mparams, prof->disk_read_gbs,
	       prof->disk_write_gbs);
	printf("predicted per step: compute %.3f s, optimizer %.3f s, disk %.3f s (%s read, %s written), copy %.3f s (%s)\n",
	       pr.compute_s, pr.optimizer_s, pr.disk_s, fmt_bytes(b[0], 32, pr.disk_read),
	       fmt_bytes(b[1], 32, pr.disk_written), pr.copy_s, fmt_bytes(b[2], 32, pr.copied));
	printf("predicted step: %.3f s, bound by %s\n", pr.step_s, pr.bound);
}
