/* Placement rules; see place.h. */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/place.h"
#include "util/check.h"

#define UNDECIDED (-1)

static int pool_w(const struct st_place_opts *o) { return o->prefetch + 3; }
static int pool_s(const struct st_place_opts *o) { return o->prefetch + 1 > 2 ? o->prefetch + 1 : 2; }
#define POOL_G 4

/* a + b, SIZE_MAX where it would wrap (refused below: sums of the host's
 * fixed parts must never come out small and pass a budget) */
static size_t sat_add(size_t a, size_t b)
{
	return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

/* The largest slab, rounded as the store rounds its staging buffers. */
static size_t max_of(const size_t *v, int n)
{
	size_t m = 0;
	for (int i = 0; v && i < n; i++)
		if (v[i] > m)
			m = v[i];
	return io_round(m, ST_IO_ALIGN);
}

int place_check_disk(const int force[ST_SLAB__COUNT], int n_dirs)
{
	for (int k = 0; k < ST_SLAB__COUNT; k++)
		ST_CHECK_USAGE(force[k] != ST_TIER_DISK || n_dirs > 0, "give --offload-dir DIR (one per SSD)",
			 "--place %s=disk needs a disk tier, and there is no offload directory",
			 slab_kind_name((enum st_slab_kind)k));
	return ST_OK;
}

int place_make(struct st_place *p, int n_units, const size_t *w_bytes,
	       const size_t *g_bytes, const size_t *s_bytes, size_t act_bytes,
	       const struct st_place_opts *o)
{
	memset(p, 0, sizeof *p);
	const int n = n_units;
	p->n_units = n;
	p->home = st_calloc((size_t)n * ST_SLAB__COUNT, sizeof *p->home);
	if (!p->home)
		return ST_FAIL;
	const size_t *bytes[ST_SLAB__COUNT] = {[ST_SLAB_W] = w_bytes, [ST_SLAB_G] = g_bytes,
					       [ST_SLAB_S] = s_bytes};
	const enum st_slab_kind kinds[] = {ST_SLAB_W, ST_SLAB_G, ST_SLAB_S};
	int *h = (int *)p->home;
	for (int u = 0; u < n; u++)
		for (int k = 0; k < ST_SLAB__COUNT; k++) {
			int dev_state = o->dev_unit && o->dev_unit[u] && (k == ST_SLAB_S || k == ST_SLAB_G);
			h[u * ST_SLAB__COUNT + k] = bytes[k] && !dev_state ? o->force[k] : ST_TIER_DEVICE;
		}
	const size_t D = o->budget[ST_TIER_DEVICE], H = o->budget[ST_TIER_HOST];
	char b1[32], b2[32], b3[32];
	ST_TRY(place_check_disk(o->force, o->n_dirs));
	const char *act_what = o->act_what ? o->act_what : "activations of one micro-batch";
	char act_hint[200];
	snprintf(act_hint, sizeof act_hint, "raise --device-mem, or lower %s",
		 o->act_options ? o->act_options : "--micro-batch / --seq-len");
	ST_CHECK(!D || act_bytes <= D, act_hint, "the device budget %s cannot hold the %s (%s)",
		 fmt_bytes(b1, sizeof b1, (double)D), act_what, fmt_bytes(b2, sizeof b2, (double)act_bytes));

	/* 1. the device: all weights and gradients, or pools plus what fits */
	size_t dev = act_bytes, undecided = 0, dev_state = 0;
	for (int u = 0; s_bytes && o->dev_unit && u < n; u++)
		if (o->dev_unit[u])
			dev_state += s_bytes[u];
	dev += dev_state;
	for (int u = 0; u < n; u++)
		for (int k = 0; k < 2; k++) {
			int i = u * ST_SLAB__COUNT + kinds[k];
			if (!bytes[kinds[k]])
				continue;
			if (h[i] == ST_TIER_DEVICE)
				dev += bytes[kinds[k]][u];
			else if (h[i] == UNDECIDED)
				undecided += bytes[kinds[k]][u];
		}
	/* pools for a kind forced off the device are needed in any case; for
	 * both kinds once not everything fits */
	const int w_forced_off = o->force[ST_SLAB_W] >= 0 && o->force[ST_SLAB_W] != ST_TIER_DEVICE;
	const int g_forced_off = o->force[ST_SLAB_G] >= 0 && o->force[ST_SLAB_G] != ST_TIER_DEVICE;
	const int w_may_stream = o->force[ST_SLAB_W] != ST_TIER_DEVICE;
	const int g_may_stream = g_bytes && o->force[ST_SLAB_G] != ST_TIER_DEVICE;
	const size_t pw = w_may_stream ? (size_t)pool_w(o) * max_of(w_bytes, n) : 0;
	const size_t pg = g_may_stream ? (size_t)POOL_G * max_of(g_bytes, n) : 0;
	const size_t forced_pools = (w_forced_off ? pw : 0) + (g_forced_off ? pg : 0);
	const int fits_all = !D || dev + forced_pools + undecided <= D;
	/* the device's two ways: everything that may stay there stays (with the
	 * pools of what is forced off), or the rest streams through pools */
	const size_t keep_need = dev + forced_pools + undecided, stream_need = dev + pw + pg;
	dev = fits_all ? keep_need - undecided : stream_need;
	if (D && dev > D) {
		/* say what the cheaper way needs (the parts that are there), and
		 * hint at the largest */
		const int keep = keep_need < stream_need;
		dev = keep ? keep_need : stream_need;
		const size_t placed = dev - act_bytes - dev_state - (keep ? forced_pools : pw + pg);
		const size_t part[4] = {act_bytes, placed, dev_state, keep ? forced_pools : pw + pg};
		const char *what[4] = {act_what,
				       g_bytes ? "weights and gradients placed there" : "weights placed there",
				       "state of the units updated there",
				       g_bytes ? "staging buffers of the streamed weights and gradients"
					       : "staging buffers of the streamed weights"};
		char parts[320] = "", num[32];
		int big = 0;
		for (int i = 0; i < 4; i++) {
			if (part[i])
				snprintf(parts + strlen(parts), sizeof parts - strlen(parts), "%s%s of %s",
					 *parts ? ", " : "", fmt_bytes(num, sizeof num, (double)part[i]),
					 what[i]);
			big = part[i] > part[big] ? i : big;
		}
		const int forced_on = o->force[ST_SLAB_W] == ST_TIER_DEVICE ||
				      o->force[ST_SLAB_G] == ST_TIER_DEVICE;
		ST_ERROR(big == 0   ? act_hint
			 : big == 1 && forced_on ? "raise --device-mem, or place fewer kinds on the device (--place)"
			 /* the weights' share is as large, but the updates' state is
			  * the user's choice */
			 : big == 2 || (big == 1 && dev_state) ? "raise --device-mem, or lower --device-updates"
			 : big == 1 ? "raise --device-mem"
			 : o->prefetch_given && o->prefetch > 1 ? "raise --device-mem, or lower --prefetch"
					     : "raise --device-mem",
			 "the device budget %s cannot hold %s (%s): %s missing",
			 fmt_bytes(b1, sizeof b1, (double)D), fmt_bytes(b2, sizeof b2, (double)dev), parts,
			 fmt_bytes(b3, sizeof b3, (double)(dev - D)));
		return ST_FAIL;
	}
	for (int k = 0; k < 2; k++)
		for (int u = 0; u < n; u++) {
			int i = u * ST_SLAB__COUNT + kinds[k];
			if (!bytes[kinds[k]] || h[i] != UNDECIDED)
				continue;
			size_t b = bytes[kinds[k]][u];
			if (fits_all || dev + b <= D) {
				h[i] = ST_TIER_DEVICE;
				dev += b;
			}
		}

	/* 2. the host: what the device left, then optimizer state */
	size_t host = sat_add(sat_add(o->host_reserved, o->host_fixed), o->host_scratch);
	ST_CHECK(host < SIZE_MAX / 4, "report this as a bug",
		 "the host's fixed parts cannot be counted (%zu + %zu + %zu bytes)", o->host_reserved,
		 o->host_fixed, o->host_scratch);
	undecided = 0;
	for (int u = 0; u < n; u++)
		for (int k = 0; k < 3; k++) {
			int i = u * ST_SLAB__COUNT + kinds[k];
			if (!bytes[kinds[k]])
				continue;
			if (h[i] == ST_TIER_HOST)
				host += bytes[kinds[k]][u];
			else if (h[i] == UNDECIDED)
				undecided += bytes[kinds[k]][u];
		}
	/* state can stream only where it is not the device's (device updates) */
	int s_off_device = 0;
	for (int u = 0; s_bytes && u < n; u++)
		s_off_device += s_bytes[u] && h[u * ST_SLAB__COUNT + ST_SLAB_S] != ST_TIER_DEVICE;
	/* without a disk tier nothing streams from disk: what the device does
	 * not hold is the host's, whole, and needs no staging buffers there */
	const int no_disk = o->n_dirs == 0;
	const int s_may_stream = s_off_device && o->force[ST_SLAB_S] != ST_TIER_HOST && !no_disk;
	const size_t ps = s_may_stream ? (size_t)pool_s(o) * max_of(s_bytes, n) : 0;
	const size_t forced_ps = o->force[ST_SLAB_S] == ST_TIER_DISK ? ps : 0;
	const int host_all = !H || host + forced_ps + undecided <= H;
	const size_t pools = host_all ? forced_ps : ps;
	const size_t rest = no_disk && !host_all ? undecided : 0;
	if (H && host + pools + rest > H) {
		/* say what the host was to hold (the parts that are there) */
		const size_t part[6] = {o->host_reserved,
					o->host_fixed,
					o->host_scratch,
					host - o->host_reserved - o->host_fixed - o->host_scratch,
					pools,
					rest};
		const char *what[6] = {"activations swapped to the host",
				       o->host_fixed_what ? o->host_fixed_what : "buffers",
				       o->host_scratch_what ? o->host_scratch_what : "scratch",
				       "slabs placed there",
				       "staging buffers for the streamed optimizer state",
				       /* eval and sample place weights alone */
				       g_bytes || s_bytes ? "state the device does not hold, with no "
							    "--offload-dir to take it"
							  : "weights the device does not hold, with no "
							    "--offload-dir to take them"};
		char parts[480] = "", num[32];
		for (int i = 0; i < 6; i++)
			if (part[i])
				snprintf(parts + strlen(parts), sizeof parts - strlen(parts), "%s%s of %s",
					 *parts ? ", " : "", fmt_bytes(num, sizeof num, (double)part[i]),
					 what[i]);
		const size_t need = host + pools + rest;
		ST_ERROR(o->host_fixed > H && o->host_fixed_hint ? o->host_fixed_hint
			 : sat_add(o->host_fixed, o->host_scratch) > H && o->host_scratch_hint
				 ? o->host_scratch_hint
			 : rest ? "raise --host-mem, or give --offload-dir DIR (one per SSD) for the rest"
			 : o->host_reserved ? "raise --host-mem, or swap fewer layers to the host"
			 : o->prefetch_given && o->prefetch > 1 ? "raise --host-mem, or lower --prefetch"
					     : "raise --host-mem",
			 "the host budget %s cannot hold %s (%s): %s missing",
			 fmt_bytes(b1, sizeof b1, (double)H), fmt_bytes(b2, sizeof b2, (double)need),
			 parts, fmt_bytes(b3, sizeof b3, (double)(need - H)));
		return ST_FAIL;
	}
	host += pools;
	size_t disk = 0, disk_raw = 0; /* in whole --io-block blocks; the slabs' own bytes */
	for (int k = 0; k < 3; k++)
		for (int u = 0; u < n; u++) {
			int i = u * ST_SLAB__COUNT + kinds[k];
			if (!bytes[kinds[k]])
				continue;
			size_t b = bytes[kinds[k]][u];
			if (h[i] == UNDECIDED) {
				if (host_all || host + b <= H) {
					h[i] = ST_TIER_HOST;
					host += b;
				} else
					h[i] = ST_TIER_DISK;
			}
			if (h[i] == ST_TIER_DISK) {
				disk += io_round(b, o->io_block ? o->io_block : ST_IO_ALIGN);
				disk_raw += b;
			}
		}
	ST_CHECK(!disk || o->n_dirs > 0,
		 "give --offload-dir DIR (one per SSD), or raise --device-mem / --host-mem",
		 "the model's state needs %s more than the device (%s) and host (%s) budgets hold",
		 fmt_bytes(b1, sizeof b1, (double)disk_raw),
		 D ? fmt_bytes(b2, sizeof b2, (double)D) : "unlimited",
		 H ? fmt_bytes(b3, sizeof b3, (double)H) : "unlimited");

	/* 3. pools for what ended up staged: never more slots than staged slabs
	 * (each then has its own), never fewer than 2 */
	int staged[ST_SLAB__COUNT] = {0};
	for (int u = 0; u < n; u++)
		for (int k = 0; k < 3; k++) {
			enum st_slab_kind kind = kinds[k];
			if (!bytes[kind])
				continue;
			enum st_tier t = (enum st_tier)h[u * ST_SLAB__COUNT + kind];
			if (t != ST_TIER_DEVICE && t != slab_work_tier(kind))
				staged[kind]++;
		}
	for (int k = 0; k < 3; k++) {
		enum st_slab_kind kind = kinds[k];
		if (!staged[kind])
			continue;
		int want = kind == ST_SLAB_W ? pool_w(o) : kind == ST_SLAB_G ? POOL_G : pool_s(o);
		if (want > staged[kind])
			want = staged[kind] > 2 ? staged[kind] : 2;
		p->pool_slots[kind] = want;
		p->offloaded = 1;
	}
	p->bytes[ST_TIER_DEVICE] = dev;
	p->bytes[ST_TIER_HOST] = host;
	p->host_fixed = o->host_fixed;
	p->host_scratch = o->host_scratch;
	p->bytes[ST_TIER_DISK] = disk; /* the layout adds swapped activations, then stripes */
	memcpy(p->budget, o->budget, sizeof p->budget);
	return ST_OK;
}

void place_free(struct st_place *p)
{
	free(p->home);
	memset(p, 0, sizeof *p);
}

int parse_bytes(const char *s, size_t *out, const char *what)
{
	*out = 0;
	if (!s || !*s || !strcmp(s, "auto"))
		return ST_OK;
	char *end;
	double v = strtod(s, &end);
	double mul = 1;
	while (*end == ' ')
		end++;
	switch (toupper((unsigned char)*end)) {
	case 'K': mul = 1024.0; end++; break;
	case 'M': mul = 1024.0 * 1024; end++; break;
	case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
	case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
	case 'P': mul = 1024.0 * 1024 * 1024 * 1024 * 1024; end++; break; /* 1024T was taken, 1P not */
	default: break;
	}
	/* 2G, 2GB, 2GiB and 2 gb alike (powers of 1024 whatever the case), and
	 * a bare count of bytes as 4096 or 4096B; spaces around are let be */
	if (mul > 1 && (*end == 'i' || *end == 'I') && (end[1] == 'b' || end[1] == 'B'))
		end += 2;
	else if (*end == 'b' || *end == 'B')
		end++;
	while (*end == ' ' || *end == '\t')
		end++;
	/* decimal only: strtod would also take 0x20 and inf */
	const size_t lead = strspn(s, " \t");
	const size_t digits = strspn(s + lead, "0123456789.eE+-");
	/* the examples a user can take as they are: a stripe block is small */
	const int block = strstr(what, "block") != NULL;
	const char *eg = block ? "give a size such as 1M or 4M (a multiple of 4K, at most 64M)"
			       : "give a size such as 512M, 2G or 1.5G (powers of 1024), or auto";
	ST_CHECK_USAGE(end != s && *end == '\0' && digits > 0 &&
			 strchr("KMGTPkmgtpBb \t", s[lead + digits]) && v >= 0 && v * mul < 1.8e19,
		 eg, "%s: '%s' is not a size", what, s);
	ST_CHECK_USAGE(v > 0, block ? eg : "give a size such as 512M, or auto (the default)",
		 "%s: '%s' is not a size", what, s);
	ST_CHECK_USAGE(v * mul >= 1, "give at least one byte, or auto",
		 "%s: '%s' is less than one byte", what, s);
	/* a bare number counts bytes: 1.5 is surely 1.5G missing its unit */
	ST_CHECK_USAGE(mul > 1 || v == floor(v), "give a unit (1.5G) or a whole number of bytes",
		 "%s: '%s' is not a whole number of bytes", what, s);
	*out = (size_t)(v * mul);
	return ST_OK;
}

int parse_place(const char *s, int force[ST_SLAB__COUNT])
{
	for (int k = 0; k < ST_SLAB__COUNT; k++)
		force[k] = UNDECIDED;
	if (!s || !*s || !strcmp(s, "auto"))
		return ST_OK;
	const char *hint = "use e.g. --place weights=host,gradients=host,optimizer=disk "
			   "(tiers: device, host, disk)";
	char buf[256];
	ST_CHECK_USAGE(strlen(s) < sizeof buf, hint, "--place '%s' is too long", s);
	ST_CHECK_USAGE(strspn(s, ",") < strlen(s), hint, "--place '%s' names nothing (auto: leave it out)",
		 s); /* strtok would find no item and read it as auto */
	strcpy(buf, s);
	for (char *save = NULL, *item = strtok_r(buf, ",", &save); item;
	     item = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(item, '=');
		ST_CHECK_USAGE(eq, hint, "--place: '%s' is not KIND=TIER", item);
		*eq = '\0';
		const char *kind = item, *tier = eq + 1;
		int k = !strcmp(kind, "weights") ? ST_SLAB_W
			: !strcmp(kind, "gradients") ? ST_SLAB_G
			: !strcmp(kind, "optimizer") ? ST_SLAB_S : -1;
		int t = !strcmp(tier, "device") ? ST_TIER_DEVICE
			: !strcmp(tier, "host") ? ST_TIER_HOST
			: !strcmp(tier, "disk") ? ST_TIER_DISK : -1;
		ST_CHECK_USAGE(k >= 0, hint, "--place: unknown slab kind '%s' (weights, gradients, optimizer)",
			 kind);
		ST_CHECK_USAGE(t >= 0, hint, "--place: unknown tier '%s' (device, host, disk)", tier);
		ST_CHECK_USAGE(force[k] == UNDECIDED, hint, "--place names %s twice", kind);
		/* the state of a unit lives on the device exactly when its update
		 * runs there, which --device-updates chooses per unit */
		ST_CHECK_USAGE(!(k == ST_SLAB_S && t == ST_TIER_DEVICE),
			 "give --device-updates N instead (N units, up to all of the model's units, as "
			 "`strata plan` counts them; auto: the planner chooses)",
			 "--place optimizer=device: optimizer state is on the device for the units "
			 "whose update runs there, which --device-updates N chooses, not --place");
		force[k] = t;
	}
	return ST_OK;
}
