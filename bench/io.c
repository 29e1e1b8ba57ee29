/* bench/io: streaming write and read rate of the store's disk tier (io_uring,
 * O_DIRECT, striped, checksummed; store/io.c) against dd with O_DIRECT on the
 * same directory in the same run, and against fio (io_uring, O_DIRECT, 1 MiB
 * blocks, depth 32: the stronger ceiling) where fio is installed.
 *
 * usage: io [--dir DIR]... [--gib 1] [--slab-mib 64] [--block 1M] [--depth 16]
 *           [--reps 3] [--json FILE]
 * The store moves whole slabs (a unit's weights or state: tens to hundreds of
 * MiB), handed to the engine in batches of up to 32; it is timed the same
 * way, best of --reps passes. dd writes and reads one file of the same size with
 * 4 MiB blocks (oflag/iflag=direct), best of --reps. All three write into
 * space allocated before the timing and none flushes at the end: the store
 * writes into a file it reserved with posix_fallocate and does not fsync (its
 * slabs are scratch), so a ceiling that allocated extents or ran fsync in its
 * time measured another job (until 2026-11-24 dd had conv=fsync on a fresh
 * file and fio end_fsync, which halved them on the build VM). dd and fio run
 * on the first --dir only: with several directories their rate is one
 * disk's, the store's all of them.
 *
 * The store's fallback where io_uring is refused (a container's seccomp
 * profile: a pool of threads with pread/pwrite) is timed too, in a child
 * process under a seccomp filter that refuses io_uring_setup, as Docker's
 * default profile does: the same slabs, blocks and depth. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/place.h"
#include "store/io.h"
#include "util/check.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* dd with O_DIRECT: GB/s of one pass, or -1. Writes go into a file whose
 * space is allocated first, untimed (conv=notrunc keeps it), as the store's
 * is; the rate counts the whole 4 MiB blocks dd moves. */
static double dd_rate(const char *dir, size_t bytes, int writing)
{
	char cmd[4400], path[4200];
	const size_t bs = 4u << 20, count = bytes / bs;
	if (!count)
		return -1;
	snprintf(path, sizeof path, "%s/.bench-dd", dir);
	if (writing) {
		int fd = open(path, O_WRONLY | O_CREAT, 0644);
		const int ok = fd >= 0 && posix_fallocate(fd, 0, (off_t)(count * bs)) == 0;
		if (fd >= 0)
			close(fd);
		if (!ok)
			return -1;
		snprintf(cmd, sizeof cmd,
			 "dd if=/dev/zero of=%s bs=%zu count=%zu oflag=direct conv=notrunc 2>&1", path, bs,
			 count);
	} else {
		snprintf(cmd, sizeof cmd, "dd if=%s of=/dev/null bs=%zu count=%zu iflag=direct 2>&1",
			 path, bs, count);
	}
	double t0 = now();
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	char line[512];
	while (fgets(line, sizeof line, p))
		;
	int rc = pclose(p);
	double dt = now() - t0;
	return rc == 0 ? (double)(count * bs) / dt / 1e9 : -1;
}

/* fio sequential write or read with io_uring and O_DIRECT: GB/s, or -1 when
 * fio is missing or fails (fio lays its file out before it times the job) */
static double fio_rate(const char *dir, size_t bytes, int writing)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd,
		 "fio --name=strata --directory=%s --filename=.bench-fio --rw=%s --bs=1M --size=%zu "
		 "--ioengine=io_uring --iodepth=32 --direct=1 --output-format=terse "
		 "--terse-version=3 2>/dev/null",
		 dir, writing ? "write" : "read", bytes);
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	char line[8192] = "";
	if (!fgets(line, sizeof line, p))
		line[0] = '\0';
	if (pclose(p) != 0)
		return -1;
	/* terse v3: field 7 is read bandwidth KiB/s, field 48 write bandwidth */
	int field = 1;
	double kib = -1;
	for (char *save = NULL, *t = strtok_r(line, ";", &save); t; t = strtok_r(NULL, ";", &save), field++)
		if (field == (writing ? 48 : 7))
			kib = atof(t);
	return kib > 0 ? kib * 1024 / 1e9 : -1;
}

/* All slabs through the engine in batches of 32, as the store's disk queue
 * hands them over (one buffer serves every slab: the rate is the disk's). */
static int stream(struct st_io *io, int writing, void *buf, size_t slab, size_t n_slabs)
{
	struct st_io_item items[32];
	for (size_t k = 0; k < n_slabs;) {
		int n = 0;
		for (; n < 32 && k < n_slabs; n++, k++)
			items[n] = (struct st_io_item){k * slab, buf, slab};
		if (io_transfer(io, writing, items, n, NULL, NULL) != ST_OK)
			return ST_FAIL;
	}
	return ST_OK;
}

/* The thread pool's write and read rates (GB/s; -1 each where it cannot be
 * timed): a child refused io_uring by a seccomp filter opens the store's
 * engine, which falls back to its pool, and streams the slabs once each
 * way. */
static void pool_rates(const char *const *dirs, int n_dirs, size_t block, int depth, size_t slab,
		       size_t n_slabs, void *buf, double *w, double *r)
{
	double got[2] = {-1, -1};
	int fds[2];
	*w = *r = -1;
	if (pipe(fds) != 0)
		return;
	const pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		struct st_io io;
		const int nul = open("/dev/null", O_WRONLY); /* its fallback warning, each pass */
		if (nul >= 0)
			dup2(nul, 2);
		if (io_forbid_uring() &&
		    io_open(&io, dirs, n_dirs, block, depth, slab * n_slabs) == ST_OK && io.pool) {
			double t0 = now();
			if (stream(&io, 1, buf, slab, n_slabs) == ST_OK)
				got[0] = (double)(slab * n_slabs) / (now() - t0) / 1e9;
			t0 = now();
			if (stream(&io, 0, buf, slab, n_slabs) == ST_OK)
				got[1] = (double)(slab * n_slabs) / (now() - t0) / 1e9;
			io_close(&io);
		}
		const ssize_t n = write(fds[1], got, sizeof got);
		_exit(n == (ssize_t)sizeof got ? 0 : 1);
	}
	close(fds[1]);
	if (pid > 0 && read(fds[0], got, sizeof got) == (ssize_t)sizeof got) {
		*w = got[0];
		*r = got[1];
	}
	close(fds[0]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
}

static const char usage[] =
	"usage: bench/io [--dir DIR]... [--gib 1] [--slab-mib 64] [--block 1M] [--depth 16]\n"
	"                [--reps 3] [--json FILE]\n"
	"Streaming write and read rate of the disk tier over the --dir directories\n"
	"(default: a temporary one under bench/results/), against dd and fio with\n"
	"O_DIRECT on the first of them (one disk's rate); best of --reps passes.\n";

int main(int argc, char **argv)
{
	struct cli_args args;
	const int rc = cli_start(&args, argc, argv, usage);
	if (rc != CLI_RUN)
		return rc;
	const char *dirs[16];
	int n_dirs = 0;
	for (int i = 0; i < args.n; i++) /* --dir may repeat: one stripe each */
		if (!strcmp(args.key[i], "dir")) {
			if (args.val[i] == cli_bare || n_dirs == 16) {
				fprintf(stderr, "bench/io: give up to 16 --dir DIR\n");
				return 2;
			}
			dirs[n_dirs++] = args.val[i];
			args.used[i] = 1;
		}
	const char *blocks;
	FILE *jf;
	double gib;
	long slab_mib, ldepth, lreps;
	size_t block;
	if (cli_get_out(&args, "json", &jf) != ST_OK ||
	    cli_get_str(&args, "block", "1M", &blocks) != ST_OK ||
	    parse_bytes(blocks, &block, "--block") != ST_OK ||
	    cli_get_double(&args, "gib", 1, &gib) != ST_OK ||
	    cli_get_long(&args, "slab-mib", 64, LONG_MIN, LONG_MAX, &slab_mib) != ST_OK ||
	    cli_get_long(&args, "depth", 16, LONG_MIN, LONG_MAX, &ldepth) != ST_OK ||
	    cli_get_long(&args, "reps", 3, LONG_MIN, LONG_MAX, &lreps) != ST_OK ||
	    cli_check_unused(&args, "bench/io") != ST_OK)
		return 2;
	if (slab_mib < 1 || slab_mib > 65536 || gib * 1024 < (double)slab_mib || gib > 65536 ||
	    block < 4096 || block % 4096 || ldepth < 1 || ldepth > 4096 || lreps < 1 || lreps > 1000) {
		fprintf(stderr, "bench/io: need 1 <= --slab-mib <= --gib x 1024, --block a multiple of "
				"4K, 1 <= --depth <= 4096, 1 <= --reps <= 1000\n");
		return 2;
	}
	const size_t slab = (size_t)slab_mib << 20;
	const int depth = (int)ldepth, reps = (int)lreps;
	char tmp[] = "bench/results/.io-XXXXXX";
	if (!n_dirs) {
		if (!mkdtemp(tmp)) {
			fprintf(stderr, "bench/io: cannot make a scratch directory %s: %s (run it from the "
					"repository root, or give --dir DIR)\n",
				tmp, strerror(errno));
			return 1;
		}
		dirs[n_dirs++] = tmp;
	}
	const size_t n_slabs = (size_t)(gib * 1073741824.0) / slab, total = n_slabs * slab;
	struct st_io io;
	if (io_open(&io, dirs, n_dirs, block, depth, total) != ST_OK)
		return 1;
	void *buf = NULL;
	if (posix_memalign(&buf, ST_IO_ALIGN, slab) != 0)
		return 1;
	for (size_t i = 0; i < slab; i++)
		((unsigned char *)buf)[i] = (unsigned char)(i * 2654435761u >> 24);
	/* the passes interleave (store, dd, fio; writes, then reads) so that the
	 * drift of a shared virtual disk hits all three alike; best of reps */
	double best_w = 0, best_r = 0, dd_w = 0, dd_r = 0, fio_w = 0, fio_r = 0, pool_w = -1,
	       pool_r = -1;
#define KEEP_MAX(m, v) ((m) = (v) > (m) ? (v) : (m))
	for (int r = 0; r < reps; r++) {
		double t0 = now();
		if (stream(&io, 1, buf, slab, n_slabs) != ST_OK)
			return 1;
		KEEP_MAX(best_w, (double)total / (now() - t0) / 1e9);
		KEEP_MAX(dd_w, dd_rate(dirs[0], total, 1));
		KEEP_MAX(fio_w, fio_rate(dirs[0], total, 1));
		t0 = now();
		if (stream(&io, 0, buf, slab, n_slabs) != ST_OK)
			return 1;
		KEEP_MAX(best_r, (double)total / (now() - t0) / 1e9);
		KEEP_MAX(dd_r, dd_rate(dirs[0], total, 0));
		KEEP_MAX(fio_r, fio_rate(dirs[0], total, 0));
		double pw, pr;
		pool_rates(dirs, n_dirs, block, depth, slab, n_slabs, buf, &pw, &pr);
		KEEP_MAX(pool_w, pw);
		KEEP_MAX(pool_r, pr);
	}
	io_close(&io);
	free(buf);
	char path[4200];
	snprintf(path, sizeof path, "%s/.bench-dd", dirs[0]);
	unlink(path);
	snprintf(path, sizeof path, "%s/.bench-fio", dirs[0]);
	unlink(path);
	const double ceil_w = fio_w > dd_w ? fio_w : dd_w, ceil_r = fio_r > dd_r ? fio_r : dd_r;
	if (dirs[0] == tmp)
		rmdir(tmp);

	printf("bench/io: %.2f GiB in %zu MiB slabs, %d director%s, %zu KiB blocks, depth %d\n",
	       (double)total / 1073741824.0, slab >> 20, n_dirs, n_dirs == 1 ? "y" : "ies",
	       block >> 10, depth);
	printf("%-28s %10s %10s\n", "", "write GB/s", "read GB/s");
	printf("%-28s %10.2f %10.2f\n", "strata store (io_uring)", best_w, best_r);
	if (pool_w > 0 && pool_r > 0)
		printf("%-28s %10.2f %10.2f   (no io_uring: %.2f, %.2f of it)\n", "strata store (threads)",
		       pool_w, pool_r, pool_w / best_w, pool_r / best_r);
	else
		printf("the thread pool could not be timed (no seccomp filter here, or its I/O failed)\n");
	printf("%-28s %10.2f %10.2f\n", "dd O_DIRECT 4 MiB", dd_w, dd_r);
	if (fio_w > 0)
		printf("%-28s %10.2f %10.2f\n", "fio io_uring 1 MiB qd 32", fio_w, fio_r);
	else
		printf("fio missing or failed (apt-get install fio): dd is the only ceiling\n");
	/* no ceiling (dd failed too: missing, or O_DIRECT refused): no ratio,
	 * and JSON's null, not inf */
	char rw[32] = "null", rr[32] = "null";
	if (ceil_w > 0)
		snprintf(rw, sizeof rw, "%.4f", best_w / ceil_w);
	if (ceil_r > 0)
		snprintf(rr, sizeof rr, "%.4f", best_r / ceil_r);
	if (ceil_w > 0 && ceil_r > 0)
		printf("%-28s %10s %10s   (store / best ceiling; target >= 0.90)\n", "ratio", rw, rr);
	else
		printf("no ceiling: dd failed (missing, or the directory refuses O_DIRECT)\n");
	if (n_dirs > 1)
		printf("(dd and fio ran on %s only: their rate is one disk's)\n", dirs[0]);
	if (jf) {
		fprintf(jf,
			"{\"bench\": \"io\", \"bytes\": %zu, \"slab\": %zu, \"dirs\": %d, \"block\": %zu, "
			"\"depth\": %d, \"reps\": %d, \"store_write_gbs\": %.4f, \"store_read_gbs\": %.4f, "
			"\"dd_write_gbs\": %.4f, \"dd_read_gbs\": %.4f, \"fio_write_gbs\": %.4f, "
			"\"fio_read_gbs\": %.4f, \"write_ratio\": %s, \"read_ratio\": %s, "
			"\"pool_write_gbs\": %.4f, \"pool_read_gbs\": %.4f}\n",
			total, slab, n_dirs, block, depth, reps, best_w, best_r, dd_w, dd_r, fio_w, fio_r,
			rw, rr, pool_w, pool_r);
		if (cli_close_out(&args, "json", jf) != ST_OK)
			return 1;
	}
	return 0;
}
