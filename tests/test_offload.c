/* Tiered state and offload: the disk I/O engine (striping, checksums, bad
 * directories), the store's staging under random use, and offloaded training
 * through the binary: bit-identical to in-memory training for several
 * placements and optimizers, resume, peak memory within the budgets, and the
 * faults (full, missing, read-only directory; a corrupted block). */
#include <cJSON.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cliutil.h"
#include "jsonutil.h"
#include "testutil.h"
#include "engine/place.h"
#include "io/fsutil.h"
#include "engine/session.h"
#include "optim/optim.h"
#include "store/io.h"
#include "store/store.h"
#include "trainer/forward.h"
#include "util/check.h"
#include "util/rng.h"
#include "util/trace.h"

static char out[1 << 16];

/* ---- the I/O engine ------------------------------------------------------ */

static void *aligned_buf(size_t n)
{
	void *p = NULL;
	cr_assert_eq(posix_memalign(&p, ST_IO_ALIGN, io_round(n, ST_IO_ALIGN)), 0);
	return p;
}

static void fill_random(unsigned char *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (unsigned char)(seed >> 56);
	}
}

static void make_dirs(char dirs[][256], int n, const char *tag)
{
	for (int i = 0; i < n; i++)
		cu_tmpdir(dirs[i], sizeof dirs[i], tag);
}

static void count_done(void *ctx, int item, int rc)
{
	cr_expect_eq(rc, ST_OK, "item %d failed", item);
	((int *)ctx)[item]++;
}

/* Slabs of odd sizes written and read back, alone and batched, over three
 * directories at the given depth; pool: whether io_uring is expected
 * refused (the thread pool takes the requests). */
static void striped_roundtrip(int depth, int pool)
{
	char d[3][256];
	make_dirs(d, 3, "io");
	const char *dirs[] = {d[0], d[1], d[2]};
	struct st_io io;
	const size_t block = 64 << 10;
	cr_assert_eq(io_open(&io, dirs, 3, block, depth, 8 << 20), ST_OK);
	cr_expect_eq(io.pool != NULL, pool, "the thread pool %s", pool ? "not used" : "used");
	/* slabs of odd sizes at block-aligned offsets, spread over every dir */
	const size_t sizes[] = {1, 4095, 4097, 3 * block + 123, 17 * block};
	uint64_t off = 0;
	for (int i = 0; i < 5; i++) {
		unsigned char *w = aligned_buf(sizes[i]), *r = aligned_buf(sizes[i]);
		fill_random(w, sizes[i], 100 + (uint64_t)i);
		cr_assert_eq(io_write(&io, off, w, sizes[i]), ST_OK);
		memset(r, 0, sizes[i]);
		cr_assert_eq(io_read(&io, off, r, sizes[i]), ST_OK);
		cr_expect_eq(memcmp(w, r, sizes[i]), 0, "slab %d (%zu bytes) read back differently", i,
			     sizes[i]);
		off += io_round(sizes[i], block);
		free(w);
		free(r);
	}
	/* a batch: the same slabs again in one transfer, each reported done once */
	struct st_io_item items[5];
	unsigned char *bufs[5];
	int seen[5] = {0};
	off = 0;
	for (int i = 0; i < 5; i++) {
		bufs[i] = aligned_buf(sizes[i]);
		fill_random(bufs[i], sizes[i], 900 + (uint64_t)i);
		items[i] = (struct st_io_item){off, bufs[i], sizes[i]};
		off += io_round(sizes[i], block);
	}
	cr_assert_eq(io_transfer(&io, 1, items, 5, count_done, seen), ST_OK);
	for (int i = 0; i < 5; i++) {
		cr_expect_eq(seen[i], 1, "write item %d reported %d times", i, seen[i]);
		unsigned char *r = aligned_buf(sizes[i]);
		cr_assert_eq(io_read(&io, items[i].voff, r, sizes[i]), ST_OK);
		cr_expect_eq(memcmp(r, bufs[i], sizes[i]), 0, "batched slab %d differs", i);
		memset(bufs[i], 0, sizes[i]);
		free(r);
	}
	cr_assert_eq(io_transfer(&io, 0, items, 5, count_done, seen), ST_OK);
	for (int i = 0; i < 5; i++) {
		unsigned char *w = aligned_buf(sizes[i]);
		fill_random(w, sizes[i], 900 + (uint64_t)i);
		cr_expect_eq(memcmp(w, bufs[i], sizes[i]), 0, "batched read of slab %d differs", i);
		cr_expect_eq(seen[i], 2, "read item %d not reported once", i);
		free(w);
		free(bufs[i]);
	}
	/* every directory got its share of the blocks */
	for (int i = 0; i < 3; i++) {
		struct stat st;
		cr_assert_eq(fstat(io.dirs[i].fd, &st), 0);
		cr_expect_geq((size_t)st.st_blocks * 512, 4 * block, "dir %d holds too little", i);
	}
	io_close(&io);
}

Test(io, striped_roundtrip) { striped_roundtrip(4, 0); }

static void checksum_detects_corruption(void);
/* io_uring refused (a seccomp filter, as a container's profile): a pool
 * of threads takes the requests, with the same results, at a depth within
 * its 64 threads and past them, and corruption is still found (the disk
 * tier failed to open before). */
Test(io, thread_pool_when_io_uring_is_refused)
{
	if (!io_forbid_uring()) {
		cr_log_warn("this kernel does not take a seccomp filter (%s): skipping", strerror(errno));
		return;
	}
	striped_roundtrip(4, 1);
	striped_roundtrip(100, 1);
	checksum_detects_corruption();
}

static void checksum_detects_corruption(void)
{
	char d[2][256];
	make_dirs(d, 2, "iocrc");
	const char *dirs[] = {d[0], d[1]};
	struct st_io io;
	const size_t block = 64 << 10, n = 4 * block;
	cr_assert_eq(io_open(&io, dirs, 2, block, 8, n), ST_OK);
	unsigned char *w = aligned_buf(n), *r = aligned_buf(n);
	fill_random(w, n, 7);
	cr_assert_eq(io_write(&io, 0, w, n), ST_OK);
	cr_assert_eq(io_read(&io, 0, r, n), ST_OK);
	/* block 3 lives in dir 1 at file offset block: flip bytes behind the engine */
	unsigned char *junk = aligned_buf(ST_IO_ALIGN);
	memset(junk, 0xa5, ST_IO_ALIGN);
	cr_assert_eq(pwrite(io.dirs[1].fd, junk, ST_IO_ALIGN, (off_t)block), (ssize_t)ST_IO_ALIGN);
	cr_expect_eq(io_read(&io, 0, r, n), ST_FAIL, "a corrupted block was read without error");
	/* the blocks before it still read fine */
	cr_expect_eq(io_read(&io, 0, r, 2 * block), ST_OK);
	io_close(&io);
	free(w);
	free(r);
	free(junk);
}

Test(io, checksum_detects_corruption) { checksum_detects_corruption(); }

Test(io, bad_directories)
{
	struct st_io io;
	const char *missing[] = {"/nonexistent/strata-offload"};
	cr_expect_eq(io_open(&io, missing, 1, 1 << 20, 4, 1 << 20), ST_FAIL);
	char d[256], file[300];
	cu_tmpdir(d, sizeof d, "iofile");
	snprintf(file, sizeof file, "%s/plain-file", d);
	FILE *f = fopen(file, "w");
	cr_assert(f);
	fclose(f);
	const char *notdir[] = {file};
	cr_expect_eq(io_open(&io, notdir, 1, 1 << 20, 4, 1 << 20), ST_FAIL);
	const char *ok[] = {d};
	cr_expect_eq(io_open(&io, ok, 1, 1000, 4, 1 << 20), ST_FAIL, "unaligned block accepted");
	cr_expect_eq(io_open(&io, ok, 1, 1 << 20, 0, 1 << 20), ST_FAIL, "depth 0 accepted");
}

/* A small tmpfs, or NULL (with a visible message) where mounting is not allowed. */
static int mount_small(char *dir, size_t n, const char *opts)
{
	cu_tmpdir(dir, n, "mnt");
	if (mount("tmpfs", dir, "tmpfs", 0, opts) != 0) {
		cr_log_warn("cannot mount a tmpfs here (%s): skipping this check", strerror(errno));
		return 0;
	}
	return 1;
}

Test(io, small_filesystem_refused_up_front)
{
	char d[256];
	if (!mount_small(d, sizeof d, "size=1m"))
		return;
	const char *dirs[] = {d};
	struct st_io io;
	cr_expect_eq(io_open(&io, dirs, 1, 1 << 16, 4, 8 << 20), ST_FAIL);
	umount(d);
}

/* ---- the store under random use ----------------------------------------- */

#define UNITS 7

Test(store, staged_slabs_keep_their_data)
{
	char d[2][256];
	make_dirs(d, 2, "store");
	const char *dirs[] = {d[0], d[1]};
	struct st_store s;
	cr_assert_eq(store_init(&s, UNITS, NULL), ST_OK);
	size_t bytes[UNITS][ST_SLAB__COUNT] = {{0}};
	unsigned char *shadow[UNITS][ST_SLAB__COUNT] = {{0}};
	const enum st_slab_kind kinds[] = {ST_SLAB_W, ST_SLAB_G, ST_SLAB_S};
	for (int u = 0; u < UNITS; u++)
		for (int k = 0; k < 3; k++) {
			enum st_slab_kind kind = kinds[k];
			/* homes: disk, host, device in turn; odd sizes */
			enum st_tier t = (enum st_tier)((u + k) % 3);
			if (kind == ST_SLAB_S && t == ST_TIER_DEVICE)
				t = ST_TIER_DISK;
			bytes[u][kind] = 3000 + 5000 * (size_t)((u * 3 + k) % 5);
			cr_assert_eq(store_alloc(&s, u, kind, t, bytes[u][kind]), ST_OK);
			shadow[u][kind] = calloc(1, bytes[u][kind]);
		}
	struct st_offload_cfg cfg = {.dirs = dirs, .n_dirs = 2, .io_block = 4096, .io_depth = 3};
	cfg.pool_slots[ST_SLAB_W] = 3;
	cfg.pool_slots[ST_SLAB_G] = 2;
	cfg.pool_slots[ST_SLAB_S] = 2;
	cr_assert_eq(store_start(&s, &cfg), ST_OK);
	cr_assert(store_is_staged(&s, 2, ST_SLAB_W), "unit 2's weights (on disk) are staged");
	cr_assert(!store_is_staged(&s, 0, ST_SLAB_W), "unit 0's weights (on the device) are resident");
	uint64_t rng = 12345;
	for (int it = 0; it < 3000; it++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		int u = (int)((rng >> 33) % UNITS);
		enum st_slab_kind kind = kinds[(rng >> 40) % 3];
		int op = (int)((rng >> 50) % 8);
		size_t n = bytes[u][kind];
		if (op == 0) {
			store_prefetch(&s, u, kind);
		} else if (op == 1) {
			store_discard(&s, u, kind);
			memset(shadow[u][kind], 0, n);
		} else {
			int writing = op >= 5;
			unsigned char *p = store_acquire_as(&s, u, kind,
							    writing ? ST_ACCESS_WRITE : ST_ACCESS_READ);
			cr_assert_eq(memcmp(p, shadow[u][kind], n), 0,
				     "op %d: unit %d %s holds the wrong data", it, u, slab_kind_name(kind));
			if (writing) {
				fill_random(p + (rng >> 20) % (n / 2), n / 2, rng);
				memcpy(shadow[u][kind], p, n);
			}
			store_release(&s, u, kind, writing);
		}
	}
	store_drain(&s);
	cr_expect_eq(store_ok(&s), ST_OK);
	cr_expect_gt(s.io.bytes_written, 0, "nothing reached the disk");
	for (int u = 0; u < UNITS; u++)
		for (int k = 0; k < 3; k++)
			free(shadow[u][kinds[k]]);
	store_free(&s);
}

/* ---- placement ------------------------------------------------------------ */

/* Over a grid of budgets and forced homes, every placement either fails with
 * a message or fits its budgets — and the store, allocating exactly what the
 * placement chose (slabs, activations, staging pools), never exceeds them. */
Test(place, placements_fit_their_budgets)
{
	char d[256];
	cu_tmpdir(d, sizeof d, "place");
	const char *dirs[] = {d};
	struct st_config cfg;
	cr_assert_eq(config_preset(&cfg, "tiny"), ST_OK);
	/* device budgets from just the activations to everything with pools, in
	 * 40 steps; host budgets from none to all the optimizer state */
	size_t act_b, all_b, state_b;
	{
		struct st_session s;
		cr_assert_eq(session_build(&s, ops_cpu(), &cfg, NULL), ST_OK);
		act_b = (acts_layer_floats(&s.model, 2, 64) * (size_t)cfg.n_layers +
			 acts_rest_floats(&s.model, 2, 64)) * sizeof(float);
		state_b = 8 * s.model.numel;
		all_b = act_b + 2 * 4 * s.model.numel + 9 * 4 * s.model.numel / (size_t)cfg.n_layers;
		session_close(&s);
	}
	size_t devs[41], hosts[6];
	for (int i = 0; i <= 40; i++)
		devs[i] = act_b + (all_b - act_b) * (size_t)i / 40;
	for (int i = 0; i < 6; i++)
		hosts[i] = state_b * (size_t)i / 5;
	const char *forces[] = {"auto", "weights=host", "gradients=disk", "optimizer=disk",
				"weights=disk,gradients=host,optimizer=host"};
	int ok = 0, refused = 0;
	for (size_t a = 0; a < sizeof devs / sizeof *devs; a++)
		for (size_t b = 0; b < sizeof hosts / sizeof *hosts; b++)
			for (size_t f = 0; f < sizeof forces / sizeof *forces; f++) {
				struct st_session s;
				const size_t budgets[ST_TIER__COUNT] = {devs[a], hosts[b], 0};
				cr_assert_eq(session_build(&s, ops_cpu(), &cfg, budgets), ST_OK);
				const struct st_model *m = &s.model;
				struct st_optim opt;
				struct st_optim_cfg oc = {.kind = ST_OPT_ADAMW, .beta1 = 0.9f, .beta2 = 0.95f,
							  .eps = 1e-8f, .quant_block = 256};
				cr_assert_eq(optim_init(&opt, &oc, m), ST_OK);
				size_t wb[64];
				for (int u = 0; u < m->n_units; u++)
					wb[u] = m->units[u].numel * sizeof(float);
				const size_t act = (acts_layer_floats(m, 2, 64) * (size_t)m->cfg.n_layers +
						    acts_rest_floats(m, 2, 64)) * sizeof(float);
				struct st_place_opts po = {.prefetch = 1, .n_dirs = 1};
				memcpy(po.budget, budgets, sizeof po.budget);
				cr_assert_eq(parse_place(forces[f], po.force), ST_OK);
				struct st_place pl;
				if (place_make(&pl, m->n_units, wb, wb, opt.unit_bytes, act, &po) != ST_OK) {
					refused++;
					optim_free(&opt);
					session_close(&s);
					continue;
				}
				cr_expect(!devs[a] || pl.bytes[ST_TIER_DEVICE] <= devs[a],
					  "device %zu of %zu (%s)", pl.bytes[ST_TIER_DEVICE], devs[a], forces[f]);
				cr_expect(!hosts[b] || pl.bytes[ST_TIER_HOST] <= hosts[b],
					  "host %zu of %zu (%s)", pl.bytes[ST_TIER_HOST], hosts[b], forces[f]);
				int rc = session_alloc(&s, &pl, ST_GRADS_ALL);
				for (int u = 0; rc == ST_OK && u < m->n_units; u++)
					rc = store_alloc(&s.store, u, ST_SLAB_S, place_home(&pl, u, ST_SLAB_S),
							 opt.unit_bytes[u]);
				if (rc == ST_OK)
					rc = session_exec(&s, 2, 64);
				struct st_offload_cfg oc2 = {.dirs = dirs, .n_dirs = 1, .io_block = 1 << 20,
							     .io_depth = 4};
				memcpy(oc2.pool_slots, pl.pool_slots, sizeof oc2.pool_slots);
				if (rc == ST_OK)
					rc = store_start(&s.store, &oc2);
				cr_expect_eq(rc, ST_OK, "the store refused the placement for device %zu, host %zu, %s",
					     devs[a], hosts[b], forces[f]);
				ok++;
				place_free(&pl);
				optim_free(&opt);
				session_close(&s);
			}
	cr_expect_gt(ok, 300, "too few budgets placed (%d of %d)", ok, ok + refused);
	cr_expect_gt(refused, 0, "no budget was too small: the grid tests nothing");
}

/* ---- offloaded training through the binary ------------------------------ */

#define RUN "--micro-batch 4 --seq-len 32 --eval-tokens 512 --progress lines --threads 2 " \
	    "--steps 6 --ckpt-interval 3 --eval-interval 3 --grad-accum 2 --grad-clip 0.5"

/* The "loss" values of metrics.jsonl, concatenated: equal strings = equal bits
 * as printed (%.6f), on top of the byte-identical state files. */
static void losses(const char *run, char *buf, size_t n)
{
	int rc = cu_run(buf, n, "grep -o '\"loss\": [0-9.]*' %s/metrics.jsonl | tr '\\n' ' '", run);
	cr_assert_eq(rc, 0);
}

static void train_model(const char *dir, const char *model, const char *run, const char *flags)
{
	int rc = cu_run(out, sizeof out, "%s train --model %s/%s --data %s/data --out %s/%s %s %s",
			cu_bin(), dir, model, dir, dir, run, RUN, flags);
	cr_assert_eq(rc, 0, "training (%s) failed: %s", flags, out);
}

static void train(const char *dir, const char *run, const char *flags)
{
	train_model(dir, "init", run, flags);
}

static void expect_same_run(const char *dir, const char *a, const char *b, const char *what)
{
	char pa[512], pb[512], la[2048], lb[2048];
	for (int step = 3; step <= 6; step += 3) {
		snprintf(pa, sizeof pa, "%s/%s/step-%06d", dir, a, step);
		snprintf(pb, sizeof pb, "%s/%s/step-%06d", dir, b, step);
		cu_expect_same_state(pa, pb, what);
	}
	snprintf(pa, sizeof pa, "%s/%s", dir, a);
	snprintf(pb, sizeof pb, "%s/%s", dir, b);
	losses(pa, la, sizeof la);
	losses(pb, lb, sizeof lb);
	cr_expect_str_eq(la, lb, "%s: losses differ", what);
}

/* dir/deep: the test model with 12 layers, so that budgets can keep some
 * units on each tier and activations matter */
static void make_deep(const char *dir, const char *init_flags)
{
	int rc = cu_run(out, sizeof out,
			"printf '{\"vocab_size\":258,\"hidden_size\":64,\"intermediate_size\":96,"
			"\"num_hidden_layers\":12,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
			"\"max_position_embeddings\":128}' > %s/deep.json && "
			"%s init --config %s/deep.json --out %s/deep %s",
			dir, cu_bin(), dir, dir, init_flags);
	cr_assert_eq(rc, 0, "init failed: %s", out);
}

/* Training dir/deep in memory ("mem") and under each of three placements
 * gives the same bits. */
static void check_placements_in(const char *dir, const char *init_flags, const char *opt_flags,
				const char *const placements[3])
{
	char flags[1024];
	cu_setup_run(dir, "");
	make_deep(dir, init_flags);
	cu_run(NULL, 0, "mkdir -p %s/nvme0 %s/nvme1", dir, dir);
	train_model(dir, "deep", "mem", opt_flags);
	const char *names[] = {"all-disk", "all-host", "budgets"};
	for (int i = 0; i < 3; i++) {
		snprintf(flags, sizeof flags, "%s %s %s --offload-dir %s/nvme0 --offload-dir %s/nvme1",
			 opt_flags, placements[i], strstr(opt_flags, "--recompute") ? "" : "--activations keep",
			 dir, dir);
		train_model(dir, "deep", names[i], flags);
		cr_expect(strstr(out, i == 1 ? "on host" : "on disk"), "%s: the plan shows no offload: %s",
			  names[i], out);
		expect_same_run(dir, "mem", names[i], names[i]);
	}
	/* the budget run really mixes tiers */
	cr_expect(strstr(out, "on device") && strstr(out, "on host") && strstr(out, "on disk"),
		  "the budgeted run does not use all three tiers: %s", out);
}

static void check_placements(const char *init_flags, const char *opt_flags)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "offload");
	const char *const placements[3] = {
		/* every slab's home on disk, striped over two directories */
		"--place weights=disk,gradients=disk,optimizer=disk",
		/* host homes, copied to the device arena */
		"--place weights=host,gradients=host,optimizer=host",
		/* budgets: the device keeps some units, the host some, disk the rest
		 * (activations and updates fixed, so the slabs must spread) */
		"--device-mem 7M --host-mem 2M --prefetch 1 --device-updates 0",
	};
	check_placements_in(dir, init_flags, opt_flags, placements);
}

Test(offload, bit_identical_adamw, .timeout = 300) { check_placements("", ""); }
/* bf16 matmuls (--matmul-precision bf16) offloaded are bit-identical to
 * bf16 in memory, with recomputed layers too: the rounding is the same
 * wherever the weights came from. */
Test(offload, bit_identical_bf16_matmuls, .timeout = 300)
{
	const char *impl;
	if (!ops_cpu()->matmul_bf16_native(&impl))
		cr_skip_test("no bf16 matrix unit here (%s)", impl);
	check_placements("", "--matmul-precision bf16 --recompute 5");
}

/* Recomputed activations: the forward re-run before each backward gives the
 * same bits, for some, all, and as many layers as a small device budget
 * needs (auto, with offload). */
Test(offload, bit_identical_recompute, .timeout = 300)
{
	check_placements("", "--recompute all");
	check_placements("", "--recompute 5");
	char dir[256], flags[512];
	cu_tmpdir(dir, sizeof dir, "recomp");
	cu_setup_run(dir, "");
	make_deep(dir, "");
	train_model(dir, "deep", "mem", "--recompute 0");
	snprintf(flags, sizeof flags, "--device-mem 4M --host-mem 2M --prefetch 1 --offload-dir %s", dir);
	train_model(dir, "deep", "auto", flags);
	cr_expect(strstr(out, "recomputed in backward"), "auto chose no recompute: %s", out);
	expect_same_run(dir, "mem", "auto", "recompute chosen by the device budget");
}
/* The plan's disk total is what the disk tier's files take: every slab in
 * whole --io-block blocks and the tier in whole stripes (it used to count
 * the slabs' own bytes, and a disk sized from it was too small). */
Test(offload, plan_disk_total_is_the_files, .timeout = 120)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "plandisk");
	cu_setup_run(dir, "");
	const char *cases[] = {"--io-block 1M --offload-dir %s/a",
			       "--io-block 4M --offload-dir %s/a,%s/b --activations dk"};
	for (int i = 0; i < 2; i++) {
		char flags[512], planned[64] = "", taken[64] = "";
		snprintf(flags, sizeof flags, cases[i], dir, dir);
		int rc = cu_run(out, sizeof out,
				"mkdir -p %s/a %s/b && %s plan --model %s/init --micro-batch 4 --seq-len 32 "
				"--place weights=disk,gradients=disk,optimizer=disk %s | grep '^tier total'",
				dir, dir, cu_bin(), dir, flags);
		cr_assert_eq(rc, 0, "%s: %s", flags, out);
		/* "tier total   DEV   HOST   DISK   (pools included)": the third size */
		char u[3][8];
		double v[3];
		cr_assert_eq(sscanf(out, "tier total %lf %7s %lf %7s %lf %7s", &v[0], u[0], &v[1], u[1],
				    &v[2], u[2]),
			     6, "%s", out);
		snprintf(planned, sizeof planned, "%.1f %s", v[2], u[2]);
		rc = cu_run(out, sizeof out,
			    "%s train --model %s/init --data %s/data --out %s/r%d --steps 1 --micro-batch 4 "
			    "--seq-len 32 --progress none --place weights=disk,gradients=disk,optimizer=disk %s",
			    cu_bin(), dir, dir, dir, i, flags);
		cr_assert_eq(rc, 0, "%s: %s", flags, out);
		const char *t = strstr(out, "the files take ");
		cr_assert(t, "%s", out);
		cr_assert_eq(sscanf(t, "the files take %63[^ ] %7s", taken, u[0]), 2);
		snprintf(taken + strlen(taken), sizeof taken - strlen(taken), " %s", u[0]);
		cr_expect_str_eq(planned, taken, "%s: the plan says %s on disk, the files take %s", flags,
				 planned, taken);
	}
}

/* A figure of a run's "disk: read X GiB, wrote Y GiB" line: the number
 * after `label` ("disk: read " or ", wrote "), or -1 without the line. */
static double disk_gib(const char *text, const char *label)
{
	const char *at = strstr(text, "disk: read ");
	at = at ? strstr(at, label) : NULL;
	return at ? atof(at + strlen(label)) : -1;
}

/* The bytes a step reads from disk, against train's: the store keeps each
 * staged slab in its pool slot after use, so the forward's weights (the
 * update just wrote them), backward's first units and the gradients the
 * update finds still there move nothing. The plan counted every read: 1.9x
 * what train read here (248 vs 128 MiB). Train's reads per step are the
 * difference of a 6- and a 2-step run (the end's evaluation and the start
 * cancel); the real interleaving of the threads is not the plan's, hence
 * the 25% (the plan is within 6% here). */
static double disk_read_gib(const char *dir, int steps)
{
	char cmd[2048];
	snprintf(cmd, sizeof cmd,
		 "rm -rf %s/rr && %s train --model %s/small --data %s/data --out %s/rr --micro-batch 2 "
		 "--seq-len 64 --offload-dir %s --place weights=disk,gradients=disk,optimizer=disk "
		 "--steps %d --eval-interval 0 --progress none",
		 dir, cu_bin(), dir, dir, dir, dir, steps);
	int rc = cu_run(out, sizeof out, "%s", cmd);
	const double gib = disk_gib(out, "disk: read ");
	cr_assert(rc == 0 && gib >= 0, "%s", out);
	return gib;
}

Test(offload, plan_disk_reads_match_train, .timeout = 300)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "planreads");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s init --config small --out %s/small && %s plan --model %s/small --micro-batch 2 "
			"--seq-len 64 --offload-dir %s --place weights=disk,gradients=disk,optimizer=disk",
			cu_bin(), dir, cu_bin(), dir, dir);
	const char *at = strstr(out, "predicted busy per step:");
	at = at ? strstr(at, " s (") : NULL;
	cr_assert(rc == 0 && at, "%s", out);
	const double planned_mib = atof(at + 4);
	cr_assert(strstr(at, " MiB read"), "%s", out);
	const double mib = (disk_read_gib(dir, 6) - disk_read_gib(dir, 2)) * 1024 / 4;
	cr_expect(planned_mib > 0.75 * mib && planned_mib < 1.25 * mib,
		  "plan reads %.1f MiB per step, train %.1f", planned_mib, mib);
}

/* Evaluation runs no backward, so swapped activations are dropped, not
 * written out: every zero-filled staging slot was written home when it was
 * handed back (its discard could only cancel the writes not yet started),
 * 0.45 GiB for a whole-val.bin evaluation of the small preset where its two
 * training steps write 0.04. */
Test(offload, evaluation_writes_no_activations, .timeout = 300)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "evalacts");
	cu_setup_run(dir, "");
	double wrote[2];
	for (int k = 0; k < 2; k++) {
		int rc = cu_run(out, sizeof out,
				"{ test -e %s/small || %s init --config small --out %s/small; } && "
				"%s train --model %s/small --data %s/data --out %s/r%d --micro-batch 2 "
				"--seq-len 64 --offload-dir %s --activations disk --steps 2 --eval-interval 0 "
				"--progress none --eval-tokens %d",
				dir, cu_bin(), dir, cu_bin(), dir, dir, dir, k, dir, k ? 0 : 128);
		cr_assert_eq(rc, 0, "%s", out);
		wrote[k] = disk_gib(out, ", wrote ");
		cr_assert(wrote[k] >= 0, "%s", out);
	}
	cr_expect(wrote[1] <= wrote[0] + 0.011, "the whole val.bin's evaluation wrote %.2f GiB, 128 "
						"tokens' %.2f",
		  wrote[1], wrote[0]);
}

/* Streamed weights stream once per group of evaluation micro-batches:
 * where one evaluation moves more than a tenth of the weight traffic of
 * the steps between two (here with groups of one, STRATA_EVAL_GROUP=1, as
 * where memory is short: the defaults' 131072 tokens at 2 x 32 are 2048
 * passes over the weights), it is said with its cost; a small
 * --eval-tokens, weights in memory, or the groups memory allows (here all
 * 2048 micro-batches at once) say nothing. */
Test(offload, evaluation_weight_traffic_said, .timeout = 120)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "evaltraffic");
	cu_setup_run(dir, "");
	const char *needle = "streams the offloaded weights (";
	/* weights on disk with the default --eval-tokens, one micro-batch at a
	 * time; with 64; in memory; grouped */
	const char *extra[4] = {"--offload-dir %s --place weights=disk",
				"--offload-dir %s --place weights=disk --eval-tokens 64", "",
				"--offload-dir %s --place weights=disk"};
	for (int k = 0; k < 4; k++) {
		char flags[512];
		snprintf(flags, sizeof flags, extra[k], dir);
		int rc = cu_run(out, sizeof out,
				"%s %s train --model %s/init --data %s/data --out %s/r%d --micro-batch 2 "
				"--seq-len 32 --steps 20 --eval-interval 0 --progress none %s",
				k < 3 ? "STRATA_EVAL_GROUP=1" : "", cu_bin(), dir, dir, dir, k, flags);
		cr_expect_eq(rc, 0, "%s", out);
		/* --eval-interval 0: the one evaluation at the end (it said "every
		 * 20 steps", and to raise the interval) */
		if (k == 0)
			cr_expect(strstr(out, needle) && strstr(out, "once per micro-batch: ") &&
					  strstr(out, "training steps, once at the end of 20 steps; "
						      "lower --eval-tokens\n"),
				  "%s", out);
		else
			cr_expect(!strstr(out, needle), "case %d: %s", k, out);
	}
	/* an interval past the run: evaluated at step 0 and at the end, said
	 * so (it said "once at the end") */
	int rc0 = cu_run(out, sizeof out,
			 "STRATA_EVAL_GROUP=1 %s train --model %s/init --data %s/data --out %s/r9 "
			 "--micro-batch 2 --seq-len 32 --steps 20 --eval-interval 30 --progress none "
			 "--offload-dir %s --place weights=disk",
			 cu_bin(), dir, dir, dir, dir);
	cr_expect(rc0 == 0 && strstr(out, "training steps, at the start and at the end of 20 steps; "),
		  "%s", out);
	/* one pass of the weights against a step's two: half a step, not
	 * "about 0"; the evaluation's one micro-batch said as such (it read
	 * "1 micro-batches of 2 windows"), and fewer tokens, which would stream
	 * the same, not advised */
	int rc = cu_run(out, sizeof out,
			"STRATA_EVAL_GROUP=1 %s train --model %s/init --data %s/data --out %s/half "
			"--micro-batch 2 --seq-len 32 --steps 4 --eval-interval 2 --eval-tokens 64 "
			"--progress none --offload-dir %s --place weights=disk",
			cu_bin(), dir, dir, dir, dir);
	cr_expect(rc == 0 && strstr(out, "the weight traffic of about 0.5 training steps, every 2 "
					 "steps; raise --eval-interval (0: at the end only)") &&
			  strstr(out, "(2 windows in 1 micro-batch) streams the offloaded weights (") &&
			  strstr(out, ") once, the least an evaluation streams: ") &&
			  !strstr(out, "lower --eval-tokens"),
		  "%s", out);
	/* the same evaluation once, at the end: nothing to advise, nothing said
	 * (it advised the --eval-interval 0 given) */
	rc = cu_run(out, sizeof out,
		    "STRATA_EVAL_GROUP=1 %s train --model %s/init --data %s/data --out %s/end "
		    "--micro-batch 2 --seq-len 32 --steps 4 --eval-interval 0 --eval-tokens 64 "
		    "--progress none --offload-dir %s --place weights=disk",
		    cu_bin(), dir, dir, dir, dir);
	cr_expect(rc == 0 && !strstr(out, needle), "%s", out);
}

/* An evaluation with the weights on disk reads each unit's weights once
 * per group of micro-batches (all 16 here), not once per micro-batch: 16
 * micro-batches read what one does (0.07 GiB for the small preset's step
 * and evaluation, 0.68 one at a time), and score the same loss. */
Test(offload, evaluation_reads_weights_once_per_group, .timeout = 300)
{
	char dir[256], loss[3][64];
	cu_tmpdir(dir, sizeof dir, "evalgroup");
	cu_setup_run(dir, "");
	double read[3];
	const char *env[3] = {"", "STRATA_EVAL_GROUP=1", ""};
	const int tokens[3] = {2048, 2048, 128}; /* 16 micro-batches of 2 x 64, and one */
	for (int k = 0; k < 3; k++) {
		int rc = cu_run(out, sizeof out,
				"{ test -e %s/small || %s init --config small --out %s/small; } && "
				"%s %s train --model %s/small --data %s/data --out %s/r%d --micro-batch 2 "
				"--seq-len 64 --offload-dir %s --place weights=disk --steps 1 "
				"--eval-interval 0 --progress none --eval-tokens %d",
				dir, cu_bin(), dir, env[k], cu_bin(), dir, dir, dir, k, dir, tokens[k]);
		cr_assert_eq(rc, 0, "%s", out);
		read[k] = disk_gib(out, "disk: read ");
		cr_assert(read[k] >= 0, "%s", out);
		const char *v = strstr(out, "val loss ");
		cr_assert(v, "%s", out);
		snprintf(loss[k], sizeof loss[k], "%.20s", v);
	}
	cr_expect_str_eq(loss[0], loss[1], "grouped and one at a time differ: %s vs %s", loss[0],
			 loss[1]);
	cr_expect(read[0] <= read[2] + 0.011, "16 grouped micro-batches read %.2f GiB, one %.2f",
		  read[0], read[2]);
	cr_expect(read[1] > read[0] + 0.3, "one at a time read %.2f GiB, grouped %.2f", read[1],
		  read[0]);
}

/* The fixed overhead beyond the two budgets: the program, its libraries
 * (oneDNN, OpenBLAS, OpenMP, CUDA runtime), their thread stacks and caches,
 * the mapped data shards and the parameter tables. Measured at 26 MiB here
 * (and 31 MiB for a tiny model in memory, whose state is 55 MiB): 64 MiB
 * leaves room for other library builds (README). */
#define RSS_OVERHEAD (64u << 20)

static double jnum(const cJSON *o, const char *a, const char *b)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, a), b);
	cr_assert(cJSON_IsNumber(x), "no number %s.%s", a, b);
	return x->valuedouble;
}

/* `plan --json`: stdout is one JSON object, and it says what the table says:
 * every slab's bytes add up to its kind's total (weights and gradients 4 B a
 * parameter), the tier totals and budgets are the table's, the step the
 * table predicts, the layer letters; nothing predicted where everything
 * fits on the device. */
Test(offload, plan_json_matches_table, .timeout = 120)
{
	char dir[256], path[512];
	cu_tmpdir(dir, sizeof dir, "planjson");
	cu_setup_run(dir, "");
	const char *flags = "--micro-batch 4 --seq-len 32 --profile tests/data/profiles/ci.json "
			    "--place weights=disk,optimizer=host --device-mem 8M --host-mem 8M "
			    "--activations kr";
	int rc = cu_run(out, sizeof out, "mkdir -p %s/o && %s plan --model %s/init %s --offload-dir %s/o "
			"--json 2>%s/err >%s/plan.json", dir, cu_bin(), dir, flags, dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	snprintf(path, sizeof path, "%s/plan.json", dir);
	cJSON *j = tu_read_json(path); /* the whole of stdout: no table, no message */
	const double params = jnum(j, "model", "parameters");
	const char *kinds[] = {"weights", "gradients", "optimizer"};
	const cJSON *slabs = cJSON_GetObjectItemCaseSensitive(j, "slabs");
	for (int k = 0; k < 2; k++)
		cr_expect_eq(jnum(slabs, kinds[k], "device") + jnum(slabs, kinds[k], "host") +
				     jnum(slabs, kinds[k], "disk"),
			     4 * params, "%s", kinds[k]);
	cr_expect_eq(jnum(slabs, "weights", "disk"), 4 * params, "weights=disk");
	cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(slabs, "weights"), "streamed")));
	cr_expect_eq(jnum(slabs, "optimizer", "host"), 8 * params, "optimizer=host");
	const cJSON *tiers = cJSON_GetObjectItemCaseSensitive(j, "tiers");
	cr_expect_eq(jnum(tiers, "budget", "device"), 8 << 20);
	cr_expect_eq(jnum(tiers, "budget", "host"), 8 << 20);
	const cJSON *pol = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "layers"),
							     "policy");
	cr_expect(cJSON_IsString(pol) && !strcmp(pol->valuestring, "kr"), "%s",
		  cJSON_IsString(pol) ? pol->valuestring : "(none)");
	const double step = jnum(j, "predicted", "step_s");
	cr_expect_gt(jnum(j, "predicted", "disk_read_bytes"), 0);

	/* the table of the same plan */
	rc = cu_run(out, sizeof out, "%s plan --model %s/init %s --offload-dir %s/o", cu_bin(), dir,
		    flags, dir);
	cr_assert_eq(rc, 0, "%s", out);
	char want[64];
	snprintf(want, sizeof want, "predicted step: %.3f s", step);
	cr_expect(strstr(out, want), "the table does not say '%s': %s", want, out);
	char b[3][32], line[160];
	snprintf(line, sizeof line, "tier total   %12s %12s %12s",
		 fmt_bytes(b[0], 32, jnum(tiers, "bytes", "device")),
		 fmt_bytes(b[1], 32, jnum(tiers, "bytes", "host")),
		 fmt_bytes(b[2], 32, jnum(tiers, "bytes", "disk")));
	cr_expect(strstr(out, line), "the table does not say '%s': %s", line, out);
	cJSON_Delete(j);

	/* all on the device: nothing predicted, no profile read */
	rc = cu_run(out, sizeof out, "%s plan --model %s/init --micro-batch 4 --seq-len 32 --json "
			"2>/dev/null >%s/fits.json", cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	snprintf(path, sizeof path, "%s/fits.json", dir);
	j = tu_read_json(path);
	cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "predicted")));
	cr_expect(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "profile")));
	cr_expect(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(j, "tiers"), "offloaded")));
	cJSON_Delete(j);
	/* a bad value for it is refused as a bool */
	rc = cu_run(out, sizeof out, "%s plan --model %s/init --json maybe", cu_bin(), dir);
	cr_expect(rc != 0 && strstr(out, "--json"), "%s", out);
}

/* The profile's disk rates were measured with 1M requests 16 deep on one
 * file system: a plan streaming from disk with other requests, or on
 * another kind of file system, says so (a 4K, depth-1 run took 14.5x its
 * predicted step, and a tmpfs profile was used for an ext4 directory in
 * silence); the defaults on the same kind say nothing, and a measured
 * profile records its file system. */
Test(offload, profile_disk_conditions_said, .timeout = 120)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "profcond");
	cu_setup_run(dir, "");
	const char *all_disk = "--place weights=disk,gradients=disk,optimizer=disk";
	int rc = cu_run(out, sizeof out,
			"python3 -c \"import json; p = json.load(open('tests/data/profiles/ci.json')); "
			"p['disk_fs_magic'] = 12345; json.dump(p, open('%s/p.json', 'w'))\" && "
			"STRATA_PROFILE=%s/p.json %s plan --model %s/init --micro-batch 2 --seq-len 32 "
			"--offload-dir %s %s --io-block 4K --io-depth 1",
			dir, dir, cu_bin(), dir, dir, all_disk);
	cr_expect(rc == 0 && strstr(out, "--io-block 4K and --io-depth 1: the profile's disk rates were "
					 "measured with 1M requests 16 deep") &&
			  strstr(out, "the profile's disk rates were measured on file system 0x3039, but "),
		  "%s", out);
	rc = cu_run(out, sizeof out, "%s plan --model %s/init --micro-batch 2 --seq-len 32 --offload-dir %s %s",
		    cu_bin(), dir, dir, all_disk);
	cr_expect(rc == 0 && !strstr(out, "profile's disk rates"), "%s", out);
	rc = cu_run(out, sizeof out,
		    "STRATA_PROFILE=%s/new.json %s plan --model %s/init --micro-batch 2 --seq-len 32 "
		    "--offload-dir %s %s && grep -q '\"disk_fs_magic\":[[:space:]]*[1-9]' %s/new.json",
		    dir, cu_bin(), dir, dir, all_disk, dir);
	cr_expect(rc == 0 && !strstr(out, "profile's disk rates"), "%s", out);
}

/* Weights streamed from the host: a plan that needs the profile. */
#define STREAMS "--micro-batch 2 --seq-len 32 --device-mem 4M --host-mem 64M --place weights=host"

/* The default cache (~/.cache/strata/profile.json) written before
 * profiles had a format counted each copied byte twice (a memcpy's read and
 * write), so the planner predicted copies at half their time: such a cache
 * is measured again, and the new one records its format and a copy rate a
 * slab's memcpy can reach; a profile given by $STRATA_PROFILE is used as
 * written, and a profile with a disk written at 0 GB/s is refused. */
Test(offload, stale_cached_profile_measured_again, .timeout = 120)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "profstale");
	cu_setup_run(dir, "");
	const char *streams = STREAMS;
	int rc = cu_run(out, sizeof out,
			"mkdir -p %s/home/.cache/strata && cp tests/data/profiles/ci.json "
			"%s/home/.cache/strata/profile.json && env -u STRATA_PROFILE HOME=%s/home %s plan "
			"--model %s/init %s 2>&1 && grep -q '\"format\":[[:space:]]*3' "
			"%s/home/.cache/strata/profile.json",
			dir, dir, dir, cu_bin(), dir, streams, dir);
	cr_expect(rc == 0 && strstr(out, "profile.json is from an older strata, whose copy rates "
					 "counted each byte twice") &&
			  strstr(out, "measuring this machine"),
		  "%s", out);
	/* format 2 (2026-11-24): no attention or elementwise rate, a matmul
	 * rate on warm caches; measured again, its disk rates kept (measured
	 * as now) */
	rc = cu_run(out, sizeof out,
		    "python3 -c \"import json; p = json.load(open('tests/data/profiles/ci.json')); "
		    "[p.pop(k) for k in ('attention_gflops', 'elementwise_gbs')]; "
		    "p.update(format=2, threads=2, probe_mib=64, disk_read_gbs=1.25); "
		    "json.dump(p, open('%s/home/.cache/strata/profile.json', 'w'))\" && "
		    "env -u STRATA_PROFILE HOME=%s/home %s plan --model %s/init %s --threads 2 2>&1 && "
		    "python3 -c \"import json, sys; p = json.load(open('%s/home/.cache/strata/profile.json')); "
		    "sys.exit(not (p['format'] == 3 and p['disk_read_gbs'] == 1.25 and "
		    "p['attention_gflops'] > 0 and p['elementwise_gbs'] > 0))\"",
		    dir, dir, cu_bin(), dir, streams, dir);
	cr_expect(rc == 0 && strstr(out, "profile.json is from an older strata, without the attention "
					 "and elementwise rates and with a matmul rate on warm caches") &&
			  strstr(out, "measuring this machine"),
		  "%s", out);
	/* measured now: used again as it is */
	rc = cu_run(out, sizeof out, "env -u STRATA_PROFILE HOME=%s/home %s plan --model %s/init %s",
		    dir, cu_bin(), dir, streams);
	cr_expect(rc == 0 && !strstr(out, "measuring") && !strstr(out, "older strata"), "%s", out);
	/* the same file named by $STRATA_PROFILE: the user's, used as written */
	rc = cu_run(out, sizeof out,
		    "cp tests/data/profiles/ci.json %s/p.json && STRATA_PROFILE=%s/p.json %s plan "
		    "--model %s/init %s 2>&1 && cmp -s tests/data/profiles/ci.json %s/p.json",
		    dir, dir, cu_bin(), dir, streams, dir);
	cr_expect(rc == 0 && !strstr(out, "measuring") && strstr(out, "copy 20.0 / 20.0 GB/s") &&
			  !strstr(out, "has no attention_gflops"),
		  "%s", out);
	/* one without the attention and elementwise rates: used, and warned
	 * that it predicts short */
	rc = cu_run(out, sizeof out,
		    "python3 -c \"import json; p = json.load(open('tests/data/profiles/ci.json')); "
		    "p.pop('elementwise_gbs'); json.dump(p, open('%s/old.json', 'w'))\" && "
		    "STRATA_PROFILE=%s/old.json %s plan --model %s/init %s",
		    dir, dir, cu_bin(), dir, streams);
	cr_expect(rc == 0 && !strstr(out, "measuring") &&
			  strstr(out, "old.json has no attention_gflops or elementwise_gbs (measured "
				      "since 2026-11-25): the plan prices attention at the matmul rate"),
		  "%s", out);
	rc = cu_run(out, sizeof out,
		    "python3 -c \"import json; p = json.load(open('tests/data/profiles/ci.json')); "
		    "p['disk_write_gbs'] = 0; json.dump(p, open('%s/z.json', 'w'))\" && "
		    "STRATA_PROFILE=%s/z.json %s plan --model %s/init --micro-batch 2 --seq-len 32 "
		    "--offload-dir %s --place optimizer=disk",
		    dir, dir, cu_bin(), dir, dir);
	cr_expect(rc != 0 && strstr(out, "disk_read_gbs 2 and disk_write_gbs 0") &&
			  !strstr(out, "nan"),
		  "%s", out);
}

/* The matmul and CPU optimizer rates scale with the threads: the default
 * cache records the count it was measured with and is measured again for a
 * run with another (a 2-thread profile predicted a --threads 1 run 1.7x
 * fast), keeping the disk rates it had; one that records no count is
 * measured again once; a profile given by $STRATA_PROFILE is used as
 * written, with another count warned. */
Test(offload, profile_follows_the_thread_count, .timeout = 120)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "profthr");
	cu_setup_run(dir, "");
	const char *streams = STREAMS;
	const char *plan = "env -u STRATA_PROFILE HOME=%s/home %s plan --model %s/init %s --threads %d";
	const char *cache = "%s/home/.cache/strata/profile.json";
	char path[512], cmd[1024];
	snprintf(path, sizeof path, cache, dir);
	for (int k = 0; k < 5; k++) {
		const int threads = k < 2 ? 1 : 2;
		if (k == 2) /* a disk rate in the cache, kept through the measurement */
			cr_assert_eq(cu_run(out, sizeof out,
					    "python3 -c \"import json; p = json.load(open('%s')); "
					    "p['disk_read_gbs'] = p['disk_write_gbs'] = 1.25; "
					    "json.dump(p, open('%s', 'w'))\"",
					    path, path),
				     0, "%s", out);
		if (k == 4) /* a cache from before the count was recorded */
			cr_assert_eq(cu_run(out, sizeof out,
					    "python3 -c \"import json; p = json.load(open('%s')); "
					    "del p['threads']; json.dump(p, open('%s', 'w'))\"",
					    path, path),
				     0, "%s", out);
		snprintf(cmd, sizeof cmd, plan, dir, cu_bin(), dir, streams, threads);
		int rc = cu_run(out, sizeof out, k == 0 ? "mkdir -p %s/home && %s" : "%s%s",
				k == 0 ? dir : "", cmd);
		cr_assert_eq(rc, 0, "%d: %s", k, out);
		const int measured = strstr(out, "measuring this machine") != NULL;
		cr_expect_eq(measured, k != 1 && k != 3, "run %d (%d threads): measured %d: %s", k,
			     threads, measured, out);
		if (k == 2)
			cr_expect(strstr(out, "was measured with 1 CPU thread, and this run has 2"), "%s",
				  out);
		if (k == 4)
			cr_expect(strstr(out, "records no thread count"), "%s", out);
		cJSON *j = tu_read_json(path);
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "threads"),
			    *d = cJSON_GetObjectItemCaseSensitive(j, "disk_read_gbs");
		cr_expect(cJSON_IsNumber(t) && t->valuedouble == threads,
			  "run %d: the cache's thread count is not %d", k, threads);
		if (k >= 2)
			cr_expect(cJSON_IsNumber(d) && d->valuedouble == 1.25,
				  "run %d: the disk rate is lost", k);
		cJSON_Delete(j);
	}
	/* the user's profile: used as written, another count said */
	int rc = cu_run(out, sizeof out,
			"cp %s %s/p.json && STRATA_PROFILE=%s/p.json %s plan --model %s/init %s "
			"--threads 1 2>&1 && cmp -s %s %s/p.json",
			path, dir, dir, cu_bin(), dir, streams, path, dir);
	cr_expect(rc == 0 && !strstr(out, "measuring") &&
			  strstr(out, "was measured with 2 CPU threads and this run has 1"),
		  "%s", out);
}

/* The profile's measurement stays within small budgets: its arrays (64 MiB
 * each, 288 MiB in all) are sized from the budgets, so a first run with 40
 * MiB of budgets peaks within them + 64 MiB (it peaked at 317 MiB, found by
 * a helper's audit); the profile records the size, and the default cache
 * measured over small arrays is measured again for a run whose budgets
 * allow larger ones (said), and not for one whose do not. */
Test(offload, profile_measured_within_budgets, .timeout = 120)
{
	char dir[256], cmd[2048];
	cu_tmpdir(dir, sizeof dir, "profmem");
	cu_setup_run(dir, "");
	const size_t dev = 32u << 20, host = 8u << 20;
	snprintf(cmd, sizeof cmd,
		 "%s train --model %s/tiny --data %s/data --out %s/r --steps 2 --micro-batch 2 "
		 "--seq-len 64 --optimizer sgd --device-mem %zu --host-mem %zu --offload-dir %s/off "
		 "--threads 2 --eval-tokens 64 --profile %s/p.json",
		 cu_bin(), dir, dir, dir, dev, host, dir, dir);
	/* the tiny preset: 12.6 MiB of weights, as much of gradients and of
	 * momentum, streamed through the budgets */
	cr_assert_eq(cu_run(out, sizeof out, "mkdir -p %s/off && %s init --config tiny --out %s/tiny",
			    dir, cu_bin(), dir),
		     0, "%s", out);
	int status;
	const size_t rss = cu_peak_rss(cmd, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", cmd);
	cr_expect_leq(rss, dev + host + RSS_OVERHEAD, "measuring: peak RSS %.1f MiB over %.0f + %.0f",
		      rss / 1048576.0, (dev + host) / 1048576.0, RSS_OVERHEAD / 1048576.0);
	int rc = cu_run(out, sizeof out,
			"python3 -c \"import json, sys; sys.exit(json.load(open('%s/p.json'))['probe_mib'] != 8)\"",
			dir);
	cr_expect_eq(rc, 0, "the profile does not record 8 MiB arrays");
	/* and every rate was measured within them */
	rc = cu_run(out, sizeof out,
		    "python3 -c \"import json, sys; p = json.load(open('%s/p.json')); "
		    "sys.exit(not (p['format'] == 3 and p['matmul_gflops'] > 0 and "
		    "p['attention_gflops'] > 0 and p['attention_short_gflops'] > 0 and "
		    "p['matmul_narrow_gflops'] > 0 and p['elementwise_gbs'] > 0))\"",
		    dir);
	cr_expect_eq(rc, 0, "a rate missing from the profile measured over 8 MiB arrays");
	/* the default cache: measured small, then again where budgets allow */
	const char *plan = "env -u STRATA_PROFILE HOME=%s/home %s plan --model %s/init --micro-batch 2 "
			   "--seq-len 32 --device-mem 4M --place weights=host --host-mem %s";
	char line[1024];
	const char *hosts[3] = {"60M", "60M", "1G"};
	for (int k = 0; k < 3; k++) {
		snprintf(line, sizeof line, plan, dir, cu_bin(), dir, hosts[k]);
		rc = cu_run(out, sizeof out, "mkdir -p %s/home && %s", dir, line);
		cr_assert_eq(rc, 0, "%s", out);
		const int measured = strstr(out, "measuring this machine") != NULL;
		cr_expect_eq(measured, k != 1, "run %d (--host-mem %s): measured %d: %s", k, hosts[k],
			     measured, out);
	}
	cr_expect(strstr(out, "was measured over 8 MiB arrays (within small budgets), and this "
			      "run's budgets allow 64"),
		  "%s", out);
}

/* plan takes train's option sources: --resume plans the run with its saved
 * options (it planned the defaults: micro-batch 8 x 256, adamw, no
 * budgets), and --config is read (it was an unknown option). */
Test(offload, plan_reads_resume_and_config, .timeout = 120)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "planres");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/r --steps 1 --micro-batch 2 "
			"--seq-len 32 --optimizer adamw8bit --quant-min-size 512 --device-mem 2M "
			"--host-mem 8M --offload-dir %s --progress none",
			cu_bin(), dir, dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	rc = cu_run(out, sizeof out, "%s plan --resume %s/r", cu_bin(), dir);
	cr_expect(rc == 0 && strstr(out, "micro-batch 2 x 32 tokens x 1; adamw8bit") &&
			  strstr(out, "budget            2.0 MiB      8.0 MiB"),
		  "%s", out);
	/* a flag still wins over the saved options */
	rc = cu_run(out, sizeof out, "%s plan --resume %s/r --micro-batch 3", cu_bin(), dir);
	cr_expect(rc == 0 && strstr(out, "micro-batch 3 x 32 tokens x 1; adamw8bit"), "%s", out);
	rc = cu_run(out, sizeof out,
		    "echo '{\"micro_batch\": 3, \"seq_len\": 16, \"optimizer\": \"sgd8bit\", "
		    "\"momentum\": 0.9}' > %s/c.json && %s plan --model %s/init --config %s/c.json",
		    dir, cu_bin(), dir, dir);
	cr_expect(rc == 0 && strstr(out, "micro-batch 3 x 16 tokens x 1; sgd8bit"), "%s", out);
	/* train's resume checks and unused-option warnings: a plan of a resume
	 * train refuses is refused (it planned AdamW state for an 8-bit run) */
	rc = cu_run(out, sizeof out, "%s plan --resume %s/r --optimizer sgd", cu_bin(), dir);
	cr_expect(rc != 0 && strstr(out, "the run trained with --optimizer adamw8bit, whose state "
					 "cannot become --optimizer sgd's"),
		  "%s", out);
	/* and those made of the optimizer file (its block; plan printed a
	 * layout the state could not take) */
	rc = cu_run(out, sizeof out, "%s plan --resume %s/r --quant-min-size 100", cu_bin(), dir);
	cr_expect(rc == 0, "another threshold converts: %s", out);
	rc = cu_run(out, sizeof out, "%s plan --resume %s/r --quant-block 128", cu_bin(), dir);
	cr_expect(rc == 0, "another block converts: %s", out);
	rc = cu_run(out, sizeof out, "%s plan --resume %s/r --galore-rank 16", cu_bin(), dir);
	cr_expect(rc == 0 && strstr(out, "--galore-rank is not used by --optimizer adamw8bit"), "%s",
		  out);
	/* also for a plan of a fresh run, which gives no --steps (the options
	 * failed their check for a training length, and nothing was said) */
	rc = cu_run(out, sizeof out, "%s plan --model %s/init --optimizer adamw8bit --momentum 0.9",
		    cu_bin(), dir);
	cr_expect(rc == 0 && strstr(out, "--momentum is not used by --optimizer adamw8bit"), "%s", out);
	/* weights that do not match config.json are refused as train refuses
	 * them (plan never opened them); a config.json alone is planned, said */
	rc = cu_run(out, sizeof out,
		    "cp -r %s/init %s/wrong && python3 -c \"import json; p = '%s/wrong/config.json'; "
		    "c = json.load(open(p)); c['num_hidden_layers'] = 3; json.dump(c, open(p, 'w'))\" && "
		    "%s plan --model %s/wrong",
		    dir, dir, dir, cu_bin(), dir);
	cr_expect(rc != 0 && strstr(out, "model.layers.2."), "%s", out);
	rc = cu_run(out, sizeof out, "mkdir %s/cfg && cp %s/init/config.json %s/cfg && %s plan --model %s/cfg",
		    dir, dir, dir, cu_bin(), dir);
	cr_expect(rc == 0 && strstr(out, "/cfg holds no weights (model.safetensors): planned from its "
					 "config.json alone"),
		  "%s", out);
	/* PyTorch weights are weights train refuses, not none */
	rc = cu_run(out, sizeof out, "touch %s/cfg/pytorch_model.bin && %s plan --model %s/cfg", dir,
		    cu_bin(), dir);
	cr_expect(rc != 0 && strstr(out, "/cfg holds PyTorch weights (pytorch_model.bin)"), "%s", out);
}

/* A 7B model's 101 GiB of state (a config.json alone: plan allocates
 * nothing) on a machine with less memory: with one budget given, the other
 * tier gets its share of the automatic split, not all the rest (it was
 * unlimited, and train would have been killed for memory); budgets above
 * the available memory are warned. */
Test(offload, one_budget_sizes_the_other, .timeout = 120)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "onebudget");
	int rc = cu_run(out, sizeof out, "awk '/^MemAvailable:/ {print $2}' /proc/meminfo");
	const double avail_gib = atof(out) / (1 << 20);
	cr_assert(rc == 0 && avail_gib > 0, "cannot read MemAvailable: %s", out);
	rc = cu_run(out, sizeof out,
		    "mkdir -p %s/m7 && printf '{\"vocab_size\":32000,\"hidden_size\":4096,"
		    "\"intermediate_size\":11008,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
		    "\"max_position_embeddings\":2048}' > %s/m7/config.json && "
		    "%s plan --model %s/m7 --micro-batch 1 --seq-len 64 --offload-dir %s --host-mem 4G",
		    dir, dir, cu_bin(), dir, dir);
	if (0.9 * avail_gib > 101) {
		cr_log_warn("%.0f GiB available: a 7B model's state fits, skipping", avail_gib);
		return;
	}
	/* said before the plan (which may then find too little disk here) */
	const char *b = strstr(out, "available memory (");
	cr_assert(b, "%s", out);
	double dev;
	char unit[8];
	b = strstr(b, "budgets device ");
	cr_assert(b && sscanf(b, "budgets device %lf %7[^,]", &dev, unit) == 2, "%s", out);
	const double dev_gib = dev * (!strcmp(unit, "GiB") ? 1 : !strcmp(unit, "MiB") ? 1.0 / 1024 : 1e9);
	cr_expect(dev_gib > 0.25 * avail_gib && dev_gib < 0.35 * avail_gib,
		  "with --host-mem alone the device budget is %.2f GiB, not 30%% of %.2f GiB: %s", dev_gib,
		  avail_gib, out);
	cr_expect(strstr(out, "host 4.0 GiB (given)"), "%s", out);
	rc = cu_run(out, sizeof out,
		    "%s plan --model %s/m7 --micro-batch 1 --seq-len 64 --device-mem 1T --host-mem 1T",
		    cu_bin(), dir);
	cr_expect(strstr(out, "more than the ") && strstr(out, "of memory available: it may be killed"),
		  "%s", out);
	/* a host budget of 80% of memory: the device's share is what it
	 * leaves of 90% (it took its 30% of all of it, more than memory in
	 * all), and nothing is warned */
	rc = cu_run(out, sizeof out,
		    "%s plan --model %s/m7 --micro-batch 1 --seq-len 64 --offload-dir %s --host-mem %.0fM",
		    cu_bin(), dir, dir, 0.8 * avail_gib * 1024);
	b = strstr(out, "budgets device ");
	cr_assert(b && sscanf(b, "budgets device %lf %7[^,]", &dev, unit) == 2, "%s", out);
	const double dev2 = dev * (!strcmp(unit, "GiB") ? 1 : !strcmp(unit, "MiB") ? 1.0 / 1024 : 1e9);
	cr_expect(dev2 > 0.09 * avail_gib && dev2 < 0.11 * avail_gib && !strstr(out, "may be killed"),
		  "beside --host-mem of 80%% the device share is %.2f GiB, not 10%% of %.2f GiB: %s", dev2,
		  avail_gib, out);
	/* one of all of memory: with the least share beside it (a twentieth),
	 * more than memory, warned naming the flag given */
	rc = cu_run(out, sizeof out,
		    "%s plan --model %s/m7 --micro-batch 1 --seq-len 64 --offload-dir %s --host-mem %.0fM",
		    cu_bin(), dir, dir, avail_gib * 1024);
	cr_expect(strstr(out, "--host-mem and the device share left beside it lets the run hold") &&
			  strstr(out, "of memory available: it may be killed"),
		  "%s", out);
}

/* A fake root for STRATA_CGROUP_ROOT (engine/memavail.h): MemAvailable
 * 32 GiB and the process in cgroup `cg` (a /proc/self/cgroup line). */
static void fake_root(char *root, size_t n, const char *dir, const char *name, const char *cg)
{
	snprintf(root, n, "%s/%s", dir, name);
	int rc = cu_run(out, sizeof out,
			"mkdir -p %s/proc/self %s/sys/fs/cgroup/memory && echo '%s' > %s/proc/self/cgroup && "
			"printf 'MemTotal: 67108864 kB\nMemAvailable: 33554432 kB\n' > %s/proc/meminfo && "
			"touch %s/sys/fs/cgroup/cgroup.controllers",
			root, root, cg, root, root, root);
	cr_assert_eq(rc, 0, "%s", out);
}

/* One value into a file of a fake cgroup tree (made as needed). */
static void fake_file(const char *root, const char *file, const char *value)
{
	int rc = cu_run(out, sizeof out, "f=%s/sys/fs/cgroup/%s && mkdir -p $(dirname $f) && printf '%s\n' > $f",
			root, file, value);
	cr_assert_eq(rc, 0, "%s", out);
}

/* A cgroup CPU quota (docker --cpus) sets the default thread count, rounded
 * up (a thread per visible CPU spun on a share of them); --threads past it
 * is warned, OMP_NUM_THREADS is the user's; v2's cpu.max on an ancestor
 * and v1's cfs quota over its period. This machine has 2 CPUs. */
Test(offload, cgroup_cpu_quota_sets_threads, .timeout = 120)
{
	char dir[256], root[512];
	cu_tmpdir(dir, sizeof dir, "cpuq");
	cu_setup_run(dir, "");
	const char *run = "STRATA_CGROUP_ROOT=%s %s %s train --model %s/init --data %s/data --out %s/%s "
			  "--steps 1 --eval-interval 0 --micro-batch 2 --seq-len 32 %s";
	fake_root(root, sizeof root, dir, "v2", "0::/job/step");
	fake_file(root, "job/cpu.max", "100000 100000");
	fake_file(root, "job/step/cpu.max", "max 100000");
	int rc = cu_run(out, sizeof out, run, root, "", cu_bin(), dir, dir, dir, "a", "");
	cr_expect(rc == 0 && strstr(out, "threads: 1, for the cgroup's CPU quota of 1 CPU (of 2 here") &&
			  strstr(out, "backend: cpu, 1 thread,"),
		  "%s", out);
	rc = cu_run(out, sizeof out, run, root, "", cu_bin(), dir, dir, dir, "b", "--threads 2");
	cr_expect(rc == 0 && strstr(out, "--threads 2 is more than the cgroup's CPU quota of 1 CPU") &&
			  strstr(out, "backend: cpu, 2 threads,"),
		  "%s", out);
	rc = cu_run(out, sizeof out, run, root, "OMP_NUM_THREADS=2", cu_bin(), dir, dir, dir, "c", "");
	cr_expect(rc == 0 && !strstr(out, "CPU quota") && strstr(out, "backend: cpu, 2 threads,"), "%s",
		  out);
	/* v1: half a CPU on the process's cpu cgroup, rounded up to one thread */
	fake_root(root, sizeof root, dir, "v1", "3:cpu,cpuacct:/docker/x\n0::/");
	fake_file(root, "cpu/docker/x/cpu.cfs_quota_us", "50000");
	fake_file(root, "cpu/docker/x/cpu.cfs_period_us", "100000");
	cr_assert_eq(cu_run(out, sizeof out, "echo -1 > %s/sys/fs/cgroup/cpu/cpu.cfs_quota_us", root), 0);
	fake_file(root, "cpu/cpu.cfs_period_us", "100000");
	rc = cu_run(out, sizeof out, run, root, "", cu_bin(), dir, dir, dir, "d", "");
	cr_expect(rc == 0 && strstr(out, "threads: 1, for the cgroup's CPU quota of 0.5 CPUs") &&
			  strstr(out, "backend: cpu, 1 thread,"),
		  "%s", out);
	/* no quota: every CPU, unsaid */
	fake_root(root, sizeof root, dir, "none", "0::/");
	fake_file(root, "cpu.max", "max 100000");
	rc = cu_run(out, sizeof out, run, root, "", cu_bin(), dir, dir, dir, "e", "");
	cr_expect(rc == 0 && !strstr(out, "CPU quota") && strstr(out, "backend: cpu, 2 threads,"), "%s",
		  out);
}

/* The budgets and the memory warnings come from the smaller of MemAvailable
 * and the cgroup's headroom (limit less use, reclaimable cache not counted
 * as used), on the process's cgroup or an ancestor, v2 or v1, and plan says
 * where the limit came from (a docker --memory run was sized from the host's
 * RAM and killed for memory). */
Test(offload, cgroup_limit_sizes_budgets, .timeout = 120)
{
	char dir[256], root[512];
	cu_tmpdir(dir, sizeof dir, "cgroup");
	int rc = cu_run(out, sizeof out,
			"mkdir -p %s/m7 && printf '{\"vocab_size\":32000,\"hidden_size\":4096,"
			"\"intermediate_size\":11008,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
			"\"max_position_embeddings\":2048}' > %s/m7/config.json",
			dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	const char *plan = "plan --model %s/m7 --micro-batch 1 --seq-len 64 --offload-dir %s";
	char cmd[1024];
	/* v2: 2 GiB on the job, 1 GiB used of which 512 MiB is inactive cache;
	 * the step below it unlimited: 1.5 GiB available */
	fake_root(root, sizeof root, dir, "v2", "0::/job/step");
	fake_file(root, "job/memory.max", "2147483648");
	fake_file(root, "job/memory.current", "1073741824");
	fake_file(root, "job/memory.stat", "anon 1\ninactive_file 536870912");
	fake_file(root, "job/step/memory.max", "max");
	fake_file(root, "job/step/memory.current", "4096");
	snprintf(cmd, sizeof cmd, plan, dir, dir);
	rc = cu_run(out, sizeof out, "STRATA_CGROUP_ROOT=%s %s %s", root, cu_bin(), cmd);
	cr_expect(strstr(out, "host memory: 1.5 GiB available (cgroup limit: 2.0 GiB, 512.0 MiB in "
			      "use, ") && strstr(out, "/job/memory.max; MemAvailable 32.0 GiB)"),
		  "%s", out);
	/* the shares are the limit's: 30% and 60% of 1.5 GiB, not of 32 GiB */
	cr_expect(strstr(out, "available memory (1.5 GiB, the cgroup limit): budgets device 460.8 MiB, "
			      "host 921.6 MiB"),
		  "%s", out);
	rc = cu_run(out, sizeof out, "STRATA_CGROUP_ROOT=%s %s %s --device-mem 1G --host-mem 2G", root,
		    cu_bin(), cmd);
	cr_expect(strstr(out, "more than the 1.5 GiB of memory available (the cgroup limit): it may be "
			      "killed"),
		  "%s", out);
	/* v1: 1 GiB on the process's own memory cgroup */
	fake_root(root, sizeof root, dir, "v1", "4:memory:/docker/abc\n0::/");
	fake_file(root, "memory/docker/abc/memory.limit_in_bytes", "1073741824");
	fake_file(root, "memory/docker/abc/memory.usage_in_bytes", "0");
	fake_file(root, "memory/memory.limit_in_bytes", "9223372036854771712");
	rc = cu_run(out, sizeof out, "STRATA_CGROUP_ROOT=%s %s %s", root, cu_bin(), cmd);
	cr_expect(strstr(out, "host memory: 1.0 GiB available (cgroup limit") &&
			  strstr(out, "budgets device 307.2 MiB, host 614.4 MiB"),
		  "%s", out);
	/* a limit above MemAvailable, and no limit ("max"): MemAvailable, unsaid */
	const char *limits[2] = {"68719476736", "max"};
	for (int i = 0; i < 2; i++) {
		fake_root(root, sizeof root, dir, i ? "max" : "big", "0::/");
		fake_file(root, "memory.max", limits[i]);
		fake_file(root, "memory.current", "0");
		rc = cu_run(out, sizeof out, "STRATA_CGROUP_ROOT=%s %s %s", root, cu_bin(), cmd);
		cr_expect(!strstr(out, "cgroup limit") && !strstr(out, "host memory:") &&
				  strstr(out, "available memory (32.0 GiB): budgets device 9.6 GiB, host 19.2 GiB"),
			  "limit %s: %s", limits[i], out);
	}
}

/* The end-of-run queue report takes the queues' busy times over the
 * training loop and divides by the loop's wall time (wall_s), not by the
 * steps' time alone (steps_s): evaluations stream weights too, and an update
 * can finish under the next evaluation, which made a queue more than 100%
 * busy and compute negative in short runs. */
Test(offload, queue_report_within_the_steps, .timeout = 120)
{
	char dir[256], flags[1024];
	cu_tmpdir(dir, sizeof dir, "offq");
	cu_setup_run(dir, "");
	snprintf(flags, sizeof flags,
		 "--place weights=disk,gradients=disk,optimizer=disk --offload-dir %s --steps 4 "
		 "--eval-interval 1 --eval-tokens 2048", dir);
	train(dir, "q", flags);
	char path[512];
	snprintf(path, sizeof path, "%s/q/metrics.jsonl", dir);
	FILE *f = fopen(path, "r");
	cr_assert(f, "no %s", path);
	char line[4096];
	cJSON *q = NULL;
	while (fgets(line, sizeof line, f)) {
		cJSON *r = cJSON_Parse(line);
		if (r && cJSON_GetObjectItem(r, "queues")) {
			cJSON_Delete(q);
			q = r;
		} else
			cJSON_Delete(r);
	}
	fclose(f);
	cr_assert(q, "no queues record in %s", path);
	const cJSON *o = cJSON_GetObjectItem(q, "queues");
	const cJSON *steps_s = cJSON_GetObjectItem(o, "steps_s");
	cr_assert(cJSON_IsNumber(steps_s), "no steps_s in the queues record");
	const double wall = cJSON_GetObjectItem(o, "wall_s")->valuedouble;
	cr_expect(steps_s->valuedouble > 0 && steps_s->valuedouble <= wall,
		  "steps_s %.4f, wall_s %.4f", steps_s->valuedouble, wall);
	const char *keys[] = {"compute_s", "copy_s", "disk_s", "optimizer_s"};
	for (int i = 0; i < 4; i++) {
		const double v = cJSON_GetObjectItem(o, keys[i])->valuedouble;
		/* a transfer already in flight when the loop began counts whole */
		cr_expect(v >= 0 && v <= 1.05 * wall + 0.005, "%s = %.4f s over a %.4f s loop", keys[i],
			  v, wall);
	}
	cJSON_Delete(q);
}

static void expect_fail(const char *what, const char *needle, int rc);

/* The planner's choices: swapped activations (host, disk, a per-layer mix
 * with recompute) and CPU/device update splits give the bits of in-memory
 * training, and so does the plan it makes by itself under small budgets. */
Test(offload, bit_identical_plans, .timeout = 300)
{
	char dir[256], flags[1024];
	cu_tmpdir(dir, sizeof dir, "plans");
	cu_setup_run(dir, "");
	make_deep(dir, "");
	cu_run(NULL, 0, "mkdir -p %s/nvme0 %s/nvme1", dir, dir);
	train_model(dir, "deep", "mem", "--activations keep --device-updates 0");
	const char *plans[] = {
		"--activations host",
		"--activations disk",
		"--activations ddhhrrkkrhdk --prefetch 1",
		/* recomputed layers before swapped ones: a recompute's output
		 * must not land in a freed swap slot (caught when it did) */
		"--activations hrhrhrdrdrkk --prefetch 1",
		/* updates: some and all units on the device, with slabs staged so
		 * the CPU worker runs beside the compute */
		"--activations ddhhkkkkkkkk --device-updates 5 --place weights=disk",
		"--activations hhhhhhhhhhhh --device-updates 14 --place weights=host",
		/* the planner's own choice under small budgets */
		"--device-mem 3M --host-mem 3M",
	};
	const char *names[] = {"host", "disk", "mixed", "alternate", "dev5", "dev14", "auto"};
	for (int i = 0; i < 7; i++) {
		snprintf(flags, sizeof flags, "%s --offload-dir %s/nvme0,%s/nvme1", plans[i], dir, dir);
		train_model(dir, "deep", names[i], flags);
		if (i < 4)
			cr_expect(strstr(out, "swapped to the host") && strstr(out, "device staging buffers"),
				  "%s: no swapped activations reported: %s", names[i], out);
		if (i == 4 || i == 5)
			cr_expect(strstr(out, i == 4 ? "5 of 14 units update on the device"
						     : "14 of 14 units update on the device"),
				  "%s: the split is not reported: %s", names[i], out);
		if (i == 6)
			cr_expect(strstr(out, "plans compared"), "auto: no plan reported: %s", out);
		expect_same_run(dir, "mem", names[i], names[i]);
	}
	int rc = cu_run(out, sizeof out, "%s train --model %s/deep --data %s/data --out %s/bad %s "
			"--activations disk", cu_bin(), dir, dir, dir, RUN);
	expect_fail("swap to disk without a directory", "offload directory", rc);
	rc = cu_run(out, sizeof out, "%s train --model %s/deep --data %s/data --out %s/bad %s "
		    "--activations kkk", cu_bin(), dir, dir, dir, RUN);
	expect_fail("policy of the wrong length", "3 letters for a model of 12 layers", rc);
	rc = cu_run(out, sizeof out, "%s train --model %s/deep --data %s/data --out %s/bad %s "
		    "--recompute 2 --activations host", cu_bin(), dir, dir, dir, RUN);
	expect_fail("two activation flags", "both choose", rc);
	rc = cu_run(out, sizeof out, "%s train --model %s/deep --data %s/data --out %s/bad %s "
		    "--device-updates 3 --place optimizer=disk --offload-dir %s", cu_bin(), dir, dir,
		    dir, RUN, dir);
	expect_fail("device updates against a placed state", "--place puts them elsewhere", rc);
}
Test(offload, bit_identical_adamw8bit_tied, .timeout = 300)
{
	check_placements("--tied", "--optimizer adamw8bit --quant-min-size 1024");
}
Test(offload, bit_identical_sgd_momentum, .timeout = 300)
{
	check_placements("", "--optimizer sgd --momentum 0.9 --lr 0.05");
}
/* 8-bit SGD's codes and absmax streamed through the tiers (the README's
 * "every optimizer" had no test for it), accumulating over micro-batches */
Test(offload, bit_identical_sgd8bit, .timeout = 300)
{
	check_placements("", "--optimizer sgd8bit --momentum 0.9 --lr 0.05 --quant-min-size 1024 "
			     "--grad-accum 2");
}
Test(offload, bit_identical_galore, .timeout = 300)
{
	check_placements("", "--optimizer galore-adamw --galore-rank 8 --galore-update-gap 2 "
			     "--galore-per-layer false");
}

/* GaLore keeps its updates off the device: its one projection scratch was
 * written by a device unit's update (on the compute thread) and the CPU
 * worker's at once, so forced --device-updates trained other weights or
 * crashed. Now they are refused, and the planner, even where the CPU's
 * update rate is far below the device's (a profile of 5 M params/s), picks
 * none: the run equals the in-memory one. */
Test(offload, galore_updates_stay_off_the_device, .timeout = 300)
{
	const char *opt = "--optimizer galore-adamw --galore-rank 8 --galore-update-gap 2 "
			  "--galore-per-layer false";
	char dir[256], flags[1024];
	cu_tmpdir(dir, sizeof dir, "galoredev");
	cu_setup_run(dir, "");
	make_deep(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/deep --data %s/data --out %s/x %s %s --offload-dir %s "
			"--place weights=disk --device-updates 4",
			cu_bin(), dir, dir, dir, RUN, opt, dir);
	cr_expect(rc == 2 && strstr(out, "GaLore's updates run on the CPU's update thread alone") &&
			  strstr(out, "hint: leave --device-updates at auto (0 for GaLore)"),
		  "%s", out);
	train_model(dir, "deep", "mem", opt);
	rc = cu_run(out, sizeof out,
		    "sed -e 's/\"cpu_adamw_mparams\": 2000/\"cpu_adamw_mparams\": 5/' "
		    "-e 's/\"cpu_adamw8bit_mparams\": 900/\"cpu_adamw8bit_mparams\": 5/' "
		    "tests/data/profiles/ci.json > %s/slowcpu.json && grep -q '\"cpu_adamw_mparams\": 5' "
		    "%s/slowcpu.json",
		    dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	snprintf(flags, sizeof flags, "%s --offload-dir %s --place weights=disk --profile %s/slowcpu.json",
		 opt, dir, dir);
	rc = cu_run(out, sizeof out, "%s plan --model %s/deep --data %s/data %s %s", cu_bin(), dir, dir, RUN,
		    flags);
	cr_expect(rc == 0 && strstr(out, "updates:     0 of "), "%s", out);
	train_model(dir, "deep", "slow", flags);
	cr_expect(!strstr(out, "units update on the device"), "%s", out);
	expect_same_run(dir, "mem", "slow", "GaLore under a slow CPU profile");
	/* a run saved before the refusal with device updates: its saved value
	 * is named as such on resume, with the way out, which trains */
	rc = cu_run(out, sizeof out,
		    "sed -i 's/\"device-updates\":[[:space:]]*\"auto\"/\"device-updates\": \"4\"/' "
		    "%s/mem/step-000003/trainer.json && grep -q '\"device-updates\": \"4\"' "
		    "%s/mem/step-000003/trainer.json && %s train --resume %s/mem/step-000003 --out %s/old "
		    "--offload-dir %s --place weights=disk",
		    dir, dir, cu_bin(), dir, dir, dir);
	cr_expect(rc == 2 && strstr(out, "a resumed run keeps the --device-updates it was started with "
					 "(here: 4); --device-updates auto lets the planner choose"),
		  "%s", out);
	rc = cu_run(out, sizeof out, "%s train --resume %s/mem/step-000003 --out %s/old --offload-dir %s "
			"--place weights=disk --device-updates auto",
		    cu_bin(), dir, dir, dir);
	cr_expect_eq(rc, 0, "%s", out);
}

/* Per-layer GaLore with its weights and state offloaded (it kept every slab
 * in memory, and such a run was refused): the same bits as in memory, with
 * accumulation over micro-batches, moment rotation, the 8-bit moments, a
 * step skipped at a projector refresh (the projectors put back go through
 * the store), and a resume from the in-memory run's step 3 into an
 * offloaded one. The gradients stay on the device (one shared slab). */
Test(offload, bit_identical_galore_per_layer, .timeout = 300)
{
	const char *opt = "--optimizer galore-adamw8bit --galore-rank 8 --galore-update-gap 2 "
			  "--galore-moments rotate --quant-min-size 256";
	char dir[256], flags[1024];
	cu_tmpdir(dir, sizeof dir, "offgalore");
	const char *const placements[3] = {
		"--place weights=disk,optimizer=disk",
		"--place weights=host,optimizer=host",
		/* the layers' shared gradient slab and the activations leave the
		 * device too little for every weight */
		"--device-mem 6M --host-mem 600K --prefetch 1",
	};
	check_placements_in(dir, "", opt, placements);
	cr_expect(strstr(out, "12 units share one slab"), "not per-layer: %s", out);
	/* a step skipped at update 4, where projectors are due (a refresh
	 * at every update with gap 2, the matrices in two phases): in memory
	 * and offloaded alike */
	const char *names[2] = {"skip-mem", "skip-off"};
	for (int i = 0; i < 2; i++) {
		if (i)
			snprintf(flags, sizeof flags, "%s --offload-dir %s/nvme0", placements[2], dir);
		int rc = cu_run(out, sizeof out,
				"STRATA_FAULT_NAN_AT_STEP=4 %s train --model %s/deep --data %s/data "
				"--out %s/%s %s %s %s",
				cu_bin(), dir, dir, dir, names[i], RUN, opt, i ? flags : "");
		cr_assert_eq(rc, 0, "%s: %s", names[i], out);
		cr_expect(strstr(out, "step 4: non-finite gradient"), "%s: no step skipped: %s",
			  names[i], out);
	}
	expect_same_run(dir, "skip-mem", "skip-off", "a skipped step, offloaded");
	/* resume the in-memory run's step 3 with everything offloaded */
	int rc = cu_run(out, sizeof out,
			"cp -r %s/mem %s/resumed && rm -rf %s/resumed/step-000006 && "
			"%s train --resume %s/resumed/step-000003 %s --offload-dir %s/nvme0",
			dir, dir, dir, cu_bin(), dir, placements[0], dir);
	cr_assert_eq(rc, 0, "resume offloaded: %s", out);
	cr_expect(strstr(out, "on disk"), "the resume did not offload: %s", out);
	/* (its metrics.jsonl holds the copied steps 4-6 too: the state alone) */
	char a[512], b[512];
	snprintf(a, sizeof a, "%s/mem/step-000006", dir);
	snprintf(b, sizeof b, "%s/resumed/step-000006", dir);
	cu_expect_same_state(a, b, "resumed into offload");
}

/* A filesystem that refuses O_DIRECT (ramfs; tmpfs takes it since Linux
 * 6.6): one warning, buffered I/O, the same results. */
Test(offload, no_odirect_falls_back_to_buffered_io, .timeout = 300)
{
	char dir[256], mnt[256], flags[1024];
	cu_tmpdir(dir, sizeof dir, "offtmpfs");
	cu_setup_run(dir, "");
	train(dir, "mem", "");
	cu_tmpdir(mnt, sizeof mnt, "ramfs");
	if (mount("ramfs", mnt, "ramfs", 0, NULL) != 0) {
		cr_log_warn("cannot mount a ramfs here (%s): skipping this check", strerror(errno));
		return;
	}
	snprintf(flags, sizeof flags, "--place weights=disk,gradients=disk,optimizer=disk --offload-dir %s",
		 mnt);
	train(dir, "tmpfs", flags);
	cr_expect(strstr(out, "refuses O_DIRECT"), "no warning about buffered I/O: %s", out);
	cr_expect(strstr(out, "(buffered)"), "the plan does not say the I/O is buffered: %s", out);
	expect_same_run(dir, "mem", "tmpfs", "offload to ramfs");
	umount(mnt);
}

/* io_uring refused by a seccomp filter, as in a Docker container (train
 * failed at its setup with "cannot set up io_uring: Operation not
 * permitted"): one warning naming the way back, the thread pool's I/O, the
 * same results. */
Test(offload, without_io_uring_the_same_run, .timeout = 300)
{
	char dir[256], flags[1024];
	cu_tmpdir(dir, sizeof dir, "nouring");
	cu_setup_run(dir, "");
	train(dir, "mem", "");
	snprintf(flags, sizeof flags, "--place weights=disk,gradients=disk,optimizer=disk --offload-dir %s/off",
		 dir);
	cr_assert_eq(cu_run(NULL, 0, "mkdir -p %s/off", dir), 0);
	if (!io_forbid_uring()) {
		cr_log_warn("this kernel does not take a seccomp filter (%s): skipping", strerror(errno));
		return;
	}
	train(dir, "pool", flags);
	const char *said = "warning: io_uring cannot be set up here";
	const char *warn = strstr(out, said);
	cr_expect(warn && !strstr(warn + strlen(said), "io_uring cannot be set up") &&
			  strstr(out, "--security-opt seccomp=PROFILE"),
		  "%s", out);
	expect_same_run(dir, "mem", "pool", "offload through the thread pool");
}

/* Resume run's step-3 checkpoint in memory to step 6: it must equal the
 * in-memory run "mem" there. */
static void resume_in_memory(const char *dir, const char *run, const char *what)
{
	int rc = cu_run(out, sizeof out,
			"%s train --resume %s/%s/step-000003 --out %s/%s-resumed --place auto", cu_bin(),
			dir, run, dir, run);
	cr_assert_eq(rc, 0, "%s: resume failed: %s", what, out);
	char a[512], b[512];
	snprintf(a, sizeof a, "%s/mem/step-000006", dir);
	snprintf(b, sizeof b, "%s/%s-resumed/step-000006", dir, run);
	cu_expect_same_state(a, b, what);
}

/* In-memory checkpoint -> offloaded run, and offloaded checkpoint -> in-memory
 * run: both continue bit-identically. */
Test(offload, resume_bit_identical, .timeout = 300)
{
	char dir[256], flags[1024];
	cu_tmpdir(dir, sizeof dir, "offres");
	cu_setup_run(dir, "");
	train(dir, "mem", "");
	snprintf(flags, sizeof flags, "--place weights=disk,gradients=host,optimizer=disk --offload-dir %s",
		 dir);
	train(dir, "disk", flags);
	int rc = cu_run(out, sizeof out, "%s train --resume %s/mem/step-000003 --out %s/to-disk %s",
			cu_bin(), dir, dir, flags);
	cr_assert_eq(rc, 0, "resume into offload failed: %s", out);
	char a[512], b[512];
	snprintf(a, sizeof a, "%s/mem/step-000006", dir);
	snprintf(b, sizeof b, "%s/to-disk/step-000006", dir);
	cu_expect_same_state(a, b, "in-memory checkpoint resumed offloaded");
	resume_in_memory(dir, "disk", "offloaded checkpoint resumed in memory");
	/* --offload-dir '' clears the saved directories: the resumed run
	 * records none (it kept them) */
	rc = cu_run(out, sizeof out,
		    "%s train --resume %s/disk/step-000003 --out %s/cleared --place auto --offload-dir '' "
		    "--steps 4 && grep -E '\"offload-dir\":[[:space:]]*\"\",' %s/cleared/step-000004/trainer.json",
		    cu_bin(), dir, dir, dir);
	cr_expect_eq(rc, 0, "--offload-dir '' did not clear the saved directory: %s", out);
	/* without --place auto the saved placement still asks for the disk:
	 * said as the run's own, with the way out (the hint alone said to give
	 * a directory); a --place given now is not called the saved one */
	rc = cu_run(out, sizeof out, "%s train --resume %s/disk/step-000003 --out %s/c2 --offload-dir '' "
			"--steps 4", cu_bin(), dir, dir);
	cr_expect(rc == 2 && strstr(out, "a resumed run keeps the --place it was started with (here: "
					 "weights=disk,gradients=host,optimizer=disk); --place auto lets the "
					 "planner choose"),
		  "%s", out);
	rc = cu_run(out, sizeof out, "%s train --resume %s/disk/step-000003 --out %s/c3 --offload-dir '' "
			"--place weights=disk --steps 4", cu_bin(), dir, dir);
	cr_expect(rc == 2 && strstr(out, "needs a disk tier") && !strstr(out, "a resumed run keeps the --place"),
		  "%s", out);
	/* plan --resume alike (it called a --place given now the saved one) */
	rc = cu_run(out, sizeof out, "%s plan --resume %s/disk/step-000003 --offload-dir '' "
			"--place weights=disk", cu_bin(), dir);
	cr_expect(rc == 2 && strstr(out, "needs a disk tier") && !strstr(out, "a resumed run keeps the --place"),
		  "%s", out);
	rc = cu_run(out, sizeof out, "%s plan --resume %s/disk/step-000003 --offload-dir ''", cu_bin(), dir);
	cr_expect(rc == 2 && strstr(out, "a resumed run keeps the --place it was started with"), "%s", out);
}

/* Lazy asynchronous checkpoints: with the capture slowed down (a slow disk),
 * an offloaded run goes on training while its checkpoint is written, and the
 * checkpoint still holds exactly the state of its step. */
Test(offload, checkpoint_written_while_training, .timeout = 300)
{
	char dir[256], flags[1024];
	cu_tmpdir(dir, sizeof dir, "offck");
	cu_setup_run(dir, "");
	train(dir, "mem", "");
	snprintf(flags, sizeof flags,
		 "--place weights=disk,gradients=disk,optimizer=disk --offload-dir %s --log-interval 1",
		 dir);
	int rc = cu_run(out, sizeof out,
			"STRATA_FAULT_SLOW_CKPT=1500 %s train --model %s/init --data %s/data --out %s/slow %s %s",
			cu_bin(), dir, dir, dir, RUN, flags);
	cr_assert_eq(rc, 0, "slow-checkpoint run failed: %s", out);
	const char *step4 = strstr(out, "step 4/6"), *saved3 = strstr(out, "saved checkpoint");
	cr_assert(step4 && saved3, "log lacks step 4 or the checkpoint: %s", out);
	cr_expect(step4 < saved3, "training did not go on while step 3's checkpoint was written: %s",
		  out);
	cr_expect(strstr(out, "training paused"), "the checkpoint does not report its pause: %s", out);
	expect_same_run(dir, "mem", "slow", "checkpoint written while training");
	/* and it resumes like any other */
	resume_in_memory(dir, "slow", "resumed from a lazily written checkpoint");
}

/* --trace: a Chrome/Perfetto JSON timeline with a span per unit pass on the
 * compute track, per transfer on the disk track and per update on the
 * optimizer track, for the first --trace-steps steps only. */
Test(offload, trace_of_every_queue, .timeout = 120)
{
	char dir[256], flags[1024];
	cu_tmpdir(dir, sizeof dir, "offtrace");
	cu_setup_run(dir, "");
	snprintf(flags, sizeof flags,
		 "--place weights=disk,gradients=disk,optimizer=disk --offload-dir %s --steps 3 "
		 "--eval-interval 0 --trace %s/trace.json --trace-steps 2", dir, dir);
	train(dir, "traced", flags);
	char path[512];
	snprintf(path, sizeof path, "%s/trace.json", dir);
	cJSON *root = tu_read_json(path);
	int per_track[ST_TRACK__COUNT] = {0}, fwd_layer = 0, bwd_layer = 0, updates = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents"))
	{
		if (strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, "X"))
			continue;
		int tid = (int)cJSON_GetObjectItem(e, "tid")->valuedouble;
		cr_assert(tid >= 0 && tid < ST_TRACK__COUNT);
		per_track[tid]++;
		cr_expect_geq(cJSON_GetObjectItem(e, "dur")->valuedouble, 0.0);
		const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
		fwd_layer += !strncmp(name, "fwd layer", 9);
		bwd_layer += !strncmp(name, "bwd layer", 9);
		updates += !strncmp(name, "update u", 8);
	}
	/* 2 layers x 2 micro-batches (RUN's --grad-accum 2) x 2 traced steps */
	cr_expect_eq(fwd_layer, 8, "forward layer spans: %d", fwd_layer);
	cr_expect_eq(bwd_layer, 8, "backward layer spans: %d", bwd_layer);
	cr_expect_gt(per_track[ST_TRACK_DISK], 0, "no disk spans");
	cr_expect_gt(updates, 0, "no update spans");
	cJSON_Delete(root);
}

static void expect_fail(const char *what, const char *needle, int rc);

/* strata plan: the plan training would use, printed without training, and a
 * prediction that moves the way it should with the profile: a slow disk
 * bounds an offloaded step, a fast one leaves it to compute. */
Test(offload, plan_without_training, .timeout = 120)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "plan");
	cu_setup_run(dir, "");
	make_deep(dir, "");
	const char *prof = "{\"matmul_gflops\": 100, \"copy_gbs\": 20, \"adamw_mparams\": 1000, "
			   "\"disk_read_gbs\": %s, \"disk_write_gbs\": %s}";
	char p1[256], p2[256], cmd[4096];
	snprintf(p1, sizeof p1, prof, "0.001", "0.001");
	snprintf(p2, sizeof p2, prof, "1000", "1000");
	const char *flags = "--micro-batch 4 --seq-len 32 --place weights=disk,gradients=disk,optimizer=disk";
	for (int k = 0; k < 2; k++) {
		snprintf(cmd, sizeof cmd, "echo '%s' > %s/prof%d.json && %s plan --model %s/deep %s "
			 "--offload-dir %s --profile %s/prof%d.json", k ? p2 : p1, dir, k, cu_bin(), dir,
			 flags, dir, dir, k);
		int rc = cu_run(out, sizeof out, "%s", cmd);
		cr_assert_eq(rc, 0, "plan failed: %s", out);
		cr_expect(strstr(out, "weights") && strstr(out, "tier total") && strstr(out, "predicted step"),
			  "no plan table: %s", out);
		cr_expect(strstr(out, k ? "busiest queue compute" : "busiest queue disk"),
			  "a %s disk does not move the bound: %s", k ? "fast" : "slow", out);
	}
	/* nothing was trained or written but the profile */
	cr_expect_neq(cu_run(NULL, 0, "ls %s/*/step-* 2>/dev/null | grep -q .", dir), 0);
	int rc = cu_run(out, sizeof out, "%s plan --model %s/deep --device-mem 64K --profile %s/prof0.json",
			cu_bin(), dir, dir);
	expect_fail("plan over budget", "device budget", rc);
	/* a --prefetch deeper than the units ahead of the first is cut to them,
	 * said (the 2-layer model has 4 units; it planned "prefetch 10 units") */
	rc = cu_run(out, sizeof out, "%s plan --model %s/init %s --offload-dir %s --profile "
			"%s/prof1.json --prefetch 10",
		    cu_bin(), dir, flags, dir, dir);
	cr_expect(rc == 0 && strstr(out, "--prefetch 10 is more than the 3 units ahead of the "
					 "model's first (it has 4): using 3") &&
			  strstr(out, "prefetch 3 units") && !strstr(out, "prefetch 10 units"),
		  "%s", out);
	/* where nothing streams the depth is moot: not said (it was) */
	rc = cu_run(out, sizeof out, "%s plan --model %s/init --profile %s/prof1.json --prefetch 10",
		    cu_bin(), dir, dir);
	cr_expect(rc == 0 && strstr(out, "nothing moves") && !strstr(out, "--prefetch 10 is more"),
		  "%s", out);
	/* an empty value is auto, as for --device-mem and --place: "--recompute
	 * ''" and "--device-updates ''" were refused, and "--activations ''"
	 * conflicted with a --recompute given beside it */
	const char *empties[] = {"--recompute ''", "--device-updates ''", "--recompute 1 --activations ''"};
	for (int i = 0; i < 3; i++) {
		rc = cu_run(out, sizeof out, "%s plan --model %s/deep --profile %s/prof1.json %s", cu_bin(),
			    dir, dir, empties[i]);
		cr_expect(rc == 0 && strstr(out, i == 2 ? "1 recompute" : "tier total"), "%s: %s", empties[i], out);
	}
}

/* Per-layer GaLore's gradients (the layers' shared slab and the embedding's
 * and head's own) count in the plan: over a range of device budgets, train
 * runs wherever plan says the run fits, and both refuse the rest up front.
 * (The plan counted no gradients, and train failed at setup, past the
 * budget, where plan had said everything fits.) */
Test(offload, galore_per_layer_gradients_planned, .timeout = 300)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "plgrad");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out, "%s init --config tiny --out %s/tiny", cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	const char *flags = "--micro-batch 2 --seq-len 32 --optimizer galore-adamw --galore-rank 16 "
			    "--host-mem 40M";
	int fits = 0, refused = 0;
	for (int mib = 18; mib <= 24; mib++) {
		rc = cu_run(out, sizeof out, "mkdir -p %s/off && %s plan --model %s/tiny %s "
				"--offload-dir %s/off --device-mem %dM",
			    dir, cu_bin(), dir, flags, dir, mib);
		const int plan_ok = rc == 0;
		cr_expect(!plan_ok || strstr(out, "gradients         3.5 MiB"),
			  "%d MiB: the plan counts no gradients: %s", mib, out);
		rc = cu_run(out, sizeof out, "%s train --model %s/tiny --data %s/data --out %s/r%d %s "
				"--offload-dir %s/off --device-mem %dM --steps 1 --eval-interval 0",
			    cu_bin(), dir, dir, dir, mib, flags, dir, mib);
		cr_expect_eq(rc == 0, plan_ok, "%d MiB: plan %s, train %s: %s", mib,
			     plan_ok ? "fits" : "refused", rc == 0 ? "ran" : "failed", out);
		cr_expect(rc == 0 || (strstr(out, "error: ") && !strstr(out, "exceeded allocating")),
			  "%d MiB: not refused up front: %s", mib, out);
		fits += plan_ok;
		refused += !plan_ok;
	}
	cr_expect(fits > 0 && refused > 0, "the budgets did not straddle the limit (%d fit)", fits);
}

/* Per-layer GaLore's low-rank accumulators (every layer's, held until the
 * step's norm is known) count in the host budget: the plan shows them, in
 * the table and the JSON, at their size (per layer, rank x the larger side
 * of each of the 7 matrices, and the 2 norm gains), a host budget they do
 * not fit is refused naming them by plan and train alike, and without
 * per-layer updates there are none. GaLore's projection scratch counts
 * there too, with or without per-layer updates. */
Test(offload, galore_per_layer_accumulators_planned, .timeout = 120)
{
	char dir[256], path[512];
	cu_tmpdir(dir, sizeof dir, "placc");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out, "%s init --config tiny --out %s/tiny", cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	/* tiny: 4 layers, hidden 256, MLP 688; rank 16. With the default gap
	 * (200) no two of its 28 matrices share a refresh phase: the backups
	 * hold one projector, 16 x 256 floats */
	const double acc = 4.0 * ((4 * 256 + 3 * 688) * 16 + 2 * 256) * 4 + 16 * 256 * 4;
	const char *flags = "--micro-batch 2 --seq-len 32 --optimizer galore-adamw --galore-rank 16 "
			    "--device-mem 64M";
	rc = cu_run(out, sizeof out, "%s plan --model %s/tiny %s --json 2>/dev/null >%s/plan.json",
		    cu_bin(), dir, flags, dir);
	cr_assert_eq(rc, 0, "%s", out);
	snprintf(path, sizeof path, "%s/plan.json", dir);
	cJSON *j = tu_read_json(path);
	const cJSON *slabs = cJSON_GetObjectItemCaseSensitive(j, "slabs");
	cr_expect_eq(jnum(slabs, "accumulators", "host"), acc, "accumulators %.0f B, want %.0f",
		     jnum(slabs, "accumulators", "host"), acc);
	/* and GaLore's projection scratch (its size against what is allocated:
	 * test_galore) */
	const double scratch = jnum(slabs, "scratch", "host");
	cr_expect_gt(scratch, 0, "no scratch in the plan");
	cr_expect_eq(jnum(cJSON_GetObjectItemCaseSensitive(j, "tiers"), "bytes", "host"),
		     acc + scratch + jnum(slabs, "optimizer", "host"),
		     "the host total leaves them out");
	cJSON_Delete(j);
	rc = cu_run(out, sizeof out, "%s plan --model %s/tiny %s", cu_bin(), dir, flags);
	char b[32], line[128];
	snprintf(line, sizeof line, "accumulators          0 B %12s          0 B",
		 fmt_bytes(b, sizeof b, acc));
	cr_expect(rc == 0 && strstr(out, line), "the table lacks '%s': %s", line, out);
	snprintf(line, sizeof line, "scratch               0 B %12s          0 B",
		 fmt_bytes(b, sizeof b, scratch));
	cr_expect(rc == 0 && strstr(out, line), "the table lacks '%s': %s", line, out);
	/* a host budget below them: refused up front, by plan and by train */
	for (int train = 0; train < 2; train++) {
		if (train)
			rc = cu_run(out, sizeof out, "%s train --model %s/tiny --data %s/data --out %s/r "
					"%s --host-mem 500K --steps 1", cu_bin(), dir, dir, dir, flags);
		else
			rc = cu_run(out, sizeof out, "%s plan --model %s/tiny %s --host-mem 500K", cu_bin(),
				    dir, flags);
		cr_expect(rc != 0 && strstr(out, "796.0 KiB of per-layer GaLore's gradient accumulators "
						 "and projector backups") &&
				  strstr(out, "lower --galore-rank"),
			  "%s: the accumulators are not named: %s", train ? "train" : "plan", out);
	}
	/* every gradient kept: no accumulators, the scratch still (it was
	 * outside every budget: an exact SVD's for a 2048 x 5632 matrix took a
	 * run 61 MiB past its budgets) */
	rc = cu_run(out, sizeof out, "%s plan --model %s/tiny %s --galore-per-layer false", cu_bin(),
		    dir, flags);
	cr_expect(rc == 0 && !strstr(out, "accumulators") && strstr(out, line), "%s", out);
	/* without GaLore, no scratch */
	rc = cu_run(out, sizeof out, "%s plan --model %s/tiny --micro-batch 2 --seq-len 32", cu_bin(),
		    dir);
	cr_expect(rc == 0 && !strstr(out, "scratch"), "%s", out);
	/* the exact SVD's scratch (2.3 MiB here): a host budget holding all
	 * the rest but half of it is refused by plan and train, naming it; one
	 * below the scratch and the accumulators points to the randomized
	 * projector; the whole of it runs */
	const char *svd = "--micro-batch 2 --seq-len 32 --optimizer galore-adamw --galore-rank 16 "
			  "--galore-proj svd --device-mem 64M";
	rc = cu_run(out, sizeof out, "%s plan --model %s/tiny %s --json 2>/dev/null >%s/svd.json",
		    cu_bin(), dir, svd, dir);
	cr_assert_eq(rc, 0, "%s", out);
	snprintf(path, sizeof path, "%s/svd.json", dir);
	j = tu_read_json(path);
	const double svd_scratch = jnum(cJSON_GetObjectItemCaseSensitive(j, "slabs"), "scratch", "host");
	const double svd_host = jnum(cJSON_GetObjectItemCaseSensitive(j, "tiers"), "bytes", "host");
	cJSON_Delete(j);
	cr_expect_gt(svd_scratch, 1048576, "the exact SVD's scratch: %.0f B", svd_scratch);
	const size_t h_part = (size_t)(svd_host - svd_scratch / 2), h_all = (size_t)svd_host;
	for (int train = 0; train < 2; train++) {
		if (train)
			rc = cu_run(out, sizeof out, "%s train --model %s/tiny --data %s/data --out %s/s "
					"%s --host-mem %zu --steps 1", cu_bin(), dir, dir, dir, svd, h_part);
		else
			rc = cu_run(out, sizeof out, "%s plan --model %s/tiny %s --host-mem %zu", cu_bin(), dir,
				    svd, h_part);
		cr_expect(rc != 0 && strstr(out, "of GaLore's projection scratch"),
			  "%s: the scratch is not named: %s", train ? "train" : "plan", out);
	}
	rc = cu_run(out, sizeof out, "%s plan --model %s/tiny %s --host-mem %zu", cu_bin(), dir, svd,
		    (size_t)(acc + svd_scratch / 2));
	cr_expect(rc != 0 && strstr(out, "--galore-proj randomized"), "%s", out);
	rc = cu_run(out, sizeof out, "%s train --model %s/tiny --data %s/data --out %s/s %s "
			"--host-mem %zu --steps 1 --eval-tokens 64",
		    cu_bin(), dir, dir, dir, svd, h_all);
	cr_expect_eq(rc, 0, "the budget with the scratch: %s", out);
	snprintf(line, sizeof line, "  scratch      %s on host (GaLore's projection scratch)",
		 fmt_bytes(b, sizeof b, svd_scratch));
	cr_expect(strstr(out, line), "train's memory plan lacks '%s': %s", line, out);
	/* train counts them in the host tier as the plan does, and what the
	 * host budget leaves (3 MiB less the plan's host total) bounds the
	 * evaluation's groups of residual streams (64 KiB a micro-batch of
	 * 2 x 32 x 256 floats, or more). They were left out: the tier said
	 * 2.0 MiB used, and groups of 15 took about 1 MiB beside the 780 KiB. */
	const char *tight = "--micro-batch 2 --seq-len 32 --optimizer galore-adamw --galore-rank 16 "
			    "--device-mem 24M --host-mem 3M --place weights=disk --eval-tokens 0";
	rc = cu_run(out, sizeof out, "mkdir -p %s/off && %s plan --model %s/tiny %s --offload-dir %s/off "
			"--json 2>/dev/null >%s/tight.json",
		    dir, cu_bin(), dir, tight, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	snprintf(path, sizeof path, "%s/tight.json", dir);
	j = tu_read_json(path);
	const double host = jnum(cJSON_GetObjectItemCaseSensitive(j, "tiers"), "bytes", "host");
	cJSON_Delete(j);
	rc = cu_run(out, sizeof out, "%s train --model %s/tiny --data %s/data --out %s/tight %s "
			"--offload-dir %s/off --steps 2 --eval-interval 1",
		    cu_bin(), dir, dir, dir, tight, dir);
	cr_assert_eq(rc, 0, "%s", out);
	snprintf(line, sizeof line, "host   tier  %s used of 3.0 MiB", fmt_bytes(b, sizeof b, host));
	cr_expect(strstr(out, line), "train's host tier is not the plan's ('%s'): %s", line, out);
	snprintf(line, sizeof line, "  accumulators %s on host", fmt_bytes(b, sizeof b, acc));
	cr_expect(strstr(out, line), "train's memory plan lacks '%s': %s", line, out);
	const char *g = strstr(out, "once per group of ");
	const long group = g ? strtol(g + strlen("once per group of "), NULL, 10) : 1;
	cr_expect_leq((double)group * 65536, 3.0 * 1048576 - host,
		      "groups of %ld micro-batches overrun the host budget", group);
}

static void expect_fail(const char *what, const char *needle, int rc)
{
	cr_expect_neq(rc, 0, "%s: exit status 0", what);
	cr_expect(strstr(out, needle), "%s: message lacks '%s': %s", what, needle, out);
}

Test(offload, directory_faults, .timeout = 300)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "offfault");
	cu_setup_run(dir, "");
	train(dir, "run", "--steps 3");
	const char *ckpt_files = "run/step-000003/model.safetensors run/step-000003/optimizer.safetensors";
	int rc = cu_run(NULL, 0, "cd %s && sha256sum %s > sums", dir, ckpt_files);
	cr_assert_eq(rc, 0);
	/* prefetch 2: with deeper prefetch every slab of this 2-layer model gets
	 * its own staging slot and is never read back, so no block to corrupt */
	const char *all_disk = "--place weights=disk,gradients=disk,optimizer=disk --prefetch 2";

	rc = cu_run(out, sizeof out, "%s train --resume %s/run --steps 6 %s --offload-dir %s/nope",
		    cu_bin(), dir, all_disk, dir);
	expect_fail("missing offload dir", "does not exist", rc);
	/* given on the command line: no note of the run's own directories */
	cr_expect(!strstr(out, "a resumed run keeps"), "%s", out);
	/* the run's own directory, gone since: the note says where it came from */
	rc = cu_run(out, sizeof out,
		    "mkdir %s/gone && %s train --resume %s/run --out %s/offrun --steps 4 %s --offload-dir "
		    "%s/gone --progress none && rm -r %s/gone && %s train --resume %s/offrun --steps 5",
		    dir, cu_bin(), dir, dir, all_disk, dir, dir, cu_bin(), dir);
	expect_fail("the run's own offload dir, removed", "does not exist", rc);
	cr_expect(strstr(out, "a resumed run keeps the offload directories it was started with "
			      "(here: ") &&
			  strstr(out, "--offload-dir '' drops them"),
		  "a resume's refused directory without the note: %s", out);
	/* plan refuses what train refuses (it said the plan worked), and a
	 * directory not needed is checked too (a typo showed only on a later
	 * resume with smaller budgets) */
	rc = cu_run(out, sizeof out, "%s plan --resume %s/run %s --offload-dir %s/nope", cu_bin(), dir,
		    all_disk, dir);
	expect_fail("plan: missing offload dir", "does not exist", rc);
	rc = cu_run(out, sizeof out, "%s plan --resume %s/run %s --offload-dir %s --io-depth 5000",
		    cu_bin(), dir, all_disk, dir);
	expect_fail("plan: --io-depth 5000", "--io-depth 5000 must be between 1 and 4096", rc);
	rc = cu_run(out, sizeof out, "%s train --resume %s/run --steps 6 --place auto --offload-dir %s/nope",
		    cu_bin(), dir, dir);
	expect_fail("an unneeded offload dir that does not exist", "does not exist", rc);

	rc = cu_run(out, sizeof out, "%s train --resume %s/run --steps 6 %s", cu_bin(), dir, all_disk);
	expect_fail("no offload dir", "--offload-dir", rc);

	rc = cu_run(out, sizeof out, "%s train --resume %s/run --steps 6 %s --offload-dir %s,%s/./",
		    cu_bin(), dir, all_disk, dir, dir);
	expect_fail("one directory twice", "are the same directory", rc);

	rc = cu_run(out, sizeof out, "%s train --resume %s/run --steps 6 --device-mem 64K --host-mem 64K",
		    cu_bin(), dir);
	expect_fail("budgets too small", "device budget", rc);

	char mnt[256];
	if (mount_small(mnt, sizeof mnt, "size=64k")) {
		rc = cu_run(out, sizeof out, "%s train --resume %s/run --steps 6 %s --offload-dir %s",
			    cu_bin(), dir, all_disk, mnt);
		expect_fail("tiny filesystem", mnt, rc);
		cr_expect(strstr(out, "needs") || strstr(out, "no room"),
			  "tiny filesystem: the message does not say what is needed: %s", out);
		rc = cu_run(out, sizeof out, "%s plan --resume %s/run %s --offload-dir %s", cu_bin(), dir,
			    all_disk, mnt);
		expect_fail("plan: tiny filesystem", "free but needs", rc);
		umount(mnt);
	}
	/* two directories on one 9 MiB file system, 6 MiB each: each alone fits,
	 * together they do not, and plan adds them up as train's reservations
	 * do (it checked each against the same free space) */
	if (mount_small(mnt, sizeof mnt, "size=9m")) {
		rc = cu_run(out, sizeof out,
			    "mkdir %s/a %s/b && %s plan --resume %s/run %s --offload-dir %s/a --offload-dir %s/b",
			    mnt, mnt, cu_bin(), dir, all_disk, mnt, mnt);
		expect_fail("plan: two directories sharing a small filesystem", "/a has 9.0 MiB free but needs "
			    "12.0 MiB", rc);
		rc = cu_run(out, sizeof out, "%s train --resume %s/run --steps 6 %s --offload-dir %s/a "
				"--offload-dir %s/b",
			    cu_bin(), dir, all_disk, mnt, mnt);
		expect_fail("train: two directories sharing a small filesystem", "free but needs", rc);
		umount(mnt);
	}
	/* no cached profile: the planner measures the disk in the first
	 * directory, with less than its usual 256 MiB where there is less
	 * room (a 100 MiB file system: the run's own state fits), and says what
	 * it needs where even its least does not fit */
	const char *sizes[2] = {"size=100m", "size=20m"};
	for (int k = 0; k < 2; k++) {
		if (!mount_small(mnt, sizeof mnt, sizes[k]))
			continue;
		rc = cu_run(out, sizeof out,
			    "STRATA_PROFILE= HOME=%s/home%d %s train --resume %s/run --steps 4 --out %s/p%d "
			    "%s --offload-dir %s",
			    dir, k, cu_bin(), dir, dir, k, all_disk, mnt);
		if (k == 0)
			cr_expect_eq(rc, 0, "a 100 MiB offload directory: %s", out);
		else
			expect_fail("profiling a 20 MiB directory",
				    "measuring the disk for the planner needs 32 MiB in", rc);
		umount(mnt);
	}
	/* the offload file has no name (O_TMPFILE): one a killed run left under
	 * the pid this run gets (1, in a PID namespace) is no obstacle (it was
	 * "not writable: File exists" for every later run with that pid) */
	if (cu_run(NULL, 0, "unshare -fp --mount-proc true") == 0) {
		rc = cu_run(out, sizeof out,
			    "mkdir -p %s/pid && touch %s/pid/.strata-offload-1.bin && "
			    "unshare -fp --mount-proc %s train --resume %s/run --out %s/pidrun --steps 4 %s "
			    "--offload-dir %s/pid",
			    dir, dir, cu_bin(), dir, dir, all_disk, dir);
		cr_expect_eq(rc, 0, "a stale offload file's name blocked the run: %s", out);
	} else {
		cr_log_warn("unshare -p is not allowed here: the pid-collision case is not run");
	}
	if (mount_small(mnt, sizeof mnt, "size=256m") &&
	    mount(NULL, mnt, NULL, MS_REMOUNT | MS_RDONLY, NULL) == 0) {
		rc = cu_run(out, sizeof out, "%s train --resume %s/run --steps 6 %s --offload-dir %s",
			    cu_bin(), dir, all_disk, mnt);
		expect_fail("read-only offload dir", "not writable", rc);
		umount(mnt);
	}

	/* a block corrupted on disk mid-run (the hook damages the 2nd block read
	 * just before reading it): detected, reported, the run stops with the
	 * earlier checkpoint intact, and says to resume from it */
	rc = cu_run(out, sizeof out,
		    "STRATA_FAULT_CORRUPT_OFFLOAD=2 %s train --resume %s/run --steps 6 %s --offload-dir %s",
		    cu_bin(), dir, all_disk, dir);
	expect_fail("corrupted block", "checksum mismatch", rc);
	cr_expect(strstr(out, "the run's last checkpoint is ") && strstr(out, "/run/step-000003: `strata "
									  "train --resume "),
		  "a failed run did not say where it can go on from: %s", out);
	rc = cu_run(out, sizeof out, "cd %s && sha256sum -c sums && readlink run/latest", dir);
	cr_expect_eq(rc, 0, "the checkpoint changed after the faults: %s", out);
	cr_expect(strstr(out, "step-000003"), "latest moved: %s", out);
	rc = cu_run(out, sizeof out, "%s eval --model %s/run --data %s/data", cu_bin(), dir, dir);
	cr_expect_eq(rc, 0, "the checkpoint no longer loads: %s", out);
}

/* plan and train check offload directories alike, writability first: a
 * directory on /proc cannot hold files (plan passed it, train said "not
 * writable: No such file or directory"), a small read-only tmpfs is
 * read-only (train said it had too little free space, hint "free space
 * there"), and a directory train creates (its --out) is not refused by plan. */
Test(offload, directory_checks_alike, .timeout = 120)
{
	char dir[256], mnt[256];
	cu_tmpdir(dir, sizeof dir, "dirchk");
	cu_setup_run(dir, "");
	const char *all_disk = "--micro-batch 2 --seq-len 32 --place weights=disk,gradients=disk,"
			       "optimizer=disk";
	char cmd[2][2048];
	for (int k = 0; k < 2; k++) {
		const char *where = k ? mnt : "/proc";
		if (k && !mount_small(mnt, sizeof mnt, "size=4m,ro"))
			break;
		snprintf(cmd[0], sizeof cmd[0], "%s plan --model %s/init %s --offload-dir %s", cu_bin(),
			 dir, all_disk, where);
		snprintf(cmd[1], sizeof cmd[1],
			 "%s train --model %s/init --data %s/data --out %s/r%d --steps 1 --progress none "
			 "%s --offload-dir %s",
			 cu_bin(), dir, dir, dir, k, all_disk, where);
		for (int c = 0; c < 2; c++) {
			const char *what = c ? "train" : "plan";
			int rc = cu_run(out, sizeof out, "%s", cmd[c]);
			cr_expect_neq(rc, 0, "%s, %s: accepted: %s", what, where, out);
			/* a fresh run's refusal says nothing of resumed runs */
			cr_expect(!strstr(out, "resumed run"), "%s, %s: %s", what, where, out);
			if (k == 0)
				cr_expect(strstr(out, "offload directory /proc cannot hold files: it is on a proc "
						      "file system") &&
						  strstr(out, "hint: give a directory on a disk's file system"),
					  "%s, /proc: %s", what, out);
			else
				cr_expect(strstr(out, "is not writable: Read-only file system") &&
						  !strstr(out, "free but needs") && !strstr(out, "free space there"),
					  "%s, a read-only tmpfs: %s", what, out);
		}
		if (k)
			umount(mnt);
	}
	/* --out X --offload-dir X, X not there yet: train makes X, and plan
	 * plans it (it said X does not exist); one below X train does not make */
	for (int k = 0; k < 2; k++) {
		int rc = cu_run(out, sizeof out, "%s plan --model %s/init %s --out %s/new/run --offload-dir %s/new%s",
				cu_bin(), dir, all_disk, dir, dir, k ? "" : "/run");
		cr_expect(rc == 0 && strstr(out, "tier total"), "plan, the run directory%s: %s",
			  k ? "'s parent" : "", out);
	}
	int rc = cu_run(out, sizeof out, "%s plan --model %s/init %s --out %s/new/run --offload-dir %s/new/run/off",
			cu_bin(), dir, all_disk, dir, dir);
	cr_expect(rc != 0 && strstr(out, "does not exist"), "plan, below the run directory: %s", out);
	rc = cu_run(out, sizeof out, "%s train --model %s/init --data %s/data --out %s/new/run --steps 1 "
		    "--progress none %s --offload-dir %s/new/run",
		    cu_bin(), dir, dir, dir, all_disk, dir);
	cr_expect(rc == 0, "train, the run directory as --offload-dir: %s", out);
}

/* A plan that puts nothing on disk needs no disk measurement: with no
 * cached profile and a full offload file system, a run whose state fits in
 * memory plans without the disk tier, warned, and trains (the measurement
 * refused it); one that needs the disk is still refused, saying why. */
Test(offload, full_offload_dir_unneeded, .timeout = 120)
{
	char dir[256], mnt[256];
	cu_tmpdir(dir, sizeof dir, "fullunneeded");
	cu_setup_run(dir, "");
	if (!mount_small(mnt, sizeof mnt, "size=8m"))
		return;
	int rc = cu_run(out, sizeof out, "dd if=/dev/zero of=%s/fill bs=1M count=8", mnt);
	/* a device budget below the state: a plan (so a profile) with the
	 * rest on the host */
	const char *fits = "--micro-batch 2 --seq-len 32 --device-mem 1300K";
	for (int c = 0; c < 2; c++) {
		if (c)
			rc = cu_run(out, sizeof out,
				    "STRATA_PROFILE=%s/prof%d.json %s train --model %s/init --data %s/data "
				    "--out %s/r --steps 1 --progress none %s --offload-dir %s",
				    dir, c, cu_bin(), dir, dir, dir, fits, mnt);
		else
			rc = cu_run(out, sizeof out,
				    "STRATA_PROFILE=%s/prof%d.json %s plan --model %s/init %s --offload-dir %s",
				    dir, c, cu_bin(), dir, fits, mnt);
		cr_expect(rc == 0 && strstr(out, "the disk could not be measured for the planner "
						 "(measuring the disk for the planner needs 32 MiB in") &&
				  strstr(out, "so it is planned with no disk tier") && !strstr(out, "error:"),
			  "%s: %s", c ? "train" : "plan", out);
	}
	cr_expect(strstr(out, "done: step 1"), "%s", out);
	rc = cu_run(out, sizeof out,
		    "STRATA_PROFILE=%s/prof2.json %s plan --model %s/init --micro-batch 2 --seq-len 32 "
		    "--place weights=disk --offload-dir %s",
		    dir, cu_bin(), dir, mnt);
	cr_expect(rc != 0 && strstr(out, "measuring the disk for the planner needs 32 MiB in"), "%s", out);
	umount(mnt);
}

/* An offload directory on the run directory's file system leaves room for
 * a checkpoint: on a 13 MiB tmpfs the 12 MiB of offload files fit, with a
 * 1.1 MiB checkpoint they do not, refused before training by train and plan
 * alike (the run trained, then failed at its first save with nothing
 * saved); with --out elsewhere the same directory trains. */
Test(offload, checkpoint_room_beside_offload, .timeout = 120)
{
	char dir[256], mnt[256];
	cu_tmpdir(dir, sizeof dir, "ckptroom");
	cu_setup_run(dir, "");
	if (!mount_small(mnt, sizeof mnt, "size=13m"))
		return;
	const char *all_disk = "--micro-batch 2 --seq-len 32 --place weights=disk,gradients=disk,"
			       "optimizer=disk";
	int rc = cu_run(out, sizeof out,
			"mkdir %s/off && %s train --model %s/init --data %s/data --out %s/run --steps 2 "
			"--progress none %s --offload-dir %s/off",
			mnt, cu_bin(), dir, dir, mnt, all_disk, mnt);
	cr_expect(rc != 0 && strstr(out, "is on the file system of the run directory") &&
			  strstr(out, "take the offload files (12.0 MiB) but not a checkpoint besides (1.1 MiB;") &&
			  strstr(out, "the run would train, then fail at its first save") &&
			  !strstr(out, "queues over"),
		  "%s", out);
	rc = cu_run(out, sizeof out, "%s plan --model %s/init %s --out %s/run2 --offload-dir %s/off",
		    cu_bin(), dir, all_disk, mnt, mnt);
	cr_expect(rc != 0 && strstr(out, "but not a checkpoint besides (1.1 MiB;"), "plan: %s", out);
	rc = cu_run(out, sizeof out,
		    "%s train --model %s/init --data %s/data --out %s/run --steps 2 --progress none %s "
		    "--offload-dir %s/off",
		    cu_bin(), dir, dir, dir, all_disk, mnt);
	cr_expect(rc == 0 && strstr(out, "done: step 2"), "--out on another file system: %s", out);
	umount(mnt);
}

/* A profile measured where it cannot be cached (a read-only file system,
 * a ~/.cache under a $HOME that is a file) is warned and used: train and
 * plan went on to refuse the run after measuring. */
Test(offload, profile_cache_unwritable, .timeout = 120)
{
	char dir[256], mnt[256];
	cu_tmpdir(dir, sizeof dir, "profro");
	cu_setup_run(dir, "");
	/* weights streamed from the host: a plan, so a profile, and no disk */
	const char *flags = "--micro-batch 2 --seq-len 32 --place weights=host";
	char env[2][600];
	int n = 0;
	snprintf(env[n++], sizeof env[0], "STRATA_PROFILE= HOME=%s/homefile", dir);
	cr_assert_eq(cu_run(out, sizeof out, "touch %s/homefile", dir), 0);
	if (mount_small(mnt, sizeof mnt, "size=1m,ro"))
		snprintf(env[n++], sizeof env[0], "STRATA_PROFILE=%s/profile.json", mnt);
	for (int i = 0; i < n; i++) {
		int rc = cu_run(out, sizeof out, "%s %s plan --model %s/init %s", env[i], cu_bin(), dir,
				flags);
		cr_expect(rc == 0 && strstr(out, "the measured profile could not be cached (") &&
				  strstr(out, "predicted step"),
			  "plan, %s: %s", env[i], out);
		rc = cu_run(out, sizeof out,
			    "%s %s train --model %s/init --data %s/data --out %s/r%d --steps 1 "
			    "--eval-interval 0 --progress none %s",
			    env[i], cu_bin(), dir, dir, dir, i, flags);
		cr_expect(rc == 0 && strstr(out, "the measured profile could not be cached (") &&
				  strstr(out, "done: step 1"),
			  "train, %s: %s", env[i], out);
		cr_expect(!strstr(out, "error:"), "train, %s: an error said: %s", env[i], out);
	}
	if (n == 2)
		umount(mnt);
}

Test(offload, peak_memory_within_budgets, .timeout = 600)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "offrss");
	cu_write_text(strcat(strcpy(out, dir), "/text.txt"), 300000, 3);
	int rc = cu_run(out, sizeof out,
			"%s prepare --input %s/text.txt --out %s/data && %s init --config llama-60m --out %s/init",
			cu_bin(), dir, dir, cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	/* the 60M preset (25M parameters with the byte vocabulary): fp32
	 * weights + gradients + AdamW state = 16 B/param = 400 MB, against
	 * 200 MB of budgets */
	const size_t dev = 120u << 20, host = 80u << 20;
	char cmd[2048];
	snprintf(cmd, sizeof cmd,
		 "%s train --model %s/init --data %s/data --out %s/run --micro-batch 1 --seq-len 64 "
		 "--steps 2 --eval-interval 0 --eval-tokens 64 --threads 2 --prefetch 1 "
		 "--device-mem %zu --host-mem %zu --offload-dir %s",
		 cu_bin(), dir, dir, dir, dev, host, dir);
	int status;
	size_t rss = cu_peak_rss(cmd, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "offloaded run failed: %s", cmd);
	cr_log_info("peak RSS %.1f MiB; budgets %.0f MiB + overhead allowance %.0f MiB",
		    rss / 1048576.0, (dev + host) / 1048576.0, RSS_OVERHEAD / 1048576.0);
	cr_expect_leq(rss, dev + host + RSS_OVERHEAD,
		      "peak RSS %.1f MiB exceeds the budgets (%.0f MiB) + %.0f MiB overhead",
		      rss / 1048576.0, (dev + host) / 1048576.0, RSS_OVERHEAD / 1048576.0);
	/* and the same run in memory needs far more: the budgets were binding */
	snprintf(cmd, sizeof cmd,
		 "%s train --model %s/init --data %s/data --out %s/mem --micro-batch 1 --seq-len 64 "
		 "--steps 2 --eval-interval 0 --eval-tokens 64 --threads 2",
		 cu_bin(), dir, dir, dir);
	size_t rss_mem = cu_peak_rss(cmd, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "in-memory run failed");
	cr_expect_gt(rss_mem, dev + host + RSS_OVERHEAD,
		     "the in-memory run (%.1f MiB) fits the budgets too: the test proves nothing",
		     rss_mem / 1048576.0);
	char a[512], b[512];
	snprintf(a, sizeof a, "%s/run/step-000002", dir);
	snprintf(b, sizeof b, "%s/mem/step-000002", dir);
	cu_expect_same_state(a, b, "60M offloaded vs in memory");

	/* per-layer GaLore (8-bit moments): its weights and state streamed, its
	 * accumulators (and 8.4 MiB of projection scratch) in the host
	 * budget. At rank 512 (every matrix at full rank) they take 96.5 MiB,
	 * more than the 64 MiB allowance, so a run that held them beside a
	 * full host budget would pass it; the evaluation over the whole
	 * val.bin sizes its groups from what the host budget leaves. In memory it takes about 355 MiB. */
	const size_t gdev = 72u << 20, ghost = 136u << 20;
	const char *galore = "--optimizer galore-adamw8bit --galore-rank 512 --micro-batch 1 "
			     "--seq-len 64 --steps 2 --eval-interval 0 --eval-tokens 0 --threads 2";
	snprintf(cmd, sizeof cmd,
		 "%s train --model %s/init --data %s/data --out %s/grun %s --prefetch 1 "
		 "--device-mem %zu --host-mem %zu --offload-dir %s",
		 cu_bin(), dir, dir, dir, galore, gdev, ghost, dir);
	rss = cu_peak_rss(cmd, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "offloaded GaLore run failed: %s", cmd);
	cr_log_info("per-layer GaLore: peak RSS %.1f MiB; budgets %.0f MiB", rss / 1048576.0,
		    (gdev + ghost) / 1048576.0);
	cr_expect_leq(rss, gdev + ghost + RSS_OVERHEAD,
		      "per-layer GaLore: peak RSS %.1f MiB exceeds the budgets (%.0f MiB) + %.0f MiB",
		      rss / 1048576.0, (gdev + ghost) / 1048576.0, RSS_OVERHEAD / 1048576.0);
	snprintf(cmd, sizeof cmd, "%s train --model %s/init --data %s/data --out %s/gmem %s",
		 cu_bin(), dir, dir, dir, galore);
	rss_mem = cu_peak_rss(cmd, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "in-memory GaLore run failed");
	cr_expect_gt(rss_mem, gdev + ghost + RSS_OVERHEAD,
		     "the in-memory GaLore run (%.1f MiB) fits the budgets too", rss_mem / 1048576.0);
	snprintf(a, sizeof a, "%s/grun/step-000002", dir);
	snprintf(b, sizeof b, "%s/gmem/step-000002", dir);
	cu_expect_same_state(a, b, "60M per-layer GaLore offloaded vs in memory");
}

/* A resume that converts optimizer state (AdamW's fp32 moments into
 * adamw8bit's codes) reads each moment through the file's mapping a chunk
 * at a time, dropping the chunk's pages: with 128 MiB embedding and head
 * tensors (vocabulary 131072, width 256) its peak resident set stays within
 * the budgets + 64 MiB. A whole tensor stayed mapped in until it was
 * converted: 996 MiB against 864 + 64 (found by a helper's audit). */
Test(offload, optimizer_conversion_within_budgets, .timeout = 300)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "convrss");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s init --config tiny --out %s/t >/dev/null && sed -e 's/\"vocab_size\":\t258/"
			"\"vocab_size\":\t131072/' -e 's/\"num_hidden_layers\":\t4/"
			"\"num_hidden_layers\":\t1/' %s/t/config.json > %s/v.json && "
			"%s init --config %s/v.json --out %s/v && %s train --model %s/v --data %s/data "
			"--out %s/r --steps 1 --micro-batch 1 --seq-len 32 --eval-interval 0 "
			"--eval-tokens 32 --threads 2",
			cu_bin(), dir, dir, dir, cu_bin(), dir, dir, cu_bin(), dir, dir, dir);
	cr_assert(rc == 0 && strstr(out, "vocab 131072"), "%s", out);
	const size_t dev = 540u << 20, host = 324u << 20;
	char cmd[2048];
	snprintf(cmd, sizeof cmd,
		 "%s train --resume %s/r/step-000001 --out %s/c --steps 2 --optimizer adamw8bit "
		 "--device-mem %zu --host-mem %zu --threads 2 --eval-tokens 32",
		 cu_bin(), dir, dir, dev, host);
	int status;
	const size_t rss = cu_peak_rss(cmd, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the converting resume failed: %s", cmd);
	cr_log_info("converting resume: peak RSS %.1f MiB; budgets %.0f MiB", rss / 1048576.0,
		    (dev + host) / 1048576.0);
	cr_expect_leq(rss, dev + host + RSS_OVERHEAD,
		      "the converting resume peaked at %.1f MiB, over the budgets (%.0f MiB) + %.0f",
		      rss / 1048576.0, (dev + host) / 1048576.0, RSS_OVERHEAD / 1048576.0);
}

/* eval and sample within budgets: a 40-layer model (121 MiB of fp32
 * weights) scored with 40 MiB of budgets, most of its weights on disk, gives
 * the loss it gives in memory, greedy sampling the same text, with a peak
 * resident set inside the budgets + RSS_OVERHEAD (the in-memory eval's is
 * above it); budgets that hold too little without a disk tier say so; the
 * offload files are gone after. */
Test(offload, eval_and_sample_within_budgets, .timeout = 600)
{
	char dir[256], a[512], b[512];
	cu_tmpdir(dir, sizeof dir, "fwdmem");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s init --config tiny --out %s/t && sed -i 's/\"num_hidden_layers\":\t4,/"
			"\"num_hidden_layers\":\t40,/' %s/t/config.json && %s init --config %s/t/config.json "
			"--out %s/big && mkdir %s/off",
			cu_bin(), dir, dir, cu_bin(), dir, dir, dir);
	cr_assert(rc == 0 && strstr(out, "40 layers"), "%s", out);
	const size_t dev = 32u << 20, host = 8u << 20;
	char mem[768], cmd[2048];
	snprintf(mem, sizeof mem, "--device-mem %zu --host-mem %zu --offload-dir %s/off", dev, host, dir);
	const char *eval = "{ %s eval --model %s/big --data %s/data --seq-len 64 --micro-batch 2 "
			   "--max-tokens 1024 --json --threads 2 %s; }";
	rc = cu_run(a, sizeof a, eval, cu_bin(), dir, dir, "2>/dev/null");
	cr_assert_eq(rc, 0, "%s", a);
	rc = cu_run(out, sizeof out, eval, cu_bin(), dir, dir, mem);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "on disk, streamed through"), "%s", out);
	rc = cu_run(b, sizeof b, eval, cu_bin(), dir, dir, strcat(strcpy(cmd, mem), " 2>/dev/null"));
	cr_expect_str_eq(a, b, "in memory %s, within budgets %s", a, b);

	const char *bare = "%s eval --model %s/big --data %s/data --seq-len 64 --micro-batch 2 "
			   "--max-tokens 1024 --threads 2 %s";
	snprintf(cmd, sizeof cmd, bare, cu_bin(), dir, dir, mem);
	int status;
	const size_t rss = cu_peak_rss(cmd, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", cmd);
	cr_expect_leq(rss, dev + host + RSS_OVERHEAD, "peak RSS %.1f MiB over the budgets %.0f MiB + %.0f",
		      rss / 1048576.0, (dev + host) / 1048576.0, RSS_OVERHEAD / 1048576.0);
	snprintf(cmd, sizeof cmd, bare, cu_bin(), dir, dir, "");
	const size_t rss_mem = cu_peak_rss(cmd, &status);
	cr_expect_gt(rss_mem, dev + host + RSS_OVERHEAD, "in memory %.1f MiB: the test proves nothing",
		     rss_mem / 1048576.0);

	/* past --context: the key/value cache refilled three times, streaming */
	const char *sample = "{ %s sample --model %s/big --prompt ab --tokens 30 --temperature 0 "
			     "--context 12 --threads 2 %s 2>/dev/null; }";
	rc = cu_run(a, sizeof a, sample, cu_bin(), dir, "");
	cr_assert_eq(rc, 0, "%s", a);
	rc = cu_run(b, sizeof b, sample, cu_bin(), dir, mem);
	cr_assert_eq(rc, 0, "%s", b);
	cr_expect(strlen(a) > 3 && !strcmp(a, b), "greedy text differs within budgets");

	/* a block damaged on disk (the hook corrupts the third one read) fails
	 * eval and sample, with no loss and no text from the stale bytes: both
	 * printed them and exited 0 */
	rc = cu_run(out, sizeof out, "STRATA_FAULT_CORRUPT_OFFLOAD=3 %s eval --model %s/big --data "
			"%s/data --seq-len 64 --micro-batch 2 --max-tokens 1024 --json --threads 2 %s",
		    cu_bin(), dir, dir, mem);
	cr_expect(rc != 0 && strstr(out, "checksum mismatch") && !strstr(out, "\"loss\""),
		  "eval of a damaged block: rc %d: %s", rc, out);
	rc = cu_run(b, sizeof b, "{ STRATA_FAULT_CORRUPT_OFFLOAD=3 %s sample --model %s/big --prompt ab "
			"--tokens 30 --temperature 0 --context 12 --threads 2 %s 2>%s/err; }",
		    cu_bin(), dir, mem, dir);
	cr_expect(rc != 0 && !strcmp(b, "ab"), "sample of a damaged block: rc %d: %s", rc, b);
	cr_expect_eq(cu_run(out, sizeof out, "grep -q 'checksum mismatch' %s/err", dir), 0,
		     "sample of a damaged block did not say why");
	rc = cu_run(out, sizeof out, "%s eval --model %s/big --data %s/data --seq-len 64 "
			"--micro-batch 2 --device-mem 32M --host-mem 8M", cu_bin(), dir, dir);
	/* named as weights (it said "state", which eval has none of) */
	cr_expect(rc != 0 && strstr(out, "give --offload-dir") &&
			  strstr(out, "of weights the device does not hold"),
		  "%s", out);
	rc = cu_run(out, sizeof out, "%s sample --model %s/big --prompt ab --device-mem 32M "
			"--host-mem 8M", cu_bin(), dir);
	cr_expect(rc != 0 && strstr(out, "of weights the device does not hold"), "%s", out);
	rc = cu_run(out, sizeof out, "ls -A %s/off | wc -l", dir);
	cr_expect(rc == 0 && atoi(out) == 0, "offload files left: %s", out);
}

/* eval's device budget, from 1200 to 1600 KiB in 8 KiB steps (the test
 * model's weights and activations at 2 x 64 need about 1.3 MiB): each either
 * runs or is refused by the placement saying what the budget cannot hold,
 * never accepted by the placement and then failing in the store (the
 * executor's recompute sink was not counted: "device tier budget exceeded
 * allocating 4.4 MiB for the activations of unit 5"); and sample's around
 * its decoder's need. */
Test(offload, eval_device_budgets_placed_or_refused, .timeout = 300)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "fwdbudget");
	cu_setup_run(dir, "");
	int ran = 0, refused = 0;
	for (long kib = 1200; kib <= 1600; kib += 8) {
		int rc = cu_run(out, sizeof out, "%s eval --model %s/init --data %s/data --micro-batch 2 "
				"--seq-len 64 --max-tokens 256 --threads 2 --host-mem 100M --device-mem %ldK",
				cu_bin(), dir, dir, kib);
		if (rc == 0) {
			ran++;
			continue;
		}
		refused++;
		cr_expect(strstr(out, "the device budget") && !strstr(out, "tier budget exceeded"),
			  "--device-mem %ldK: %s", kib, out);
	}
	cr_expect(ran > 0 && refused > 0, "ran %d, refused %d: the range missed the edge", ran, refused);
	/* sample's key/value cache and scratch, counted as the decoder
	 * allocates them (the edge is near 565 KiB), its refusals naming them
	 * and --context */
	ran = refused = 0;
	for (long kib = 540; kib <= 590; kib += 1) {
		int rc = cu_run(out, sizeof out, "%s sample --model %s/init --prompt ab --tokens 100 "
				"--context 128 --temperature 0 --threads 2 --host-mem 100M --device-mem %ldK",
				cu_bin(), dir, kib);
		if (rc == 0) {
			ran++;
			continue;
		}
		refused++;
		cr_expect(strstr(out, "the device budget") && strstr(out, "key/value cache") &&
				  !strstr(out, "tier budget exceeded"),
			  "sample --device-mem %ldK: %s", kib, out);
	}
	cr_expect(ran > 0 && refused > 0, "sample: ran %d, refused %d: the range missed the edge", ran,
		  refused);
	int rc = cu_run(out, sizeof out, "%s sample --model %s/init --prompt ab --context 128 "
			"--device-mem 100K", cu_bin(), dir);
	cr_expect(rc != 0 && strstr(out, "lower --context"), "%s", out);
}

/* The decoder with its weights streamed (most on disk, the embedding staged)
 * gives the next-token scores it gives in memory, bit for bit, on a tied
 * model, as a prompt is read in one pass and then token by token: the head
 * reads the embedding, which the pass holds from the embed step to the head
 * (released early, its staging slot would be reused by a layer's weights
 * and the head would score with them). */
Test(offload, decoder_streamed_equals_in_memory, .timeout = 300)
{
	char dir[256], off[300];
	cu_tmpdir(dir, sizeof dir, "decstream");
	snprintf(off, sizeof off, "%s/off", dir);
	cr_assert_eq(mkdir(off, 0755), 0);
	struct st_config cfg;
	cr_assert_eq(config_preset(&cfg, "tiny"), 0);
	cfg.n_layers = 6;
	cfg.vocab_size = 2000;
	cfg.tied = 1;
	cfg.init_std = 0.2f;
	const int T = 120;
	struct st_session mem, st;
	cr_assert_eq(session_create(&mem, ops_cpu(), &cfg, 0), 0);
	session_init_random(&mem, 9);
	cr_assert_eq(session_save_model(&mem, dir), 0);
	cr_assert_eq(session_decoder(&mem, T), 0);
	struct st_forward_mem fm;
	forward_mem_defaults(&fm);
	snprintf(fm.device_mem, sizeof fm.device_mem, "18M");
	snprintf(fm.host_mem, sizeof fm.host_mem, "4M");
	snprintf(fm.offload_dir, sizeof fm.offload_dir, "%s", off);
	cr_assert_eq(forward_build(&st, ops_cpu(), dir), 0);
	cr_assert_eq(forward_place_decoder(&st, dir, &fm, T), 0);
	cr_assert(store_is_staged(&st.store, 0, ST_SLAB_W), "the embedding is not streamed");
	int32_t tok[120];
	uint64_t seed = 4;
	for (int i = 0; i < T; i++)
		tok[i] = (int32_t)(tu_next(&seed) % 2000);
	const int feeds[] = {70, 1, 3, 1, 1};
	int pos = 0;
	for (size_t f = 0; f < sizeof feeds / sizeof feeds[0]; f++) {
		const float *a = decoder_feed(&mem.dec, tok + pos, feeds[f]);
		const float *b = decoder_feed(&st.dec, tok + pos, feeds[f]);
		pos += feeds[f];
		cr_assert(a && b);
		cr_expect(memcmp(a, b, (size_t)cfg.vocab_size * sizeof *a) == 0,
			  "scores after %d tokens differ streamed", pos);
	}
	cr_expect_eq(store_ok(&st.store), ST_OK);
	session_close(&st);
	session_close(&mem);
}
