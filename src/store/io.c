/* The disk tier's I/O engine; see io.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/magic.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "io/fsutil.h"
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
 * it at open (ramfs, tmpfs before Linux 6.6: EINVAL), some only at the first
 * transfer. */
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

/* A file in dir with no name, so that its space returns when the process
 * ends, even when it is killed: O_TMPFILE, or where the file system lacks it
 * a name of this process's own (pid and a random part: a name left by a run
 * killed before its unlink, or a run of another PID namespace sharing the
 * directory, is passed over), removed at once. -1 with errno on failure. */
static int create_unnamed(const char *dir, int flags)
{
	int fd = open(dir, O_RDWR | O_TMPFILE | O_CLOEXEC | flags, 0600);
	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
		return fd;
	static unsigned seed;
	if (!seed)
		seed = (unsigned)getpid() ^ (unsigned)(io_now() * 1e9);
	for (int tries = 0; tries < 64; tries++) {
		char path[4200];
		snprintf(path, sizeof path, "%s/.strata-offload-%d-%08x.bin", dir, (int)getpid(),
			 rand_r(&seed));
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | flags, 0600);
		if (fd < 0 && errno == EINVAL)
			unlink(path); /* some filesystems create the file, then refuse O_DIRECT */
		if (fd >= 0) {
			unlink(path);
			return fd;
		}
		if (errno != EEXIST)
			return -1;
	}
	return -1;
}

int io_check_dir(const char *dir, size_t size)
{
	char b1[32], b2[32], b3[32];
	struct stat st;
	const int found = stat(dir, &st) == 0;
	ST_CHECK(found || errno == ENOENT || errno == ENOTDIR, "check the path and its permissions",
		 "cannot look at offload directory %s: %s", dir, strerror(errno));
	ST_CHECK(!found || S_ISDIR(st.st_mode), "point --offload-dir at a directory (the offload file "
		 "is made inside it)",
		 "offload directory %s is a file, not a directory", dir);
	ST_CHECK(found, "create it first, or point --offload-dir at an existing directory",
		 "offload directory %s does not exist", dir);
	/* a filesystem that reports no size at all (ramfs) is left to fallocate */
	const double avail = size ? fs_free_bytes(dir) : -1;
	if (avail >= 0) {
		ST_CHECK(avail >= (double)size,
			 "free space there, add more --offload-dir directories, or raise --host-mem",
			 "offload directory %s has %s free but needs %s (%s missing)", dir,
			 fmt_bytes(b1, sizeof b1, avail), fmt_bytes(b2, sizeof b2, (double)size),
			 fmt_bytes(b3, sizeof b3, (double)size - avail));
	}
	return ST_OK;
}

/* The file systems the kernel fills itself: a directory there exists, and
 * file creation fails with an errno (ENOENT for /proc) that says nothing
 * of why. */
static const char *virtual_fs(const char *dir)
{
	struct statfs sf;
	if (statfs(dir, &sf) != 0)
		return NULL;
	switch ((unsigned long)sf.f_type) {
	case PROC_SUPER_MAGIC: return "proc";
	case SYSFS_MAGIC: return "sysfs";
	case CGROUP_SUPER_MAGIC: return "cgroup";
	case CGROUP2_SUPER_MAGIC: return "cgroup2";
	case DEBUGFS_MAGIC: return "debugfs";
	case TRACEFS_MAGIC: return "tracefs";
	case SECURITYFS_MAGIC: return "securityfs";
	case DEVPTS_SUPER_MAGIC: return "devpts";
	case BPF_FS_MAGIC: return "bpf";
	case EFIVARFS_MAGIC: return "efivarfs";
	default: return NULL;
	}
}

/* Why no file can be made in dir (errno err), said with what to do. */
static int say_unwritable(const char *dir, int err)
{
	const char *vfs = virtual_fs(dir);
	if (vfs) {
		ST_ERROR("give a directory on a disk's file system (one per SSD)",
			 "offload directory %s cannot hold files: it is on a %s file system, which the "
			 "kernel fills itself (%s)",
			 dir, vfs, strerror(err));
		return ST_FAIL;
	}
	ST_ERROR(err == EROFS ? "give a directory on a writable file system, or remount this one "
				"read-write"
		 : err == EACCES || err == EPERM
			 ? "give a directory this user may write to"
		 : err == ENOSPC || err == EDQUOT
			 ? "free space (or inodes) there, or give another --offload-dir"
			 : "choose another --offload-dir",
		 "offload directory %s is not writable: %s", dir, strerror(err));
	return ST_FAIL;
}

int io_check_writable(const char *dir)
{
	/* a probe file, not access(2): root passes access on a read-only
	 * mount's directory too, and /proc passes it; nameless, it leaves
	 * nothing behind */
	const int fd = create_unnamed(dir, 0);
	if (fd < 0)
		return say_unwritable(dir, errno);
	close(fd);
	return ST_OK;
}

static int open_dir(struct st_io_dir *d, const char *dir, size_t size)
{
	char b1[32];
	/* as the trainer checks before it plans (trainer.c): there, then
	 * writable (the file's creation says the real cause), then room */
	ST_TRY(io_check_dir(dir, 0));
	d->path = strdup(dir);
	d->fd = -1;
	d->size = size;
	if (!d->path)
		return ST_FAIL;
	d->fd = create_unnamed(dir, O_DIRECT);
	if (d->fd >= 0) {
		d->direct = probe_direct(d->fd);
		if (!d->direct) {
			close(d->fd);
			d->fd = -1;
		}
	}
	if (d->fd < 0) {
		d->fd = create_unnamed(dir, 0);
		if (d->fd < 0)
			return say_unwritable(dir, errno);
		st_log_warn("offload directory %s refuses O_DIRECT (ramfs, some FUSE or older tmpfs): using buffered I/O, "
			    "so the page cache may hold RAM beyond --host-mem", dir);
	}
	ST_TRY(io_check_dir(dir, size));
	int rc = posix_fallocate(d->fd, 0, (off_t)size);
	if (rc == EOPNOTSUPP || rc == EINVAL) {
		/* a file system without fallocate (ext2): glibc reserves the space
		 * by writing into each block, which an O_DIRECT descriptor refuses;
		 * a second, buffered descriptor of the unlinked file can */
		char self[64];
		snprintf(self, sizeof self, "/proc/self/fd/%d", d->fd);
		const int fd2 = open(self, O_RDWR | O_CLOEXEC);
		if (fd2 >= 0) {
			rc = posix_fallocate(fd2, 0, (off_t)size);
			close(fd2);
		}
	}
	if (rc == ENOSPC) {
		ST_ERROR("free space there, add more --offload-dir directories, or raise --host-mem",
			 "offload directory %s: no room for the %s the offloaded state needs", dir,
			 fmt_bytes(b1, sizeof b1, (double)size));
		return ST_FAIL;
	}
	ST_CHECK(rc == 0 || rc == EOPNOTSUPP || rc == EINVAL, "choose another --offload-dir",
		 "offload directory %s: cannot reserve %s: %s", dir,
		 fmt_bytes(b1, sizeof b1, (double)size), strerror(rc));
	if (rc != 0) {
		ST_CHECK(ftruncate(d->fd, (off_t)size) == 0, "choose another --offload-dir",
			 "offload directory %s: cannot size the offload file: %s", dir,
			 strerror(errno));
		st_log_warn("offload directory %s: its file system cannot reserve the %s ahead (%s): "
			    "if it fills up while training, the run stops at that step",
			    dir, fmt_bytes(b1, sizeof b1, (double)size), strerror(rc));
	}
	return ST_OK;
}

/* ---- the thread pool io_uring's requests go to where it is unavailable ---- */

/* One request as the pool takes it: where, what, and its result (bytes, or
 * -errno as a completion's res). */
struct pool_req {
	void *data; /* the caller's request (struct io_req) */
	int fd, writing;
	uint64_t off;
	char *buf;
	size_t len;
	int res;
};

/* Requests prepared (pending), handed to the workers (sq) and done (cq):
 * each of the transfer's depth requests is in one place at a time, so
 * every queue holds at most depth. */
struct io_pool {
	pthread_mutex_t mu;
	pthread_cond_t work, done;
	struct pool_req *pending, *sq, *cq;
	int n_pending, sq_head, sq_n, cq_head, cq_n, cap;
	int stop, n_threads;
	pthread_t *threads;
};

static void *pool_worker(void *arg)
{
	struct io_pool *p = arg;
	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (!p->sq_n && !p->stop)
			pthread_cond_wait(&p->work, &p->mu);
		if (!p->sq_n) { /* stopping, nothing left */
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		struct pool_req q = p->sq[p->sq_head];
		p->sq_head = (p->sq_head + 1) % p->cap;
		p->sq_n--;
		pthread_mutex_unlock(&p->mu);
		ssize_t n;
		do
			n = q.writing ? pwrite(q.fd, q.buf, q.len, (off_t)q.off)
				      : pread(q.fd, q.buf, q.len, (off_t)q.off);
		while (n < 0 && errno == EINTR);
		q.res = n < 0 ? -errno : (int)n; /* a block is at most 64 MiB */
		pthread_mutex_lock(&p->mu);
		p->cq[(p->cq_head + p->cq_n) % p->cap] = q;
		p->cq_n++;
		pthread_cond_signal(&p->done);
		pthread_mutex_unlock(&p->mu);
	}
}

static void pool_stop(struct io_pool *p)
{
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->n_threads; i++)
		pthread_join(p->threads[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->done);
	free(p->pending);
	free(p->sq);
	free(p->cq);
	free(p->threads);
	free(p);
}

/* depth requests at once, each waiting in a thread of its own (at most
 * 64 threads: past that the requests queue for them). */
static struct io_pool *pool_start(int depth)
{
	struct io_pool *p = st_calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->cap = depth;
	p->pending = st_calloc((size_t)depth, sizeof *p->pending);
	p->sq = st_calloc((size_t)depth, sizeof *p->sq);
	p->cq = st_calloc((size_t)depth, sizeof *p->cq);
	p->threads = st_calloc((size_t)depth, sizeof *p->threads);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->done, NULL);
	if (!p->pending || !p->sq || !p->cq || !p->threads) {
		pool_stop(p);
		return NULL;
	}
	const int want = depth < 64 ? depth : 64;
	int err = 0;
	while (p->n_threads < want &&
	       !(err = pthread_create(&p->threads[p->n_threads], NULL, pool_worker, p)))
		p->n_threads++;
	if (!p->n_threads) {
		ST_ERROR("raise the process's thread limit (ulimit -u)",
			 "cannot start the disk tier's I/O threads: %s", strerror(err));
		pool_stop(p);
		return NULL;
	}
	return p;
}

/* The pending requests to the workers: how many. */
static int pool_submit(struct io_pool *p)
{
	pthread_mutex_lock(&p->mu);
	const int n = p->n_pending;
	for (int i = 0; i < n; i++)
		p->sq[(p->sq_head + p->sq_n++) % p->cap] = p->pending[i];
	p->n_pending = 0;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->mu);
	return n;
}

/* The next request done: its data and result. */
static void pool_wait(struct io_pool *p, void **data, int *res)
{
	pthread_mutex_lock(&p->mu);
	while (!p->cq_n)
		pthread_cond_wait(&p->done, &p->mu);
	const struct pool_req q = p->cq[p->cq_head];
	p->cq_head = (p->cq_head + 1) % p->cap;
	p->cq_n--;
	pthread_mutex_unlock(&p->mu);
	*data = q.data;
	*res = q.res;
}

int io_forbid_uring(void)
{
#if defined(__x86_64__)
	const unsigned arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
	const unsigned arch = AUDIT_ARCH_AARCH64;
#else
	errno = ENOSYS; /* a filter for this architecture's numbers is not written */
	return 0;
#endif
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
	       prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
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
	const int rc = io_uring_queue_init((unsigned)depth, &io->ring, 0);
	if (rc < 0) {
		static int said; /* once a process, whichever thread opens first */
		if (!__atomic_fetch_add(&said, 1, __ATOMIC_RELAXED))
			st_log_warn("io_uring cannot be set up here (%s: %s): the disk tier reads and "
				    "writes with a pool of threads instead, which may be slower (%s)",
				    strerror(-rc),
				    rc == -ENOMEM ? "the locked-memory limit, on a kernel before 5.12"
						  : "a container's seccomp profile, kernel.io_uring_disabled, "
						    "or a kernel before 5.6",
				    rc == -ENOMEM ? "raise ulimit -l, or lower --io-depth"
						  : "in Docker, --security-opt seccomp=PROFILE allowing "
						    "io_uring_setup, io_uring_enter and io_uring_register brings "
						    "it back");
		io->pool = pool_start(depth);
		if (!io->pool) {
			io_close(io);
			return ST_FAIL;
		}
	} else {
		io->ring_ready = 1;
	}
	const char *fault = getenv("STRATA_FAULT_CORRUPT_OFFLOAD");
	io->corrupt_before = fault ? atol(fault) : 0;
	return ST_OK;
}

void io_close(struct st_io *io)
{
	if (io->ring_ready)
		io_uring_queue_exit(&io->ring);
	if (io->pool)
		pool_stop(io->pool);
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
	int item;          /* which item of the batch */
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

/* A pause before asking the kernel again after a transient refusal
 * (EAGAIN, EINTR, EBUSY): the n-th waits n microseconds, so 1000 tries in
 * a row span half a second, not the microseconds a bare loop would take. */
static void io_backoff(int n)
{
	const struct timespec ts = {0, 1000L * n};
	nanosleep(&ts, NULL);
}

/* Queue the rest of r's transfer (all of it, or what a short one left). */
static void queue_req(struct st_io *io, int writing, struct io_req *r)
{
	const struct st_io_dir *d = &io->dirs[r->vb % (size_t)io->n_dirs];
	const uint64_t off = (r->vb / (size_t)io->n_dirs) * io->block + r->done;
	if (io->pool) {
		struct io_pool *p = io->pool;
		p->pending[p->n_pending++] = (struct pool_req){r, d->fd, writing, off, r->buf + r->done,
								r->len - r->done, 0};
		return;
	}
	struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring); /* depth slots: never NULL */
	if (writing)
		io_uring_prep_write(sqe, d->fd, r->buf + r->done, (unsigned)(r->len - r->done), off);
	else
		io_uring_prep_read(sqe, d->fd, r->buf + r->done, (unsigned)(r->len - r->done), off);
	io_uring_sqe_set_data(sqe, r);
}

/* The next request done, from the ring or the pool: 0, or the ring's
 * -errno (a wait interrupted by a signal is waited again). */
static int wait_one(struct st_io *io, struct io_req **r, int *res)
{
	if (io->pool) {
		void *data;
		pool_wait(io->pool, &data, res);
		*r = data;
		return 0;
	}
	struct io_uring_cqe *cqe;
	int w;
	while ((w = io_uring_wait_cqe(&io->ring, &cqe)) == -EINTR)
		;
	if (w < 0)
		return w;
	*r = io_uring_cqe_get_data(cqe);
	*res = cqe->res;
	io_uring_cqe_seen(&io->ring, cqe);
	return 0;
}

/* Per item of a batch: blocks, blocks not yet finished, its status. */
struct item_state {
	size_t first, n, submitted, pending;
	int rc, reported;
};

/* A block whose transfer is over but whose checksum is still to do. */
struct io_block {
	size_t vb;
	int item;
	char *buf;
	size_t len;
};

struct batch {
	struct st_io *io;
	int writing;
	const struct st_io_item *items;
	struct item_state *is;
	void (*done)(void *ctx, int item, int rc);
	void *ctx;
	int rc;
};

/* A block is finished: count it, and report its item when it was the last. */
static void block_finished(struct batch *b, int item, int ok)
{
	struct item_state *it = &b->is[item];
	if (!ok)
		b->rc = it->rc = ST_FAIL;
	it->pending--;
	if (it->submitted == it->n && !it->pending && !it->reported) {
		it->reported = 1;
		if (it->rc == ST_OK)
			*(b->writing ? &b->io->bytes_written : &b->io->bytes_read) +=
				io_round(b->items[item].len, ST_IO_ALIGN);
		if (b->done)
			b->done(b->ctx, item, it->rc);
	}
}

static int verify_block(struct st_io *io, const struct io_block *k)
{
	if (XXH3_64bits(k->buf, k->len) == io->sums[k->vb])
		return 1;
	const struct st_io_dir *d = &io->dirs[k->vb % (size_t)io->n_dirs];
	ST_ERROR("the disk or filesystem under it returned damaged data: check it (dmesg), "
		 "or move --offload-dir; restart from the last checkpoint",
		 "checksum mismatch reading offloaded state from %s (block %zu at offset %llu)",
		 d->path, k->vb, (unsigned long long)((k->vb / (size_t)io->n_dirs) * io->block));
	return 0;
}

/* The checksums stay off the path from one request to the next: a write's
 * block is hashed right after it is submitted (its buffer does not change
 * while it is written: the store lets nobody write a slab being written
 * back), a read's block is verified after the queue has been refilled. */
int io_transfer(struct st_io *io, int writing, const struct st_io_item *items, int n_items,
		void (*done)(void *ctx, int item, int rc), void *ctx)
{
	const int depth = io->depth;
	struct item_state *is = st_calloc((size_t)(n_items > 0 ? n_items : 1), sizeof *is);
	struct io_req *reqs = st_calloc((size_t)depth, sizeof *reqs);
	int *free_slots = st_calloc((size_t)depth, sizeof *free_slots);
	struct io_block *fresh = st_calloc((size_t)depth, sizeof *fresh);
	if (!is || !reqs || !free_slots || !fresh || io->broken) {
		if (io->broken)
			ST_ERROR(NULL, "the disk tier's io_uring failed earlier; no more transfers");
		for (int k = 0; done && k < n_items; k++) /* every item gets its one call */
			done(ctx, k, ST_FAIL);
		free(is);
		free(reqs);
		free(free_slots);
		free(fresh);
		return ST_FAIL;
	}
	struct batch b = {io, writing, items, is, done, ctx, ST_OK};
	for (int k = 0; k < n_items; k++) {
		const size_t total = io_round(items[k].len, ST_IO_ALIGN);
		is[k].first = items[k].voff / io->block;
		is[k].n = (total + io->block - 1) / io->block;
		if (items[k].voff % io->block || is[k].first + is[k].n > io->n_blocks) {
			ST_ERROR(NULL, "internal: disk transfer outside the reserved blocks");
			b.rc = ST_FAIL;
		}
	}
	int n_free = depth;
	for (int i = 0; i < depth; i++)
		free_slots[i] = i;
	const double t0 = io_now();
	/* queued: prepared in the ring, not yet submitted; inflight: submitted */
	int item = 0, queued = 0, inflight = 0, n_fresh = 0, retries = 0, resubmits = 0;
	for (;;) {
		/* fill the queue: the blocks of one item after another */
		while (b.rc == ST_OK && item < n_items && n_free > 0) {
			struct item_state *it = &is[item];
			if (it->submitted == it->n) {
				item++;
				continue;
			}
			if (!writing && !io->valid[it->first + it->submitted]) {
				ST_ERROR(NULL, "internal: reading disk block %zu before it was written",
					 it->first + it->submitted);
				b.rc = ST_FAIL;
				break;
			}
			if (!writing && io->corrupt_before > 0 && --io->corrupt_before == 0)
				corrupt_block(io, it->first + it->submitted); /* test hook */
			struct io_req *r = &reqs[free_slots[--n_free]];
			const size_t total = io_round(items[item].len, ST_IO_ALIGN);
			const size_t k = it->submitted++;
			r->vb = it->first + k;
			r->item = item;
			r->buf = (char *)items[item].buf + k * io->block;
			r->len = total - k * io->block < io->block ? total - k * io->block : io->block;
			r->done = 0;
			it->pending++;
			queue_req(io, writing, r);
			queued++;
			if (writing)
				fresh[n_fresh++] = (struct io_block){r->vb, item, r->buf, r->len};
		}
		if (queued > 0) {
			int sub = io->pool ? pool_submit(io->pool) : io_uring_submit(&io->ring);
			if (sub >= 0) {
				queued -= sub;
				inflight += sub;
				retries = 0;
			} else if ((sub == -EINTR || sub == -EAGAIN || sub == -EBUSY) && ++retries < 1000) {
				/* the kernel is short of something: reap, then submit
				 * again; with nothing to reap, wait a little longer each
				 * time (0.5 s in all) before the ring counts as broken */
				if (inflight == 0) {
					io_backoff(retries);
					continue;
				}
			} else {
				/* The ring is unusable: what was submitted is reaped below,
				 * what was not stays in the ring, which takes no more work. */
				ST_ERROR("check the kernel log (dmesg)", "io_uring submit failed: %s",
					 strerror(-sub));
				b.rc = ST_FAIL;
				io->broken = 1;
				queued = 0;
			}
		}
		/* the work that waited for the queue to be full again */
		for (int i = 0; i < n_fresh; i++) {
			if (writing) {
				io->sums[fresh[i].vb] = XXH3_64bits(fresh[i].buf, fresh[i].len);
				io->valid[fresh[i].vb] = 1;
			} else {
				block_finished(&b, fresh[i].item, b.rc == ST_OK && verify_block(io, &fresh[i]));
			}
		}
		n_fresh = 0;
		if (inflight == 0 && queued == 0)
			break;
		if (inflight == 0)
			continue;
		struct io_req *r;
		int res;
		const int w = wait_one(io, &r, &res);
		if (w < 0) {
			/* Requests are still in flight and cannot be reaped: their
			 * buffers and this batch's records must outlive them, so they
			 * are left allocated, and the engine takes no more work. */
			ST_ERROR("check the kernel log (dmesg)", "io_uring wait failed: %s", strerror(-w));
			io->broken = 1;
			for (int k = 0; done && k < n_items; k++)
				if (!is[k].reported)
					done(ctx, k, ST_FAIL);
			return ST_FAIL;
		}
		inflight--;
		const struct st_io_dir *d = &io->dirs[r->vb % (size_t)io->n_dirs];
		if ((res == -EAGAIN || res == -EINTR) && b.rc == ST_OK && ++resubmits < 1000) {
			/* a transient refusal of this request: ask again */
			io_backoff(resubmits);
			queue_req(io, writing, r);
			queued++;
			continue;
		}
		if (res <= 0) {
			if (b.rc == ST_OK) {
				char bb[32];
				if (res == -ENOSPC)
					ST_ERROR("free space there or add another --offload-dir",
						 "offload directory %s is full: writing %s of offloaded state failed",
						 d->path, fmt_bytes(bb, sizeof bb, (double)r->len));
				else
					ST_ERROR("check the disk (dmesg) and the offload directory",
						 "%s offloaded state in %s failed: %s",
						 writing ? "writing" : "reading", d->path,
						 res ? strerror(-res) : "unexpected end of file");
			}
			free_slots[n_free++] = (int)(r - reqs);
			block_finished(&b, r->item, 0);
			continue;
		}
		r->done += (size_t)res;
		resubmits = 0; /* the refusals in a row: one that went through ends them */
		if (r->done < r->len && b.rc == ST_OK) { /* short transfer: ask for the rest */
			queue_req(io, writing, r);
			queued++;
			continue;
		}
		free_slots[n_free++] = (int)(r - reqs);
		if (writing) {
			block_finished(&b, r->item, 1);
		} else {
			fresh[n_fresh++] = (struct io_block){r->vb, r->item, r->buf, r->len};
		}
	}
	/* items never finished (a failure stopped the batch) fail */
	for (int k = 0; k < n_items; k++)
		if (!is[k].reported && done)
			done(ctx, k, ST_FAIL);
	io->busy_s += io_now() - t0;
	free(is);
	free(reqs);
	free(free_slots);
	free(fresh);
	return b.rc;
}

int io_write(struct st_io *io, uint64_t voff, const void *buf, size_t len)
{
	struct st_io_item it = {voff, (void *)buf, len};
	return io_transfer(io, 1, &it, 1, NULL, NULL);
}

int io_read(struct st_io *io, uint64_t voff, void *buf, size_t len)
{
	struct st_io_item it = {voff, buf, len};
	return io_transfer(io, 0, &it, 1, NULL, NULL);
}
