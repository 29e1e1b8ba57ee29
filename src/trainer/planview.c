/* `strata plan`'s table; see planview.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "trainer/planview.h"
#include "util/check.h"

static const enum st_slab_kind kinds[3] = {ST_SLAB_W, ST_SLAB_G, ST_SLAB_S};

/* A slab kind's bytes in each tier. */
static void kind_bytes(const struct st_model *m, const struct st_plan *p,
		       const struct st_plan_model *pm, enum st_slab_kind k, double t[ST_TIER__COUNT])
{
	const size_t *by = k == ST_SLAB_S ? pm->s_bytes : k == ST_SLAB_G ? pm->g_bytes : pm->w_bytes;
	for (int i = 0; i < ST_TIER__COUNT; i++)
		t[i] = 0;
	for (int u = 0; by && u < m->n_units; u++)
		t[place_home(&p->place, u, k)] += (double)by[u];
}

/* Each layer's activation policy as a letter: keep, recompute, host, disk. */
static void act_letters(const struct st_plan *p, int n_layers, char *buf, size_t n)
{
	size_t i = 0;
	for (int l = 0; l < n_layers && i + 1 < n; l++)
		buf[i++] = "krhd"[p->act[l]];
	buf[i] = '\0';
}

void plan_print(const struct st_model *m, const struct st_plan *p, const struct st_plan_model *pm,
		const struct st_train_opts *o, const struct st_profile *prof)
{
	char b[4][32];
	const struct st_place *pl = &p->place;
	const int L = m->cfg.n_layers;
	printf("plan: %zu parameters, %d layers; micro-batch %d x %d tokens x %d; %s\n", m->numel, L,
	       o->micro_batch, o->seq_len, o->grad_accum, o->optimizer);
	printf("%-12s %12s %12s %12s\n", "", "device", "host", "disk");
	for (int k = 0; k < 3; k++) {
		double t[ST_TIER__COUNT];
		kind_bytes(m, p, pm, kinds[k], t);
		printf("%-12s %12s %12s %12s%s\n", slab_kind_name(kinds[k]),
		       fmt_bytes(b[0], 32, t[0]), fmt_bytes(b[1], 32, t[1]), fmt_bytes(b[2], 32, t[2]),
		       pl->pool_slots[kinds[k]] ? "  (streamed)" : "");
	}
	const double swapped_host = (double)p->n_act[ST_ACT_HOST] * (double)pm->act_layer;
	const double swapped_disk = (double)p->n_act[ST_ACT_DISK] * (double)pm->act_layer;
	printf("%-12s %12s %12s %12s%s\n", "activations", fmt_bytes(b[0], 32, (double)p->act_device),
	       fmt_bytes(b[1], 32, swapped_host), fmt_bytes(b[2], 32, swapped_disk),
	       pl->pool_slots[ST_SLAB_A] ? "  (swapped layers streamed)" : "");
	if (pl->host_fixed) /* per-layer GaLore's accumulators, in host memory */
		printf("%-12s %12s %12s %12s\n", "accumulators", "0 B",
		       fmt_bytes(b[1], 32, (double)pl->host_fixed), "0 B");
	if (pl->host_scratch) /* GaLore's projection scratch, in host memory */
		printf("%-12s %12s %12s %12s\n", "scratch", "0 B",
		       fmt_bytes(b[1], 32, (double)pl->host_scratch), "0 B");
	char letters[1024];
	act_letters(p, L, letters, sizeof letters);
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
	/* the disk's total is in whole --io-block blocks per slab (and whole
	 * stripes), more than its rows' bytes on a small model */
	printf("%-12s %12s %12s %12s   (pools included%s)\n", "tier total",
	       fmt_bytes(b[0], 32, (double)pl->bytes[ST_TIER_DEVICE]),
	       fmt_bytes(b[1], 32, (double)pl->bytes[ST_TIER_HOST]),
	       fmt_bytes(b[2], 32, (double)pl->bytes[ST_TIER_DISK]),
	       pl->bytes[ST_TIER_DISK] ? "; on disk each slab takes whole --io-block blocks" : "");
	printf("%-12s %12s %12s %12s\n", "budget",
	       pl->budget[ST_TIER_DEVICE] ? fmt_bytes(b[0], 32, (double)pl->budget[ST_TIER_DEVICE]) : "unlimited",
	       pl->budget[ST_TIER_HOST] ? fmt_bytes(b[1], 32, (double)pl->budget[ST_TIER_HOST]) : "unlimited",
	       "-");
	if (!prof) {
		printf("everything fits on the device: nothing moves, no prediction needed\n");
		return;
	}
	const struct st_plan_time *t = &p->t;
	/* the rates the plan uses for this model's width */
	const double mm = profile_matmul_rate(prof, pm->width, 0) / 1e9;
	char bf[48] = "", at[96] = "";
	if (m->matmul_bf16 && prof->bf16_matmul_gflops > 0)
		snprintf(bf, sizeof bf, " (bf16 %.1f)", profile_matmul_rate(prof, pm->width, 1) / 1e9);
	else if (m->matmul_bf16) /* a given profile without the key: warned */
		snprintf(bf, sizeof bf, " (bf16: not measured, at this rate)");
	if (prof->attention_gflops > 0)
		snprintf(at, sizeof at, ", attention %.1f GFLOP/s at %d tokens",
			 profile_attention_rate(prof, pm->seq_len) / 1e9, pm->seq_len);
	if (prof->elementwise_gbs > 0)
		snprintf(at + strlen(at), sizeof at - strlen(at), ", other kernels %.1f GB/s",
			 prof->elementwise_gbs);
	printf("profile: matmul %.1f%s GFLOP/s at dim %d%s, copy %.1f / %.1f GB/s h2d / d2h, AdamW %.0f "
	       "(CPU) / %.0f (device) M params/s, disk %.2f / %.2f GB/s read / write%s",
	       mm, bf, pm->width, at, prof->h2d_gbs, prof->d2h_gbs,
	       pm->quantized ? prof->cpu_adamw8bit_mparams : prof->cpu_adamw_mparams,
	       pm->quantized ? prof->dev_adamw8bit_mparams : prof->dev_adamw_mparams,
	       prof->disk_read_gbs, prof->disk_write_gbs, prof->shared_cores ? ", shared cores" : "");
	if (prof->shared_cores)
		printf(" (the disk's CPU work costs %.0f%% of the compute while it streams, the "
		       "copies' %.0f%%)",
		       100 * prof->disk_cpu_share, 100 * prof->copy_cpu_share);
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

/* {"device": a, "host": b, "disk": c}, whole bytes */
static cJSON *per_tier(const double t[ST_TIER__COUNT])
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "device", t[ST_TIER_DEVICE]);
	cJSON_AddNumberToObject(o, "host", t[ST_TIER_HOST]);
	cJSON_AddNumberToObject(o, "disk", t[ST_TIER_DISK]);
	return o;
}

int plan_print_json(const struct st_model *m, const struct st_plan *p,
		    const struct st_plan_model *pm, const struct st_train_opts *o,
		    const struct st_profile *prof)
{
	const struct st_place *pl = &p->place;
	const int L = m->cfg.n_layers;
	cJSON *r = cJSON_CreateObject();
	cJSON *mo = cJSON_AddObjectToObject(r, "model");
	cJSON_AddNumberToObject(mo, "parameters", (double)m->numel);
	cJSON_AddNumberToObject(mo, "layers", L);
	cJSON_AddNumberToObject(mo, "units", m->n_units);
	cJSON *run = cJSON_AddObjectToObject(r, "run");
	cJSON_AddNumberToObject(run, "micro_batch", o->micro_batch);
	cJSON_AddNumberToObject(run, "seq_len", o->seq_len);
	cJSON_AddNumberToObject(run, "grad_accum", o->grad_accum);
	cJSON_AddStringToObject(run, "optimizer", o->optimizer);
	cJSON_AddStringToObject(run, "matmul_precision", m->matmul_bf16 ? "bf16" : "fp32");

	cJSON *slabs = cJSON_AddObjectToObject(r, "slabs");
	for (int k = 0; k < 3; k++) {
		double t[ST_TIER__COUNT];
		kind_bytes(m, p, pm, kinds[k], t);
		cJSON *s = per_tier(t);
		cJSON_AddBoolToObject(s, "streamed", pl->pool_slots[kinds[k]] > 0);
		cJSON_AddItemToObject(slabs, slab_kind_name(kinds[k]), s);
	}
	const double act[ST_TIER__COUNT] = {
		[ST_TIER_DEVICE] = (double)p->act_device,
		[ST_TIER_HOST] = (double)p->n_act[ST_ACT_HOST] * (double)pm->act_layer,
		[ST_TIER_DISK] = (double)p->n_act[ST_ACT_DISK] * (double)pm->act_layer};
	cJSON *a = per_tier(act);
	cJSON_AddBoolToObject(a, "streamed", pl->pool_slots[ST_SLAB_A] > 0);
	cJSON_AddItemToObject(slabs, "activations", a);
	const size_t outside[2] = {pl->host_fixed, pl->host_scratch};
	const char *outside_name[2] = {"accumulators", "scratch"};
	for (int i = 0; i < 2; i++) {
		if (!outside[i])
			continue;
		const double acc[ST_TIER__COUNT] = {[ST_TIER_HOST] = (double)outside[i]};
		cJSON *c = per_tier(acc);
		cJSON_AddBoolToObject(c, "streamed", 0);
		cJSON_AddItemToObject(slabs, outside_name[i], c);
	}

	char *letters = malloc((size_t)L + 1);
	if (!letters) {
		cJSON_Delete(r);
		return ST_FAIL;
	}
	act_letters(p, L, letters, (size_t)L + 1);
	cJSON *ly = cJSON_AddObjectToObject(r, "layers");
	cJSON_AddStringToObject(ly, "policy", letters);
	free(letters);
	cJSON_AddNumberToObject(ly, "keep", p->n_act[ST_ACT_KEEP]);
	cJSON_AddNumberToObject(ly, "recompute", p->n_act[ST_ACT_RECOMPUTE]);
	cJSON_AddNumberToObject(ly, "host", p->n_act[ST_ACT_HOST]);
	cJSON_AddNumberToObject(ly, "disk", p->n_act[ST_ACT_DISK]);

	cJSON *up = cJSON_AddObjectToObject(r, "updates");
	cJSON_AddNumberToObject(up, "device_units", p->n_dev_updates);
	cJSON_AddNumberToObject(up, "cpu_units", m->n_units - p->n_dev_updates);
	if (pl->offloaded)
		cJSON_AddNumberToObject(up, "prefetch", p->prefetch);
	else /* nothing streams */
		cJSON_AddNullToObject(up, "prefetch");

	cJSON *tiers = cJSON_AddObjectToObject(r, "tiers");
	const double tot[ST_TIER__COUNT] = {[ST_TIER_DEVICE] = (double)pl->bytes[ST_TIER_DEVICE],
					    [ST_TIER_HOST] = (double)pl->bytes[ST_TIER_HOST],
					    [ST_TIER_DISK] = (double)pl->bytes[ST_TIER_DISK]};
	cJSON_AddItemToObject(tiers, "bytes", per_tier(tot));
	cJSON *bud = cJSON_AddObjectToObject(tiers, "budget");
	const char *names[2] = {"device", "host"};
	const enum st_tier which[2] = {ST_TIER_DEVICE, ST_TIER_HOST};
	for (int i = 0; i < 2; i++) {
		if (pl->budget[which[i]])
			cJSON_AddNumberToObject(bud, names[i], (double)pl->budget[which[i]]);
		else
			cJSON_AddNullToObject(bud, names[i]);
	}
	cJSON_AddBoolToObject(tiers, "offloaded", pl->offloaded != 0);

	if (prof) {
		const struct st_plan_time *t = &p->t;
		cJSON *pr = cJSON_AddObjectToObject(r, "predicted");
		cJSON_AddNumberToObject(pr, "step_s", t->step_s);
		cJSON_AddStringToObject(pr, "bound", t->bound ? t->bound : "");
		cJSON_AddNumberToObject(pr, "compute_s", t->compute_s);
		if (prof->shared_cores) /* the updates run in compute's time (plan.c) */
			cJSON_AddNullToObject(pr, "optimizer_s");
		else
			cJSON_AddNumberToObject(pr, "optimizer_s", t->optimizer_s);
		cJSON_AddNumberToObject(pr, "disk_s", t->disk_s);
		cJSON_AddNumberToObject(pr, "disk_read_bytes", t->disk_read);
		cJSON_AddNumberToObject(pr, "disk_written_bytes", t->disk_written);
		cJSON_AddNumberToObject(pr, "copy_s", t->copy_s);
		cJSON_AddNumberToObject(pr, "copied_bytes", t->copied);
		cJSON_AddNumberToObject(pr, "plans_compared", p->candidates);
		cJSON *pf = cJSON_AddObjectToObject(r, "profile");
		cJSON_AddNumberToObject(pf, "matmul_gflops", profile_matmul_rate(prof, pm->width, 0) / 1e9);
		if (m->matmul_bf16)
			cJSON_AddNumberToObject(pf, "bf16_matmul_gflops",
						prof->bf16_matmul_gflops > 0
							? profile_matmul_rate(prof, pm->width, 1) / 1e9
							: 0);
		/* attention without its own rate: at the matmul rate; the other
		 * kernels without theirs: not charged (0) */
		cJSON_AddNumberToObject(pf, "attention_gflops",
					prof->attention_gflops > 0
						? profile_attention_rate(prof, pm->seq_len) / 1e9
						: profile_matmul_rate(prof, pm->width, 0) / 1e9);
		cJSON_AddNumberToObject(pf, "elementwise_gbs", prof->elementwise_gbs);
		cJSON_AddNumberToObject(pf, "h2d_gbs", prof->h2d_gbs);
		cJSON_AddNumberToObject(pf, "d2h_gbs", prof->d2h_gbs);
		cJSON_AddNumberToObject(pf, "cpu_adamw_mparams", pm->quantized ? prof->cpu_adamw8bit_mparams
									 : prof->cpu_adamw_mparams);
		cJSON_AddNumberToObject(pf, "device_adamw_mparams",
					pm->quantized ? prof->dev_adamw8bit_mparams : prof->dev_adamw_mparams);
		cJSON_AddNumberToObject(pf, "disk_read_gbs", prof->disk_read_gbs);
		cJSON_AddNumberToObject(pf, "disk_write_gbs", prof->disk_write_gbs);
		cJSON_AddBoolToObject(pf, "shared_cores", prof->shared_cores != 0);
	} else {
		cJSON_AddNullToObject(r, "predicted");
		cJSON_AddNullToObject(r, "profile");
	}
	char *text = cJSON_Print(r);
	cJSON_Delete(r);
	ST_CHECK(text, NULL, "out of memory printing the plan");
	const int ok = printf("%s\n", text) >= 0 && fflush(stdout) == 0;
	free(text);
	ST_CHECK(ok, "check where stdout goes", "cannot write the plan to stdout");
	return ST_OK;
}
