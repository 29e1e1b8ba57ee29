/* The hardware profile the plan's predictions use: measured rates of this
 * machine, cached in a JSON file, every number overridable by editing it (so
 * a user can plan for a machine they do not have).
 *
 * matmul_gflops   fp32 matmul rate of the backend (GFLOP/s)
 * copy_gbs        host <-> device copy rate (memcpy on the CPU backend; GB/s)
 * adamw_mparams   AdamW update rate (million parameters per second)
 * disk_read_gbs, disk_write_gbs   the disk tier's streaming rates (GB/s) */
#ifndef ST_PROFILE_H
#define ST_PROFILE_H

#include "ops/ops.h"

struct st_profile {
	double matmul_gflops, copy_gbs, adamw_mparams, disk_read_gbs, disk_write_gbs;
};

/* Measure (a few seconds); the disk rates on the first of dirs (NULL: left 0). */
int profile_measure(struct st_profile *p, const struct st_ops *ops, const char *dir);
/* Read a profile file; a missing key is an error naming it. */
int profile_load(struct st_profile *p, const char *path);
int profile_save(const struct st_profile *p, const char *path);

#endif
