/* The disk tier's I/O engine; see io.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "store/io.h"
#include "store/store.h"
#include "util/check.h"

static double io_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One probe write decides whether the filesystem takes O_DIRECT: some refuse
 * it at open (tmpfs: EINVAL), some only at the first transfer. */
static int probe_direct(int fd)
{
	void *buf = NULL;
	if (posix_memalign(&buf, ST_IO_ALIGN, ST_IO_ALIGN) != 0)
		return 0;
	memset(buf, 0, ST_IO_ALIGN);
	ssize_t w = pwrite(fd, buf, ST_IO_ALIGN, 0);
	free(buf);
	return w == ST_IO_ALIGN;
}

static int open_dir(struct st_io_dir *d, const char *dir, size_t size)
{
	char b1[32], b2[32], b3[32];
	struct stat st;
	ST_CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode),
		 "create it first, or point --offload-dir at an existing directory",
		 "offload directory %s does not exist or is not a directory", dir);
	d->path = strdup(dir);
	d->fd = -1;
	d->size = size;
	if (!d->path)
		return ST_FAIL;
	struct statvfs vs;
	if (statvfs(dir, &vs) == 0) {
		double avail = (double)vs.f_bavail * (double)vs.f_frsize;
		ST_CHECK(avail >= (double)size,
			 "free space there, add more --offload-dir directories, or raise --host-mem",
			 "offload directory %s has %s free but needs %s (%s missing)", dir,
			 fmt_bytes(b1, sizeof b1, avail), fmt_bytes(b2, sizeof b2, (double)size),
			 fmt_bytes(b3, sizeof b3, (double)size - avail));
	}
	char path[4200];
	snprintf(path, sizeof path, "%s/.strata-offload-%d.bin", dir, (int)getpid());
	d->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT, 0600);
	if (d->fd >= 0) {
		d->direct = probe_direct(d->fd);
		if (!d->direct) {
			close(d->fd);
			unlink(path);
			d->fd = -1;
		}
	}
	if (d->fd < 0) {
		d->fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
		ST_CHECK(d->fd >= 0, "choose a writable --offload-dir",
			 "offload directory %s is not writable: %s", dir, strerror(errno));
		st_log_warn("offload directory %s refuses O_DIRECT (tmpfs?): using buffered I/O, "
			    "so the page cache may hold RAM beyond --host-mem", dir);
	}
	/* The name goes at once: the space returns when the process ends, even
	 * when it is killed. */
	unlink(path);
	int rc = posix_fallocate(d->fd, 0, (off_t)size);
	if (rc == ENOSPC) {
		ST_ERROR("free space there, add more --offload-dir directories, or raise --host-mem",
			 "offload directory %s: no room for the %s the offloaded state needs", dir,
			 fmt_bytes(b1, sizeof b1, (double)size));
		return ST_FAIL;
	}
	ST_CHECK(rc == 0 || rc == EOPNOTSUPP || rc == EINVAL, "choose another --offload-dir",
		 "offload directory %s: cannot reserve %s: %s", dir,
		 fmt_bytes(b1, sizeof b1, (double)size), strerror(rc));
	if (rc != 0)
		ST_CHECK(ftruncate(d->fd, (off_t)size) == 0, "choose another --offload-dir",
			 "offload directory %s: cannot size the offload file: %s", dir,
			 strerror(errno));
	return ST_OK;
}

int io_open(struct st_io *io, const char *const *dirs, int n_dirs, size_t block, int depth,
	    size_t capacity)
{
	memset(io, 0, sizeof *io);
	ST_CHECK(n_dirs >= 1, "give --offload-dir DIR",
		 "the plan puts state on disk but no offload directory was given");
	ST_CHECK(block >= ST_IO_ALIGN && block % ST_IO_ALIGN == 0, "use e.g. --io-block 1M",
		 "--io-block %zu must be a positive multiple of %d bytes", block, ST_IO_ALIGN);
	ST_CHECK(depth >= 1 && depth <= 4096, "use e.g. --io-depth 16",
		 "--io-depth %d must be between 1 and 4096", depth);
	io->block = block;
	io->depth = depth;
	io->n_dirs = n_dirs;
	/* whole stripes, so every directory holds the same number of blocks */
	size_t stripes = (capacity + block * (size_t)n_dirs - 1) / (block * (size_t)n_dirs);
	if (!stripes)
		stripes = 1;
	io->n_blocks = stripes * (size_t)n_dirs;
	io->dirs = st_calloc((size_t)n_dirs, sizeof *io->dirs);
	io->sums = st_calloc(io->n_blocks, sizeof *io->sums);
	io->valid = st_calloc(io->n_blocks, 1);
	if (!io->dirs || !io->sums || !io->valid) {
		io_close(io);
		return ST_FAIL;
	}
	for (int i = 0; i < n_dirs; i++)
		io->dirs[i].fd = -1;
	for (int i = 0; i < n_dirs; i++)
		if (open_dir(&io->dirs[i], dirs[i], stripes * block) != ST_OK) {
			io_close(io);
			return ST_FAIL;
		}
	int rc = io_uring_queue_init((unsigned)depth, &io->ring, 0);
	if (rc < 0) {
		ST_ERROR("the kernel must allow io_uring (Linux 5.6+; not disabled by sysctl or seccomp)",
			 "cannot set up io_uring: %s", strerror(-rc));
		io_close(io);
		return ST_FAIL;
	}
	io->ring_ready = 1;
	const char *fault = getenv("STRATA_FAULT_CORRUPT_OFFLOAD");
	io->corrupt_after = fault ? atol(fault) : 0;
	return ST_OK;
}

void io_close(struct st_io *io)
{
	if (io->ring_ready)
		io_uring_queue_exit(&io->ring);
	for (int i = 0; io->dirs && i < io->n_dirs; i++) {
		if (io->dirs[i].fd >= 0)
			close(io->dirs[i].fd);
		free(io->dirs[i].path);
	}
	free(io->dirs);
	free(io->sums);
	free(io->valid);
	memset(io, 0, sizeof *io);
}

struct io_req {
	size_t vb;         /* virtual block */
	char *buf;
	size_t len, done;  /* bytes of this block's transfer, bytes completed */
};

/* Overwrite the first 4 KiB of a block behind the engine's back (test hook). */
static void corrupt_block(struct st_io *io, size_t vb)
{
	const struct st_io_dir *d = &io->dirs[vb % (size_t)io->n_dirs];
	void *junk = NULL;
	if (posix_memalign(&junk, ST_IO_ALIGN, ST_IO_ALIGN) != 0)
		return;
	memset(junk, 0x5a, ST_IO_ALIGN);
	if (pwrite(d->fd, junk, ST_IO_ALIGN, (off_t)((vb / (size_t)io->n_dirs) * io->block)) < 0)
		st_log_warn("fault hook: could not corrupt the offload file");
	free(junk);
}

/* Queue the rest of r's transfer (all of it, or what a short one left). */
static void queue_req(struct st_io *io, int writing, struct io_req *r)
{
	const struct st_io_dir *d = &io->dirs[r->vb % (size_t)io->n_dirs];
	const uint64_t off = (r->vb / (size_t)io->n_dirs) * io->block + r->done;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring); /* depth slots: never NULL */
	if (writing)
		io_uring_prep_write(sqe, d->fd, r->buf + r->done, (unsigned)(r->len - r->done), off);
	else
		io_uring_prep_read(sqe, d->fd, r->buf + r->done, (unsigned)(r->len - r->done), off);
	io_uring_sqe_set_data(sqe, r);
}

static int transfer(struct st_io *io, int writing, uint64_t voff, char *buf, size_t len)
{
	ST_CHECK(voff % io->block == 0, NULL, "internal: unaligned disk offset %llu",
		 (unsigned long long)voff);
	const size_t total = io_round(len, ST_IO_ALIGN);
	const size_t first = voff / io->block, n = (total + io->block - 1) / io->block;
	ST_CHECK(first + n <= io->n_blocks, NULL, "internal: disk transfer past the reserved space");
	struct io_req *reqs = st_calloc((size_t)io->depth, sizeof *reqs);
	if (!reqs)
		return ST_FAIL;
	int *free_slots = st_calloc((size_t)io->depth, sizeof *free_slots);
	if (!free_slots) {
		free(reqs);
		return ST_FAIL;
	}
	int n_free = io->depth;
	for (int i = 0; i < io->depth; i++)
		free_slots[i] = i;
	const double t0 = io_now();
	size_t next = 0;
	int inflight = 0, rc = ST_OK;
	while ((rc == ST_OK && next < n) || inflight > 0) {
		while (rc == ST_OK && next < n && n_free > 0) {
			struct io_req *r = &reqs[free_slots[--n_free]];
			r->vb = first + next;
			r->buf = buf + next * io->block;
			r->len = total - next * io->block < io->block ? total - next * io->block
								      : io->block;
			r->done = 0;
			if (writing) {
				io->sums[r->vb] = XXH3_64bits(r->buf, r->len);
				io->valid[r->vb] = 1;
			} else if (!io->valid[r->vb]) {
				ST_ERROR(NULL, "internal: reading disk block %zu before it was written",
					 r->vb);
				rc = ST_FAIL;
				free_slots[n_free++] = (int)(r - reqs);
				break;
			}
			next++;
			queue_req(io, writing, r);
			inflight++;
		}
		int s = io_uring_submit(&io->ring);
		if (s < 0) {
			ST_ERROR(NULL, "io_uring submit failed: %s", strerror(-s));
			return ST_FAIL; /* the ring is unusable; the store stops on this error */
		}
		if (inflight == 0)
			break;
		struct io_uring_cqe *cqe;
		int w = io_uring_wait_cqe(&io->ring, &cqe);
		if (w < 0) {
			if (w == -EINTR)
				continue;
			ST_ERROR(NULL, "io_uring wait failed: %s", strerror(-w));
			return ST_FAIL;
		}
		struct io_req *r = io_uring_cqe_get_data(cqe);
		const int res = cqe->res;
		io_uring_cqe_seen(&io->ring, cqe);
		inflight--;
		const struct st_io_dir *d = &io->dirs[r->vb % (size_t)io->n_dirs];
		if (res <= 0) {
			if (rc == ST_OK) {
				char b[32];
				if (res == -ENOSPC)
					ST_ERROR("free space there or add another --offload-dir",
						 "offload directory %s is full: writing %s of offloaded state failed",
						 d->path, fmt_bytes(b, sizeof b, (double)r->len));
				else
					ST_ERROR("check the disk (dmesg) and the offload directory",
						 "%s offloaded state in %s failed: %s",
						 writing ? "writing" : "reading", d->path,
						 res ? strerror(-res) : "unexpected end of file");
			}
			rc = ST_FAIL;
			free_slots[n_free++] = (int)(r - reqs);
			continue;
		}
		r->done += (size_t)res;
		if (r->done < r->len && rc == ST_OK) { /* short transfer: ask for the rest */
			queue_req(io, writing, r);
			inflight++;
			continue;
		}
		if (writing && io->corrupt_after > 0 && --io->corrupt_after == 0)
			corrupt_block(io, r->vb);
		if (!writing && rc == ST_OK && XXH3_64bits(r->buf, r->len) != io->sums[r->vb]) {
			ST_ERROR("the disk or filesystem under it returned damaged data: check it (dmesg), "
				 "or move --offload-dir; restart from the last checkpoint",
				 "checksum mismatch reading offloaded state from %s (block %zu at offset %llu)",
				 d->path, r->vb, (unsigned long long)((r->vb / (size_t)io->n_dirs) * io->block));
			rc = ST_FAIL;
		}
		free_slots[n_free++] = (int)(r - reqs);
	}
	const double dt = io_now() - t0;
	io->busy_s += dt;
	if (rc == ST_OK) {
		if (writing)
			io->bytes_written += total;
		else
			io->bytes_read += total;
	}
	free(reqs);
	free(free_slots);
	return rc;
}

int io_write(struct st_io *io, uint64_t voff, const void *buf, size_t len)
{
	return transfer(io, 1, voff, (char *)buf, len);
}

int io_read(struct st_io *io, uint64_t voff, void *buf, size_t len)
{
	return transfer(io, 0, voff, buf, len);
}
