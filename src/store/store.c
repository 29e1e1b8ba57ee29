/* Tiers, budgets and slabs; see store.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "util/check.h"

const char *tier_name(enum st_tier t)
{
	static const char *names[] = {"device", "host", "disk"};
	return t < ST_TIER__COUNT ? names[t] : "?";
}

const char *slab_kind_name(enum st_slab_kind k)
{
	static const char *names[] = {"weights", "master", "optimizer", "gradients",
				      "activations"};
	return k < ST_SLAB__COUNT ? names[k] : "?";
}

const char *fmt_bytes(char *buf, size_t n, double bytes)
{
	const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int i = 0;
	while (bytes >= 1024 && i < 4) {
		bytes /= 1024;
		i++;
	}
	snprintf(buf, n, i ? "%.1f %s" : "%.0f %s", bytes, unit[i]);
	return buf;
}

int store_init(struct st_store *s, int n_units, const size_t budgets[ST_TIER__COUNT])
{
	memset(s, 0, sizeof *s);
	s->n_units = n_units;
	s->slabs = st_calloc((size_t)n_units * ST_SLAB__COUNT, sizeof *s->slabs);
	if (!s->slabs)
		return ST_FAIL;
	for (size_t i = 0; i < (size_t)n_units * ST_SLAB__COUNT; i++)
		s->slabs[i].alias_of = s->slabs[i].shared_from = -1;
	for (int t = 0; t < ST_TIER__COUNT; t++)
		s->tiers[t].budget = budgets ? budgets[t] : 0;
	return ST_OK;
}

void store_free(struct st_store *s)
{
	if (!s->slabs)
		return;
	for (size_t i = 0; i < (size_t)s->n_units * ST_SLAB__COUNT; i++)
		if (s->slabs[i].alias_of < 0 && s->slabs[i].shared_from < 0)
			free(s->slabs[i].ptr);
	free(s->slabs);
	memset(s, 0, sizeof *s);
}

int store_alloc(struct st_store *s, int unit, enum st_slab_kind kind, enum st_tier tier,
		size_t bytes)
{
	struct st_slab *sl = store_slab(s, unit, kind);
	struct st_tier_use *tu = &s->tiers[tier];
	ST_CHECK(tier != ST_TIER_DISK, "offload to disk arrives with the offload issue",
		 "the disk tier is not available in this build");
	ST_CHECK(sl->ptr == NULL, NULL, "internal: slab %s of unit %d allocated twice",
		 slab_kind_name(kind), unit);
	if (tu->budget && tu->used + bytes > tu->budget) {
		char b1[32], b2[32], b3[32], b4[32];
		ST_ERROR("raise the tier's budget, or lower the batch size or model size",
			 "%s tier budget exceeded allocating %s for the %s of unit %d: %s already in use "
			 "of a %s budget, %s missing",
			 tier_name(tier), fmt_bytes(b1, sizeof b1, (double)bytes), slab_kind_name(kind),
			 unit, fmt_bytes(b2, sizeof b2, (double)tu->used),
			 fmt_bytes(b3, sizeof b3, (double)tu->budget),
			 fmt_bytes(b4, sizeof b4, (double)(tu->used + bytes - tu->budget)));
		return ST_FAIL;
	}
	sl->ptr = st_aligned_alloc(bytes);
	if (!sl->ptr)
		return ST_FAIL;
	memset(sl->ptr, 0, bytes);
	sl->home = tier;
	sl->bytes = bytes;
	tu->used += bytes;
	if (tu->used > tu->peak)
		tu->peak = tu->used;
	return ST_OK;
}

void store_alias(struct st_store *s, int unit, enum st_slab_kind kind, enum st_slab_kind target)
{
	struct st_slab *sl = store_slab(s, unit, kind), *t = store_slab(s, unit, target);
	sl->ptr = t->ptr;
	sl->bytes = t->bytes;
	sl->home = t->home;
	sl->alias_of = (int)target;
}

void store_share(struct st_store *s, int unit, enum st_slab_kind kind, int from_unit)
{
	struct st_slab *sl = store_slab(s, unit, kind), *t = store_slab(s, from_unit, kind);
	sl->ptr = t->ptr;
	sl->bytes = t->bytes;
	sl->home = t->home;
	sl->shared_from = from_unit;
}

void *store_acquire(struct st_store *s, int unit, enum st_slab_kind kind)
{
	return store_slab(s, unit, kind)->ptr;
}

void store_release(struct st_store *s, int unit, enum st_slab_kind kind, int dirty)
{
	(void)s, (void)unit, (void)kind, (void)dirty; /* resident: nothing to move */
}

void store_report(const struct st_store *s)
{
	char b[32];
	st_log_info("memory plan:");
	for (int k = 0; k < ST_SLAB__COUNT; k++) {
		size_t per_tier[ST_TIER__COUNT] = {0};
		int alias = -1, shared = 0;
		for (int u = 0; u < s->n_units; u++) {
			const struct st_slab *sl = &s->slabs[(size_t)u * ST_SLAB__COUNT + k];
			if (sl->alias_of >= 0)
				alias = sl->alias_of;
			else if (sl->shared_from >= 0)
				shared++;
			else if (sl->ptr)
				per_tier[sl->home] += sl->bytes;
		}
		if (alias >= 0) {
			st_log_info("  %-12s shares the %s slabs (fp32 compute)", slab_kind_name(k),
				    slab_kind_name((enum st_slab_kind)alias));
			continue;
		}
		char line[256];
		int len = snprintf(line, sizeof line, "  %-12s", slab_kind_name(k));
		int any = 0;
		for (int t = 0; t < ST_TIER__COUNT; t++)
			if (per_tier[t]) {
				len += snprintf(line + len, sizeof line - (size_t)len, " %s on %s",
						fmt_bytes(b, sizeof b, (double)per_tier[t]),
						tier_name(t));
				any = 1;
			}
		if (!any)
			len += snprintf(line + len, sizeof line - (size_t)len, " none");
		if (shared)
			snprintf(line + len, sizeof line - (size_t)len, " (%d units share one slab)",
				 shared + 1);
		st_log_info("%s", line);
	}
	for (int t = 0; t < ST_TIER__COUNT; t++) {
		const struct st_tier_use *tu = &s->tiers[t];
		char b2[32];
		if (!tu->used && !tu->budget)
			continue;
		st_log_info("  %-6s tier  %s used of %s", tier_name(t),
			    fmt_bytes(b, sizeof b, (double)tu->used),
			    tu->budget ? fmt_bytes(b2, sizeof b2, (double)tu->budget) : "unlimited");
	}
}
