/* How much memory this process may still take: the smaller of the kernel's
 * MemAvailable (/proc/meminfo) and the headroom of the memory cgroups it
 * runs in (docker --memory, a systemd MemoryMax=, a Slurm job), which the
 * host's MemAvailable does not show: a run sized from the host's RAM under
 * such a limit is killed for memory.
 *
 * A cgroup's headroom is its limit less what it uses, the page cache it
 * could drop (inactive_file) not counted as used, as the kubelet reckons a
 * container's working set: MemAvailable counts reclaimable cache as
 * available too. Every cgroup from the process's own up to the root counts
 * (a limit may be set on an ancestor: a Slurm job's step, a systemd slice);
 * the smallest headroom wins. cgroup v2 (memory.max, memory.current) and v1
 * (memory.limit_in_bytes, memory.usage_in_bytes under memory/) are read;
 * "max" and v1's near-2^63 value mean no limit.
 *
 * Test hook: STRATA_CGROUP_ROOT=DIR reads DIR/proc/meminfo,
 * DIR/proc/self/cgroup and DIR/sys/fs/cgroup/... in place of the real ones,
 * so a test can build a fake tree with a limit. */
#ifndef ST_MEMAVAIL_H
#define ST_MEMAVAIL_H

#include <stddef.h>

struct st_mem_avail {
	size_t bytes;        /* what the process may take: the smaller of the two known below (0: unknown) */
	size_t meminfo;      /* MemAvailable (0: unknown) */
	size_t cgroup;       /* the tightest cgroup's headroom (0: no limit found) */
	size_t cgroup_limit; /* that cgroup's limit, and what it uses (less inactive_file) */
	size_t cgroup_used;
	int from_cgroup;     /* bytes is the cgroup's headroom */
	char cgroup_file[1100]; /* that cgroup's limit file (memory.max or memory.limit_in_bytes) */
};

void mem_avail_read(struct st_mem_avail *m);
/* The tightest CPU quota of the cgroups the process runs in, in CPUs
 * (docker --cpus 2, a Kubernetes CPU limit, systemd CPUQuota=): 0 where
 * none is set. The host's CPU count does not show it, and threads past it
 * take turns (cgroup v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us;
 * the same walk and test hook as the memory limit). */
double cpu_quota(void);
/* mem_avail_read's bytes. */
size_t mem_available(void);

#endif
