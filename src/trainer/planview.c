/* `strata plan`'s table; see planview.h. */
#include <stdio.h>
#include <string.h>

#include "trainer/planview.h"
#include "util/check.h"

void plan_print(const struct st_model *m, const struct st_plan *p, const struct st_plan_model *pm,
		const struct st_train_opts *o, const struct st_profile *prof)
{
	char b[4][32];
	const struct st_place *pl = &p->place;
	const int L = m->cfg.n_layers;
	printf("plan: %zu parameters, %d layers; micro-batch %d x %d tokens x %d; %s\n", m->numel, L,
	       o->micro_batch, o->seq_len, o->grad_accum, o->optimizer);
	printf("%-12s %12s %12s %12s\n", "", "device", "host", "disk");
	const enum st_slab_kind kinds[3] = {ST_SLAB_W, ST_SLAB_G, ST_SLAB_S};
	for (int k = 0; k < 3; k++) {
		double t[ST_TIER__COUNT] = {0};
		for (int u = 0; u < m->n_units; u++) {
			const size_t *by = kinds[k] == ST_SLAB_S ? pm->s_bytes : kinds[k] == ST_SLAB_G ? pm->g_bytes
												     : pm->w_bytes;
			if (by)
				t[place_home(pl, u, kinds[k])] += (double)by[u];
		}
		printf("%-12s %12s %12s %12s%s\n", slab_kind_name(kinds[k]),
		       fmt_bytes(b[0], 32, t[0]), fmt_bytes(b[1], 32, t[1]), fmt_bytes(b[2], 32, t[2]),
		       pl->pool_slots[kinds[k]] ? "  (streamed)" : "");
	}
	const double swapped_host = (double)p->n_act[ST_ACT_HOST] * (double)pm->act_layer;
	const double swapped_disk = (double)p->n_act[ST_ACT_DISK] * (double)pm->act_layer;
	printf("%-12s %12s %12s %12s%s\n", "activations", fmt_bytes(b[0], 32, (double)p->act_device),
	       fmt_bytes(b[1], 32, swapped_host), fmt_bytes(b[2], 32, swapped_disk),
	       pl->pool_slots[ST_SLAB_A] ? "  (swapped layers streamed)" : "");
	char letters[1024];
	int i = 0;
	for (int l = 0; l < L && i < (int)sizeof letters - 1; l++)
		letters[i++] = "krhd"[p->act[l]];
	letters[i] = '\0';
	printf("layers:      %d keep, %d recompute, %d swap to host, %d swap to disk  (%s)\n",
	       p->n_act[ST_ACT_KEEP], p->n_act[ST_ACT_RECOMPUTE], p->n_act[ST_ACT_HOST],
	       p->n_act[ST_ACT_DISK], letters);
	if (pl->offloaded)
		printf("updates:     %d of %d units on the device, the rest on the CPU; prefetch %d "
		       "unit%s\n",
		       p->n_dev_updates, m->n_units, p->prefetch, p->prefetch == 1 ? "" : "s");
	else /* nothing streams: no prefetch (the CPU's optimizer state is in host memory,
	      * its working tier, not staged) */
		printf("updates:     %d of %d units on the device, the rest on the CPU; nothing "
		       "streams\n",
		       p->n_dev_updates, m->n_units);
	printf("%-12s %12s %12s %12s   (pools included)\n", "tier total",
	       fmt_bytes(b[0], 32, (double)pl->bytes[ST_TIER_DEVICE]),
	       fmt_bytes(b[1], 32, (double)pl->bytes[ST_TIER_HOST]),
	       fmt_bytes(b[2], 32, (double)pl->bytes[ST_TIER_DISK]));
	printf("%-12s %12s %12s %12s\n", "budget",
	       pl->budget[ST_TIER_DEVICE] ? fmt_bytes(b[0], 32, (double)pl->budget[ST_TIER_DEVICE]) : "unlimited",
	       pl->budget[ST_TIER_HOST] ? fmt_bytes(b[1], 32, (double)pl->budget[ST_TIER_HOST]) : "unlimited",
	       "-");
	if (!prof) {
		printf("everything fits on the device: nothing moves, no prediction needed\n");
		return;
	}
	const struct st_plan_time *t = &p->t;
	printf("profile: matmul %.1f GFLOP/s, copy %.1f / %.1f GB/s h2d / d2h, AdamW %.0f (CPU) / %.0f "
	       "(device) M params/s, disk %.2f / %.2f GB/s read / write%s",
	       prof->matmul_gflops, prof->h2d_gbs, prof->d2h_gbs,
	       pm->quantized ? prof->cpu_adamw8bit_mparams : prof->cpu_adamw_mparams,
	       pm->quantized ? prof->dev_adamw8bit_mparams : prof->dev_adamw_mparams,
	       prof->disk_read_gbs, prof->disk_write_gbs, prof->shared_cores ? ", shared cores" : "");
	if (prof->shared_cores)
		printf(" (the disk's CPU work costs %.0f%% of the compute while it streams)",
		       100 * prof->disk_cpu_share);
	printf("\n");
	/* on shared cores the updates run on the compute queue (plan.c's
	 * upd_advance): their time is in compute's, none on a queue of their own */
	char opt[64];
	if (prof->shared_cores)
		snprintf(opt, sizeof opt, "optimizer in compute (shared cores)");
	else
		snprintf(opt, sizeof opt, "optimizer %.3f s", t->optimizer_s);
	printf("predicted busy per step: compute %.3f s, %s, disk %.3f s (%s read, %s written), "
	       "copy %.3f s (%s)\n",
	       t->compute_s, opt, t->disk_s, fmt_bytes(b[0], 32, t->disk_read),
	       fmt_bytes(b[1], 32, t->disk_written), t->copy_s, fmt_bytes(b[2], 32, t->copied));
	printf("predicted step: %.3f s, busiest queue %s (%d plans compared)\n", t->step_s, t->bound,
	       p->candidates);
}
