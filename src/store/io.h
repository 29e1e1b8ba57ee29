/* The disk tier's I/O engine: io_uring (liburing) over one file per offload
 * directory, striped, O_DIRECT with aligned buffers, a checksum per block.
 *
 * The disk tier is one virtual byte space. Virtual block b (of `block` bytes)
 * lives in directory b % n_dirs at file offset (b / n_dirs) * block, so one
 * slab's blocks spread over every directory (one per SSD) and a transfer
 * keeps them all busy. A transfer submits up to `depth` block requests at
 * once and reaps completions as they come (DeepSpeed's aio uses 1 MiB blocks
 * and depth 8-32; the same defaults here). Each file is created, sized with
 * fallocate (so a small filesystem is refused before training, naming the
 * directory and the bytes missing) and unlinked at once: the space comes
 * back when the process ends, however it ends.
 *
 * Every block written gets an XXH3-64 checksum of its bytes, kept in memory;
 * every block read is verified against it, and a mismatch is an error naming
 * the directory and offset. O_DIRECT refused by the filesystem (ramfs, older tmpfs) gives
 * one warning and buffered I/O.
 *
 * Where io_uring cannot be set up (a container's seccomp profile, Docker's
 * default since 25.0; kernel.io_uring_disabled; an old kernel), a pool of
 * threads doing pread/pwrite takes the same requests, one warning said:
 * the same blocks, checksums and errors, the depth being the threads that
 * wait on the disk at once.
 *
 * One st_io is driven by one thread at a time (the store's disk queue); the
 * calls block that thread until the transfer is complete. */
#ifndef ST_IO_H
#define ST_IO_H

#include <liburing.h>
#include <stddef.h>
#include <stdint.h>

#define ST_IO_ALIGN 4096 /* O_DIRECT buffer, offset and length alignment */

struct st_io_dir {
	char *path;
	int fd;
	int direct;      /* opened with O_DIRECT */
	size_t size;     /* bytes reserved in its file */
};

struct st_io {
	int n_dirs;
	struct st_io_dir *dirs;
	size_t block;      /* stripe and request size, a multiple of ST_IO_ALIGN */
	int depth;         /* requests in flight per transfer */
	size_t n_blocks;   /* virtual blocks reserved */
	uint64_t *sums;    /* per virtual block: checksum of its last write */
	uint8_t *valid;    /* per virtual block: written at least once */
	struct io_uring ring;
	int ring_ready;
	struct io_pool *pool; /* io_uring unavailable: threads with pread/pwrite */
	int broken;        /* io_uring failed: no more transfers */
	long corrupt_before; /* test hook STRATA_FAULT_CORRUPT_OFFLOAD=N: the disk bytes of the
			     N-th block read are corrupted just before it is read */
	/* totals, for reports and benchmarks */
	uint64_t bytes_read, bytes_written;
	double busy_s;
};

/* Reserve capacity bytes (rounded up to whole stripes) across dirs; every
 * directory must exist and be writable and have room, else a clear error
 * before any training starts. block: bytes (multiple of 4096); depth >= 1. */
/* The checks io_open makes of an offload directory before it writes there:
 * it exists and is a directory, and (size > 0) its file system has size
 * bytes free. For the planner, which writes nothing. */
int io_check_dir(const char *dir, size_t size);
/* That this process can create files in dir, by making one (nameless, so
 * nothing is left): the failure names the real cause (a read-only file
 * system, no permission, a virtual file system like /proc that cannot hold
 * files). Checked for the directories a plan puts state in (not for every
 * --offload-dir given: a resumed run's saved ones may be read-only where
 * nothing goes to disk now). */
int io_check_writable(const char *dir);
int io_open(struct st_io *io, const char *const *dirs, int n_dirs, size_t block, int depth,
	    size_t capacity);
void io_close(struct st_io *io);

/* Transfer len bytes at virtual offset voff (a multiple of block) from/to buf
 * (ST_IO_ALIGN-aligned, with room for len rounded up to ST_IO_ALIGN). */
int io_write(struct st_io *io, uint64_t voff, const void *buf, size_t len);
int io_read(struct st_io *io, uint64_t voff, void *buf, size_t len);

/* A batch: the items' blocks go into one queue back to back, so the queue
 * stays full across item boundaries (a slab a unit: 12 MiB for the 60M
 * preset, where one transfer at a time would drain the queue at each end).
 * done(ctx, item, rc), when given, is called as each item completes, in the
 * calling thread; every item gets exactly one call. Returns ST_FAIL if any
 * item failed. */
struct st_io_item {
	uint64_t voff;
	void *buf;
	size_t len;
};
int io_transfer(struct st_io *io, int writing, const struct st_io_item *items, int n_items,
		void (*done)(void *ctx, int item, int rc), void *ctx);

/* From here on, this process and its children are refused io_uring_setup
 * (EPERM) by a seccomp filter, as Docker's default profile refuses it: for
 * the tests and bench/io to run the thread pool. 1, or 0 (errno set) where
 * the kernel takes no filter. */
int io_forbid_uring(void);

/* Round up to the alignment that transfers need. */
static inline size_t io_round(size_t n, size_t a) { return (n + a - 1) / a * a; }

#endif
