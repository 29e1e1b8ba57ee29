/* Available memory, cgroup limits included; see memavail.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/memavail.h"

/* A cgroup's headroom is taken as at least this much: 0 reads as "unknown"
 * to the callers (and a budget of 0 as unlimited), and a cgroup at its
 * limit has no room for a run either way. */
#define MIN_HEADROOM ((size_t)1 << 20)

/* v1 writes "no limit" as the largest page count times the page size
 * (9223372036854771712 on x86-64): anything this large is no limit. */
#define NO_LIMIT ((unsigned long long)1 << 62)

static const char *root_dir(void)
{
	const char *r = getenv("STRATA_CGROUP_ROOT"); /* test hook (memavail.h) */
	return r ? r : "";
}

/* The first number in file path (after "key " when key is given, at the
 * start of a line): 1 when found, 0 when the file or key is missing, -1
 * for "max". */
static int read_value(const char *path, const char *key, unsigned long long *v)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	char line[256];
	int got = 0;
	const size_t klen = key ? strlen(key) : 0;
	while (!got && fgets(line, sizeof line, f)) {
		const char *p = line;
		if (key) {
			if (strncmp(line, key, klen) != 0 || (line[klen] != ' ' && line[klen] != ':'))
				continue;
			p += klen + 1;
		}
		while (*p == ' ' || *p == '\t')
			p++;
		if (!strncmp(p, "max", 3))
			got = -1;
		else if (sscanf(p, "%llu", v) == 1)
			got = 1;
		if (!key)
			break;
	}
	fclose(f);
	return got;
}

/* The limit of the cgroup directory dir (files lim, use, and in stat the
 * reclaimable cache key): its headroom into m where tighter than what m
 * holds. */
static void check_level(struct st_mem_avail *m, const char *dir, const char *lim, const char *use,
			const char *cache)
{
	char path[sizeof m->cgroup_file];
	unsigned long long limit = 0, used = 0, inactive = 0;
	if (snprintf(path, sizeof path, "%s/%s", dir, lim) >= (int)sizeof path ||
	    read_value(path, NULL, &limit) != 1 || limit >= NO_LIMIT)
		return; /* a path too long to read is a limit not found */
	char upath[sizeof path];
	snprintf(upath, sizeof upath, "%s/%s", dir, use);
	if (read_value(upath, NULL, &used) != 1)
		used = 0;
	snprintf(upath, sizeof upath, "%s/memory.stat", dir);
	if (read_value(upath, cache, &inactive) == 1)
		used = inactive < used ? used - inactive : 0;
	size_t room = used < limit ? (size_t)(limit - used) : 0;
	if (room < MIN_HEADROOM)
		room = MIN_HEADROOM;
	if (m->cgroup && room >= m->cgroup)
		return;
	m->cgroup = room;
	m->cgroup_limit = (size_t)limit;
	m->cgroup_used = (size_t)used;
	memcpy(m->cgroup_file, path, sizeof path);
}

/* What a walk up the cgroup tree looks at: each level's directory, v1's
 * or v2's. */
struct cg_walk {
	const char *v1_ctrl; /* the v1 controller (its hierarchy's directory) */
	void (*level)(void *ctx, const char *dir, int v1);
	void *ctx;
};

/* Every cgroup from base + cg (the process's, "/a/b") up to base itself. */
static void walk_up(const struct cg_walk *w, const char *base, const char *cg, int v1)
{
	char dir[1024];
	if (snprintf(dir, sizeof dir, "%s%s", base, cg) >= (int)sizeof dir)
		return;
	const size_t base_len = strlen(base);
	for (;;) {
		size_t len = strlen(dir);
		while (len > base_len && dir[len - 1] == '/')
			dir[--len] = '\0';
		w->level(w->ctx, dir, v1);
		if (len <= base_len)
			return;
		char *slash = strrchr(dir + base_len, '/');
		if (!slash)
			return;
		*slash = '\0';
	}
}

static int is_dir_with(const char *dir, const char *file)
{
	char path[1024];
	if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path)
		return 0;
	FILE *f = fopen(path, "r");
	if (f)
		fclose(f);
	return f != NULL;
}

static void read_cgroups(const struct cg_walk *w, const char *root)
{
	char path[1024], line[1024];
	snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	/* "ID:CONTROLLERS:PATH": v2's line is "0::PATH", v1's line of the
	 * controller names it among its controllers */
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c1 = *c2 = '\0';
		const char *ctrls = c1 + 1, *cg = c2 + 1;
		char base[1024];
		if (!strcmp(line, "0") && !*ctrls) {
			/* the unified hierarchy: /sys/fs/cgroup, or .../unified on a
			 * hybrid system (whose memory controller is v1's) */
			snprintf(base, sizeof base, "%s/sys/fs/cgroup", root);
			if (!is_dir_with(base, "cgroup.controllers"))
				snprintf(base, sizeof base, "%s/sys/fs/cgroup/unified", root);
			walk_up(w, base, cg, 0);
			continue;
		}
		char list[256], want[64];
		snprintf(list, sizeof list, ",%s,", ctrls);
		snprintf(want, sizeof want, ",%s,", w->v1_ctrl);
		if (!strstr(list, want))
			continue;
		snprintf(base, sizeof base, "%s/sys/fs/cgroup/%s", root, w->v1_ctrl);
		walk_up(w, base, cg, 1);
	}
	fclose(f);
}

static void memory_level(void *ctx, const char *dir, int v1)
{
	if (v1)
		check_level(ctx, dir, "memory.limit_in_bytes", "memory.usage_in_bytes",
			    "total_inactive_file");
	else
		check_level(ctx, dir, "memory.max", "memory.current", "inactive_file");
}

/* The numbers at the start of dir/file, up to two ("max" is none): how
 * many were read. */
static int read_reals(const char *dir, const char *file, double *a, double *b)
{
	char path[1100];
	snprintf(path, sizeof path, "%s/%s", dir, file);
	FILE *f = fopen(path, "r");
	const int n = f ? fscanf(f, "%lf %lf", a, b) : 0;
	if (f)
		fclose(f);
	return n > 0 ? n : 0;
}

/* A level's CPU quota, in CPUs, into *(double *)ctx where tighter: v2's
 * cpu.max ("QUOTA PERIOD", or "max PERIOD"), v1's cpu.cfs_quota_us (-1:
 * none) over cpu.cfs_period_us. */
static void cpu_level(void *ctx, const char *dir, int v1)
{
	double quota = 0, period = 0, unused;
	if (!v1 ? read_reals(dir, "cpu.max", &quota, &period) != 2
		: read_reals(dir, "cpu.cfs_quota_us", &quota, &unused) != 1 ||
			  read_reals(dir, "cpu.cfs_period_us", &period, &unused) != 1)
		return;
	double *cpus = ctx;
	if (quota > 0 && period > 0 && (*cpus <= 0 || quota / period < *cpus))
		*cpus = quota / period;
}

void mem_avail_read(struct st_mem_avail *m)
{
	memset(m, 0, sizeof *m);
	const char *root = root_dir();
	char path[1024];
	snprintf(path, sizeof path, "%s/proc/meminfo", root);
	unsigned long long kb = 0;
	if (read_value(path, "MemAvailable", &kb) == 1)
		m->meminfo = (size_t)kb * 1024;
	read_cgroups(&(struct cg_walk){"memory", memory_level, m}, root);
	m->bytes = m->meminfo;
	if (m->cgroup && (!m->meminfo || m->cgroup < m->meminfo)) {
		m->bytes = m->cgroup;
		m->from_cgroup = 1;
	}
}

double cpu_quota(void)
{
	double cpus = 0;
	read_cgroups(&(struct cg_walk){"cpu", cpu_level, &cpus}, root_dir());
	return cpus;
}

size_t mem_available(void)
{
	struct st_mem_avail m;
	mem_avail_read(&m);
	return m.bytes;
}
