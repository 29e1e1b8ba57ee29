/* The offload directories of a run (--offload-dir), checked before anything
 * is written to them, by `strata plan` and `strata train` alike, in one
 * order: each exists (or is one train creates: --out or a directory above
 * it), none is given twice; then, for the directories a plan puts state in,
 * a file can be made there (the real cause when not: a read-only file
 * system, no permission, a virtual file system like /proc), each file
 * system has room for its directories' offload files and, where --out is on
 * it too, for a checkpoint besides, and no offload file passes the
 * process's file-size limit (ulimit -f). The store's own checks when it
 * creates the files (store/io.c) then find nothing new. */
#ifndef ST_OFFDIRS_H
#define ST_OFFDIRS_H

#include <stddef.h>

/* Existence (a directory train would create, out or above it, passes) and
 * no directory twice; two on one file system are warned. out may be "". */
int offdirs_check_exist(const char *const *dirs, int n, const char *out);

struct offdirs_need {
	size_t disk;       /* the disk tier's bytes (the plan's, whole blocks per slab) */
	size_t io_block;   /* the stripe block */
	size_t ckpt;       /* the bytes of one checkpoint (weights + optimizer state) */
	const char *out;   /* the run directory ("" when none is given: plan) */
};
/* The checks for the directories a plan writes to (nothing when disk is 0). */
int offdirs_check_room(const char *const *dirs, int n, const struct offdirs_need *need);

#endif
