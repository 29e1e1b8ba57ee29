/* Hardware profile: measured, saved, loaded; see profile.h. */
#include <cJSON.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/vfs.h>
#include <time.h>

#include "engine/memavail.h"
#include "engine/place.h"
#include "engine/profile.h"
#include "io/fsutil.h"
#include "model/llama.h"
#include "optim/quantmap.h"
#include "store/io.h"
#include "util/check.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* best of reps runs of f(ctx): seconds */
static double best_of(int reps, void (*f)(void *), void *ctx)
{
	double best = 1e30;
	for (int r = 0; r < reps; r++) {
		double t0 = now_s();
		f(ctx);
		double dt = now_s() - t0;
		best = dt < best ? dt : best;
	}
	return best;
}

struct mm_ctx {
	const struct st_ops *ops;
	float *a, *b, *c;
	int n;
};

static void run_mm(void *p)
{
	struct mm_ctx *m = p;
	m->ops->matmul(m->c, m->a, m->b, m->n, m->n, m->n, 0, 1, 1.0f, 0.0f, m->n, m->n, m->n);
}

/* A layer's products as a step runs them (llama.c's linear_forward and
 * linear_backward): LMM_M token rows, d x d weights (d = ST_LMM_D, and
 * ST_LMM_D_NARROW for the narrow rates), each of the three on operands of its
 * own set, up to LMM_SETS sets cycled so that each product finds its
 * operands past the core's caches (a step's activations and weights are; a
 * 1024^2 product repeated on warm ones read 15% fast in fp32 and 40% with
 * bf16 on the 2-core Xeon VM). 8 MiB arrays hold one set at d = 1024, which
 * then stays warm. Set j: x_j (M,d) in a, y_j (M,d) in c, w_j (d,d) in b's
 * first sets d^2 floats and its gradient g_j after them. */
enum { LMM_M = 2048, LMM_SETS = 8 };

struct lmm_ctx {
	const struct st_ops *ops;
	float *a, *b, *c;
	int d, sets;
	void *ws; /* bf16: the rounded operands' workspace; NULL: fp32 */
	size_t ws_bytes;
};

static void lmm(const struct lmm_ctx *l, float *c, const float *a, const float *b, int m, int n,
		int k, int ta, int tb, float beta, int lda, int ldb, int ldc)
{
	if (l->ws)
		l->ops->matmul_bf16(c, a, b, m, n, k, ta, tb, 1.0f, beta, lda, ldb, ldc, l->ws,
				    l->ws_bytes);
	else
		l->ops->matmul(c, a, b, m, n, k, ta, tb, 1.0f, beta, lda, ldb, ldc);
}

static void run_lmm(void *p)
{
	const struct lmm_ctx *l = p;
	const int M = LMM_M, D = l->d;
	const size_t xs = (size_t)M * D, ws = (size_t)D * D;
	for (int j = 0; j < l->sets; j++) {
		float *x = l->a + j * xs, *y = l->c + j * xs, *w = l->b + j * ws;
		float *g = l->b + (l->sets + j) * ws;
		lmm(l, y, x, w, M, D, D, 0, 1, 0.0f, D, D, D); /* y = x w^T */
		lmm(l, x, y, w, M, D, D, 0, 0, 0.0f, D, D, D); /* dx = dy w */
		lmm(l, g, y, x, D, D, M, 1, 0, 1.0f, D, D, D); /* dw += dy^T x */
	}
}

/* GFLOP/s of the layer products of width d over a, b and c (n floats
 * each), in fp32 (ws NULL) or bf16: the best of 3 passes over every set,
 * after one that warms nothing but the code. */
static double layer_mm_rate(const struct st_ops *ops, int d, float *a, float *b, float *c,
			    size_t n, void *ws, size_t ws_bytes)
{
	const size_t xs = (size_t)LMM_M * d, wsz = (size_t)d * d;
	size_t sets = n / xs < n / (2 * wsz) ? n / xs : n / (2 * wsz);
	sets = sets > LMM_SETS ? LMM_SETS : sets;
	if (!sets)
		return 0;
	/* x grows about 20x a pass (dx = (x w^T) w written over it), from
	 * 0.05 to about 1e4 in the 4 passes: far from overflow and denormals */
	for (size_t i = 0; i < sets * xs; i++)
		a[i] = (float)(i % 97) * 1e-3f;
	for (size_t i = 0; i < 2 * sets * wsz; i++)
		b[i] = (float)(i % 89) * 1e-4f;
	struct lmm_ctx l = {ops, a, b, c, d, (int)sets, ws, ws_bytes};
	run_lmm(&l);
	return 3.0 * 2.0 * LMM_M * d * d * (double)sets / best_of(3, run_lmm, &l) / 1e9;
}

/* The bf16 workspace the layer products take whole: both operands of the
 * largest, the weight gradient's (d x M and M x d), with the tiling's slack
 * (as model_matmul_ws_bytes sizes a step's); smaller, they are tiled, and
 * the rate is a tiled product's. */
static size_t lmm_ws_bytes(void)
{
	return 2 * (size_t)LMM_M * ST_LMM_D * 2 + 128;
}

/* bf16_matmul_gflops and bf16_matmul_narrow_gflops over a, b, c (n floats
 * each) with ws (lmm_ws_bytes at least); 0 where ops has no bf16 unit */
static void bf16_rates(struct st_profile *p, const struct st_ops *ops, float *a, float *b,
		       float *c, size_t n, void *ws, size_t ws_bytes)
{
	const char *impl;
	p->bf16_matmul_gflops = p->bf16_matmul_narrow_gflops = 0;
	if (!ops_bf16_native(ops, &impl))
		return;
	p->bf16_matmul_gflops = layer_mm_rate(ops, ST_LMM_D, a, b, c, n, ws, ws_bytes);
	p->bf16_matmul_narrow_gflops = layer_mm_rate(ops, ST_LMM_D_NARROW, a, b, c, n, ws, ws_bytes);
}

int profile_measure_bf16(struct st_profile *p, const struct st_ops *ops, int probe_mib)
{
	probe_mib = probe_mib < 8 ? 8 : probe_mib > 64 ? 64 : probe_mib;
	const size_t n = (size_t)probe_mib << 18; /* floats, as profile_measure's arrays */
	const size_t ws_bytes = lmm_ws_bytes();
	float *a = st_aligned_alloc(n * sizeof(float)), *b = st_aligned_alloc(n * sizeof(float));
	float *c = st_aligned_alloc(n * sizeof(float));
	void *ws = st_aligned_alloc(ws_bytes);
	const int rc = a && b && c && ws ? ST_OK : ST_FAIL;
	if (rc == ST_OK) {
		bf16_rates(p, ops, a, b, c, n, ws, ws_bytes);
	}
	free(a);
	free(b);
	free(c);
	free(ws);
	return rc;
}

/* attention_gflops and attention_short_gflops: the forward and backward
 * of b sequences of t tokens (ST_ATT_T_LONG, ST_ATT_T_SHORT), h heads of
 * ATT_HD: up to ATT_TOKENS tokens and 8 heads (more for more threads),
 * fewer where the arrays are small: 8 MiB ones hold 2 heads of 2048 tokens,
 * which read low on more than 2 threads (q, k, v, out from a; dout, dq, dk,
 * dv from b; lse from c). The kernel's rate grows with the length: 135
 * GFLOP/s at 256 tokens, 171 at 512 and 188 at 2048 on the 2-core Xeon
 * VM. */
enum { ATT_HD = 128, ATT_TOKENS = 2048 };

struct att_ctx {
	const struct st_ops *ops;
	int b, t, h;
	float *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv;
};

static void run_att(void *p)
{
	const struct att_ctx *c = p;
	c->ops->attention_forward(c->out, c->lse, c->q, c->k, c->v, c->b, c->t, c->h, c->h, ATT_HD);
	c->ops->attention_backward(c->dq, c->dk, c->dv, c->dout, c->q, c->k, c->v, c->out, c->lse,
				   c->b, c->t, c->h, c->h, ATT_HD);
}

/* over a, b (big floats each) and lse (big / (4 ATT_HD) floats at least);
 * 0 where not one head of one sequence fits */
static double attention_rate(const struct st_ops *ops, int t, float *a, float *b, float *lse,
			     size_t big)
{
	/* at least as many (sequence, head) pairs as threads where they fit:
	 * the kernels split over them, and a real model's 8 to 64 heads keep
	 * every thread busy */
	int nb = t < ATT_TOKENS ? ATT_TOKENS / t : 1, h = 8;
	while (nb * h < omp_get_max_threads() && h < 64)
		h *= 2;
	while (nb > 1 && 4 * (size_t)nb * t * h * ATT_HD > big)
		nb--;
	while (h > 1 && 4 * (size_t)nb * t * h * ATT_HD > big)
		h /= 2;
	const size_t e = (size_t)nb * t * h * ATT_HD;
	if (4 * e > big)
		return 0;
	struct att_ctx c = {ops, nb, t, h, a, a + e, a + 2 * e, a + 3 * e, lse,
			    b, b + e, b + 2 * e, b + 3 * e};
	for (size_t i = 0; i < 4 * e; i++)
		a[i] = b[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
	const double f = 3.0 * model_attention_flops(h, ATT_HD, t) * t * nb;
	return f / best_of(3, run_att, &c) / 1e9;
}

/* A rate measured at x0 (r0) and x1 (r1), x0 < x1: r0 at x0 and below, r1
 * at x1 and above, geometric in log2(x) between. */
static double between(double r0, double r1, int x0, int x1, int x)
{
	if (x <= x0)
		return r0;
	if (x >= x1)
		return r1;
	return r0 * pow(r1 / r0, log2((double)x / x0) / log2((double)x1 / x0));
}

double profile_attention_rate(const struct st_profile *p, int t)
{
	const double lng = p->attention_gflops;
	const double sht = p->attention_short_gflops > 0 ? p->attention_short_gflops : lng;
	if (!(lng > 0))
		return 0;
	return between(sht, lng, ST_ATT_T_SHORT, ST_ATT_T_LONG, t) * 1e9;
}

/* elementwise_gbs: llama.c's layer forward and backward with the matmuls
 * and attention left out, on a reference layer over n rows of sequences of
 * EW_T (model_layer_ew_bytes counts what it moves). */
enum { EW_C = 1024, EW_F = 2816, EW_H = 8, EW_HD = 128, EW_T = 256, EW_ROWS = 2048 };

struct ew_ctx {
	const struct st_ops *ops;
	int n;
	float *x, *xn, *xmid, *q, *k;     /* (n,C) each, in a */
	float *gate, *up;                 /* (n,F), in b */
	float *h, *dgate, *dtmp;          /* (n,F), (n,F), (n,C), in c */
	float *dup, *dh, *dx;             /* (n,F), (n,F), (n,C), in d */
	float *rstd1, *rstd2, *w, *dw, *cos_t, *sin_t; /* small, their own */
};

static void run_ew(void *p)
{
	const struct ew_ctx *e = p;
	const struct st_ops *o = e->ops;
	const int n = e->n, C = EW_C, B = n / EW_T;
	const size_t nc = (size_t)n * C, nf = (size_t)n * EW_F;
	o->rmsnorm_forward(e->xn, e->rstd1, e->x, e->w, n, C, 1e-5f);
	o->rope(e->q, e->cos_t, e->sin_t, B, EW_T, EW_H, EW_HD, +1);
	o->rope(e->k, e->cos_t, e->sin_t, B, EW_T, EW_H, EW_HD, +1);
	memcpy(e->xmid, e->x, nc * sizeof(float));
	o->rmsnorm_forward(e->xn, e->rstd2, e->xmid, e->w, n, C, 1e-5f);
	o->swiglu_forward(e->h, e->gate, e->up, nf);
	memcpy(e->x, e->xmid, nc * sizeof(float));
	o->swiglu_backward(e->dgate, e->dup, e->dh, e->gate, e->up, nf);
	o->rmsnorm_backward(e->dtmp, e->dw, e->xn, e->xmid, e->w, e->rstd2, n, C);
	o->add_inplace(e->dx, e->dtmp, nc);
	o->rope(e->q, e->cos_t, e->sin_t, B, EW_T, EW_H, EW_HD, -1);
	o->rope(e->k, e->cos_t, e->sin_t, B, EW_T, EW_H, EW_HD, -1);
	o->rmsnorm_backward(e->dtmp, e->dw, e->xn, e->x, e->w, e->rstd1, n, C);
	o->add_inplace(e->dx, e->dtmp, nc);
}

/* over a, b, c, d (big floats each): as many rows as fit (256 in 8 MiB
 * arrays), whole sequences, at most EW_ROWS; 0 where not one sequence
 * fits, -1 out of memory */
_Static_assert(EW_ROWS % EW_T == 0, "whole sequences");
static double elementwise_rate(const struct st_ops *ops, float *a, float *b, float *c, float *d,
			       size_t big)
{
	size_t n = big / (2 * EW_F + EW_C); /* c and d are the fullest; a takes 5 C a row */
	n = n > EW_ROWS ? EW_ROWS : n / EW_T * EW_T;
	if (!n)
		return 0;
	const size_t nc = n * EW_C, nf = n * EW_F;
	float *small = st_aligned_alloc((2 * n + 2 * EW_C + (size_t)EW_T * EW_HD) * sizeof(float));
	if (!small)
		return -1;
	struct ew_ctx e = {.ops = ops, .n = (int)n, .x = a, .xn = a + nc, .xmid = a + 2 * nc,
			   .q = a + 3 * nc, .k = a + 4 * nc, .gate = b, .up = b + nf, .h = c,
			   .dgate = c + nf, .dtmp = c + 2 * nf, .dup = d, .dh = d + nf, .dx = d + 2 * nf,
			   .rstd1 = small, .rstd2 = small + n, .w = small + 2 * n,
			   .dw = small + 2 * n + EW_C, .cos_t = small + 2 * n + 2 * EW_C};
	e.sin_t = e.cos_t + (size_t)EW_T * EW_HD / 2;
	rope_table(e.cos_t, e.sin_t, EW_T, EW_HD, 10000.0);
	for (size_t i = 0; i < EW_C; i++)
		e.w[i] = 1.0f, e.dw[i] = 0;
	for (size_t i = 0; i < 5 * nc; i++)
		a[i] = (float)(i % 97) * 1e-3f;
	for (size_t i = 0; i < 2 * nf; i++)
		b[i] = (float)(i % 89) * 1e-3f - 0.04f;
	for (size_t i = 0; i < 2 * nf + nc; i++)
		c[i] = d[i] = (float)(i % 83) * 1e-3f;
	const double t = best_of(3, run_ew, &e);
	free(small);
	const struct st_config cfg = {.dim = EW_C, .ffn_dim = EW_F, .n_heads = EW_H,
				      .n_kv_heads = EW_H, .head_dim = EW_HD};
	double fwd, bwd;
	model_layer_ew_bytes(&cfg, &fwd, &bwd);
	return (double)n * (fwd + bwd) / t / 1e9;
}

double profile_matmul_rate(const struct st_profile *p, int width, int bf16)
{
	double wide = p->matmul_gflops, narrow = p->matmul_narrow_gflops;
	if (bf16 && p->bf16_matmul_gflops > 0) {
		wide = p->bf16_matmul_gflops;
		narrow = p->bf16_matmul_narrow_gflops;
	}
	if (!(narrow > 0))
		narrow = wide;
	return between(narrow, wide, ST_LMM_D_NARROW, ST_LMM_D, width) * 1e9;
}

struct copy_ctx {
	float *dst, *src;
	size_t n;
};

static void run_copy(void *p)
{
	struct copy_ctx *c = p;
	memcpy(c->dst, c->src, c->n * sizeof(float));
}

struct adam_ctx {
	const struct st_ops *ops;
	float *p, *m, *v, *g;
	size_t n;
};

static void run_adam(void *p)
{
	struct adam_ctx *c = p;
	struct st_adamw_args a = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
				  .weight_decay = 0.1f, .grad_scale = 1.0f, .bc1 = 0.1f, .bc2 = 0.05f};
	c->ops->adamw_step(c->p, c->m, c->v, c->g, c->n, &a);
}

struct adam8_ctx {
	const struct st_ops *ops;
	float *p, *g, *am, *av;
	uint8_t *m, *v;
	size_t n;
	float map_m[256], map_v[256];
};

static void run_adam8(void *p)
{
	struct adam8_ctx *c = p;
	struct st_adamw8_args a = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
				   .weight_decay = 0.1f, .grad_scale = 1.0f, .bc1 = 0.1f, .bc2 = 0.05f,
				   .block = 256, .map_m = c->map_m, .map_v = c->map_v};
	c->ops->adamw8_step(c->p, c->m, c->v, c->am, c->av, c->g, c->n, &a);
}

/* The disk queue's own CPU work (io_uring, checksums) while matmuls run:
 * a thread streams slabs in and out until told to stop. */
struct disk_load {
	struct st_io *io;
	const struct st_io_item *items;
	int n;
	volatile int stop;
	int rc;
};

static void *disk_loop(void *arg)
{
	struct disk_load *d = arg;
	for (int i = 0; !d->stop && d->rc == ST_OK; i = (i + 1) % d->n)
		d->rc = io_transfer(d->io, i % 2, &d->items[i], 1, NULL, NULL);
	return NULL;
}

/* seconds for reps matmuls, back to back */
static double matmuls_s(struct mm_ctx *mm, int reps)
{
	const double t0 = now_s();
	for (int r = 0; r < reps; r++)
		run_mm(mm);
	return now_s() - t0;
}

/* The copy queue's memcpy while matmuls run: a thread copies a slab back
 * and forth until told to stop. */
struct copy_load {
	struct copy_ctx c;
	volatile int stop;
};

static void *copy_loop(void *arg)
{
	struct copy_load *l = arg;
	while (!l->stop)
		run_copy(&l->c);
	return NULL;
}

/* The share of the compute rate lost while the copy thread streams (shared
 * cores: its memcpy takes a core and memory bandwidth from the matmuls). */
static double copy_share(struct mm_ctx *mm, float *dst, float *src, size_t n)
{
	const int reps = 20;
	const double alone = matmuls_s(mm, reps);
	struct copy_load l = {.c = {dst, src, n}};
	pthread_t th;
	if (pthread_create(&th, NULL, copy_loop, &l) != 0)
		return 0;
	const double loaded = matmuls_s(mm, reps);
	l.stop = 1;
	pthread_join(th, NULL);
	const double lost = 1.0 - alone / loaded;
	return lost < 0 ? 0 : lost > 1 ? 1 : lost;
}

/* The disk as training uses it: slabs of 16 MiB, written then read back,
 * then reads and writes interleaved (the optimizer's pattern); then how much
 * of the compute rate is lost while the disk streams (shared cores). */
static int measure_disk(struct st_profile *p, const char *dir, struct mm_ctx *mm)
{
	const char *dirs[] = {dir};
	struct st_io io;
	/* 16 slabs of 16 MiB, or fewer (at least 2) where the directory has
	 * less than twice that free: the measurement must not be what stops a
	 * run whose own state fits there */
	enum { MAX_N = 16 };
	const size_t slab = 16u << 20;
	int N = MAX_N;
	const double avail = fs_free_bytes(dir);
	if (avail >= 0) {
		while (N > 2 && (double)N * (double)slab * 2 > avail)
			N /= 2;
		char b1[32];
		ST_CHECK((double)N * (double)slab <= avail,
			 "free space there, or give --profile FILE (a profile measured on this machine "
			 "with an offload directory that had room)",
			 "measuring the disk for the planner needs %d MiB in %s, which has %s free", 2 * 16,
			 dir, fmt_bytes(b1, sizeof b1, avail));
	}
	/* and no larger a file than the file-size limit lets it write */
	const int room_n = N;
	struct rlimit rl;
	if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
		while (N > 2 && (double)N * (double)slab > (double)rl.rlim_cur)
			N /= 2;
		char b1[32];
		ST_CHECK((double)N * (double)slab <= (double)rl.rlim_cur,
			 "raise the limit (ulimit -f), or give --profile FILE (a profile measured on this "
			 "machine)",
			 "measuring the disk for the planner needs a file of %d MiB in %s, more than this "
			 "process's file-size limit of %s (ulimit -f)",
			 2 * 16, dir, fmt_bytes(b1, sizeof b1, (double)rl.rlim_cur));
	}
	if (N < MAX_N)
		st_log_warn("the disk is measured with %d MiB, not %d, for lack of %s%s: the profile's "
			    "disk rates are rougher (the profile is cached; delete it, or give --profile, "
			    "to measure again with room)",
			    N * 16, MAX_N * 16, N < room_n ? "a larger file-size limit" : "room in ",
			    N < room_n ? "" : dir);
	const size_t total = (size_t)N * slab;
	void *buf = NULL; /* O_DIRECT needs page-aligned buffers */
	if (posix_memalign(&buf, ST_IO_ALIGN, 2 * slab) != 0) {
		ST_ERROR(NULL, "out of memory for the disk measurement");
		return ST_FAIL;
	}
	for (size_t i = 0; i < 2 * slab / sizeof(float); i++) /* data, not zeros a device may skip */
		((float *)buf)[i] = (float)(i % 97) * 1e-3f;
	int rc = io_open(&io, dirs, 1, ST_PROFILE_IO_BLOCK, ST_PROFILE_IO_DEPTH, total);
	p->disk_fs_magic = (double)profile_fs_magic(dir);
	if (rc == ST_OK) {
		struct st_io_item items[MAX_N];
		for (int i = 0; i < N; i++)
			items[i] = (struct st_io_item){(uint64_t)i * slab, (char *)buf + (i % 2) * slab, slab};
		double t0 = now_s();
		rc = io_transfer(&io, 1, items, N, NULL, NULL);
		const double tw = now_s() - t0;
		t0 = now_s();
		if (rc == ST_OK)
			rc = io_transfer(&io, 0, items, N, NULL, NULL);
		const double tr = now_s() - t0;
		/* mixed: one slab read, one written, in turn */
		t0 = now_s();
		for (int i = 0; i + 1 < N && rc == ST_OK; i += 2) {
			rc = io_transfer(&io, 0, &items[i], 1, NULL, NULL);
			if (rc == ST_OK)
				rc = io_transfer(&io, 1, &items[i + 1], 1, NULL, NULL);
		}
		const double tm = now_s() - t0;
		/* each direction's rate, slowed as much as the mix was slower than
		 * its halves alone would be */
		const double slow = tm > (tw + tr) / 2 ? tm / ((tw + tr) / 2) : 1.0;
		p->disk_write_gbs = (double)total / tw / 1e9 / slow;
		p->disk_read_gbs = (double)total / tr / 1e9 / slow;
		if (rc == ST_OK) {
			const int reps = 20;
			const double alone = matmuls_s(mm, reps);
			struct disk_load d = {.io = &io, .items = items, .n = N, .rc = ST_OK};
			pthread_t th;
			if (pthread_create(&th, NULL, disk_loop, &d) == 0) {
				const double loaded = matmuls_s(mm, reps);
				d.stop = 1;
				pthread_join(th, NULL);
				rc = d.rc;
				const double lost = 1.0 - alone / loaded;
				p->disk_cpu_share = lost < 0 ? 0 : lost > 1 ? 1 : lost;
			}
		}
		io_close(&io);
	}
	free(buf);
	return rc;
}

int profile_measure(struct st_profile *p, const struct st_ops *ops, int probe_mib)
{
	memset(p, 0, sizeof *p);
	const int n = 1024; /* the square matmul the copy's CPU share is measured against */
	/* 64 MiB per array, past the caches, or less within small budgets
	 * (at least 8: a layer product's 2048 x 1024, and a copy beside it) */
	probe_mib = probe_mib < 8 ? 8 : probe_mib > 64 ? 64 : probe_mib;
	const size_t big = (size_t)probe_mib << 18; /* floats */
	float *a = st_aligned_alloc(big * sizeof(float)), *b = st_aligned_alloc(big * sizeof(float));
	float *c = st_aligned_alloc(big * sizeof(float)), *d = st_aligned_alloc(big * sizeof(float));
	uint8_t *q = st_malloc(2 * big);
	void *ws = st_aligned_alloc(lmm_ws_bytes()); /* the bf16 products' (8 MiB) */
	struct adam8_ctx *a8 = st_calloc(1, sizeof *a8);
	int rc = a && b && c && d && q && ws && a8 ? ST_OK : ST_FAIL;
	if (rc == ST_OK) {
		for (size_t i = 0; i < big; i++)
			a[i] = b[i] = c[i] = d[i] = (float)(i % 97) * 1e-3f;
		memset(q, 128, 2 * big);
		struct mm_ctx mm = {ops, a, b, c, n};
		p->matmul_gflops = layer_mm_rate(ops, ST_LMM_D, a, b, c, big, NULL, 0);
		p->matmul_narrow_gflops = layer_mm_rate(ops, ST_LMM_D_NARROW, a, b, c, big, NULL, 0);
		p->cpu_matmul_gflops = p->matmul_gflops; /* the CPU backend: the same cores */
		bf16_rates(p, ops, a, b, c, big, ws, lmm_ws_bytes());
		p->attention_gflops = attention_rate(ops, ST_ATT_T_LONG, a, b, c, big);
		p->attention_short_gflops = attention_rate(ops, ST_ATT_T_SHORT, a, b, c, big);
		p->elementwise_gbs = elementwise_rate(ops, a, b, c, d, big);
		if (p->elementwise_gbs < 0) /* out of memory: not cached as measured */
			rc = ST_FAIL;
		for (size_t i = 0; i < big; i++) /* the products' grown values, fresh */
			a[i] = b[i] = c[i] = d[i] = (float)(i % 97) * 1e-3f;
		/* the bytes a slab's transfer moves: the planner divides a
		 * slab's size by this rate (counting the bytes both read and
		 * written, as STREAM does, predicted copies at half their time) */
		struct copy_ctx cp = {c, a, big};
		p->h2d_gbs = p->d2h_gbs = (double)big * sizeof(float) / best_of(5, run_copy, &cp) / 1e9;
		/* the matmul reads and writes the first 1024^2 of a, b and c */
		p->copy_cpu_share = copy_share(&mm, c + big / 2, d, big / 2);
		struct adam_ctx ad = {ops, a, b, c, d, big};
		p->cpu_adamw_mparams = p->dev_adamw_mparams = (double)big / best_of(3, run_adam, &ad) / 1e6;
		*a8 = (struct adam8_ctx){.ops = ops, .p = a, .g = b, .am = c, .av = d, .m = q, .v = q + big,
					 .n = big};
		quantmap_dynamic(a8->map_m, 1);
		quantmap_dynamic(a8->map_v, 0);
		for (size_t i = 0; i < big / 256; i++)
			c[i] = d[i] = 1e-3f;
		p->cpu_adamw8bit_mparams = p->dev_adamw8bit_mparams =
			(double)big / best_of(3, run_adam8, a8) / 1e6;
		p->host_gib = (double)mem_available() / (1u << 30);
		p->device_gib = p->host_gib; /* the CPU backend's device is host memory */
		p->shared_cores = 1;
		p->format = ST_PROFILE_FORMAT;
		p->threads = omp_get_max_threads();
		p->probe_mib = probe_mib;
	}
	free(a);
	free(b);
	free(c);
	free(d);
	free(q);
	free(ws);
	free(a8);
	return rc;
}

int profile_measure_disk(struct st_profile *p, const struct st_ops *ops, const char *dir)
{
	const int n = 1024; /* the matmuls the disk's CPU share is measured against */
	float *a = st_aligned_alloc((size_t)n * n * sizeof(float));
	float *b = st_aligned_alloc((size_t)n * n * sizeof(float));
	float *c = st_aligned_alloc((size_t)n * n * sizeof(float));
	int rc = a && b && c ? ST_OK : ST_FAIL;
	if (rc == ST_OK) {
		for (size_t i = 0; i < (size_t)n * n; i++)
			a[i] = b[i] = (float)(i % 97) * 1e-3f;
		struct mm_ctx mm = {ops, a, b, c, n};
		rc = measure_disk(p, dir, &mm);
	}
	if (rc != ST_OK) /* rates from a measurement cut short would be cached as measured */
		p->disk_read_gbs = p->disk_write_gbs = p->disk_cpu_share = 0;
	free(a);
	free(b);
	free(c);
	return rc;
}

/* Keys in file order; legacy ones fill both of a pair when the new ones are absent. */
static const struct {
	const char *key;
	size_t off;
	int required;
} keys[] = {
#define K(f, r) {#f, offsetof(struct st_profile, f), r}
	K(matmul_gflops, 1),	      K(cpu_matmul_gflops, 0),	   K(h2d_gbs, 0),
	K(d2h_gbs, 0),
	K(cpu_adamw_mparams, 0),      K(cpu_adamw8bit_mparams, 0), K(dev_adamw_mparams, 0),
	K(dev_adamw8bit_mparams, 0),  K(disk_read_gbs, 1),	   K(disk_write_gbs, 1),
	K(device_gib, 0),	      K(host_gib, 0),		   K(shared_cores, 0),
	K(disk_cpu_share, 0),	      K(disk_fs_magic, 0),	   K(format, 0),
	K(threads, 0),		      K(copy_cpu_share, 0),	   K(probe_mib, 0),
	K(bf16_matmul_gflops, 0),     K(attention_gflops, 0),	   K(elementwise_gbs, 0),
	K(matmul_narrow_gflops, 0),   K(bf16_matmul_narrow_gflops, 0), K(attention_short_gflops, 0),
#undef K
};
#define N_KEYS (int)(sizeof keys / sizeof keys[0])

static double *field(struct st_profile *p, int i) { return (double *)((char *)p + keys[i].off); }

static int number(const cJSON *root, const char *key, double *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
	if (!v)
		return 0;
	if (!cJSON_IsNumber(v) || v->valuedouble < 0)
		return -1;
	*out = v->valuedouble;
	return 1;
}

int profile_load(struct st_profile *p, const char *path)
{
	cJSON *root;
	ST_TRY(fs_read_json(path, &root, "the profile is a JSON object of rates"));
	memset(p, 0, sizeof *p);
	int rc = ST_OK;
	double copy = 0, adamw = 0;
	const int has_copy = number(root, "copy_gbs", &copy), has_adamw = number(root, "adamw_mparams", &adamw);
	for (int i = 0; i < N_KEYS && rc == ST_OK; i++) {
		int got = number(root, keys[i].key, field(p, i));
		if (got < 0 || (!got && keys[i].required)) {
			ST_ERROR("give every rate as a number >= 0 (0 where there is no disk tier)",
				 "%s: '%s' is %s", path, keys[i].key, got < 0 ? "not a rate" : "missing");
			rc = ST_FAIL;
		}
	}
	if (has_copy < 0 || has_adamw < 0) {
		ST_ERROR(NULL, "%s: copy_gbs / adamw_mparams is not a rate", path);
		rc = ST_FAIL;
	}
	cJSON_Delete(root);
	ST_TRY(rc);
	double *pairs[][2] = {{&p->h2d_gbs, &p->d2h_gbs}, {&p->cpu_adamw_mparams, &p->dev_adamw_mparams}};
	const double legacy[2] = {has_copy > 0 ? copy : 0, has_adamw > 0 ? adamw : 0};
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++)
			if (!*pairs[i][j])
				*pairs[i][j] = legacy[i] ? legacy[i] : *pairs[i][1 - j];
	if (!p->cpu_matmul_gflops)
		p->cpu_matmul_gflops = p->matmul_gflops;
	if (!p->probe_mib) /* measured before the size was recorded: always 64 */
		p->probe_mib = 64;
	/* 8-bit rates default to the fp32 ones */
	if (!p->cpu_adamw8bit_mparams)
		p->cpu_adamw8bit_mparams = p->cpu_adamw_mparams;
	if (!p->dev_adamw8bit_mparams)
		p->dev_adamw8bit_mparams = p->dev_adamw_mparams;
	ST_CHECK(p->matmul_gflops > 0 && p->cpu_adamw_mparams > 0 && p->dev_adamw_mparams > 0 &&
			 p->h2d_gbs > 0 && p->d2h_gbs > 0,
		 "give matmul_gflops, h2d_gbs / d2h_gbs (or copy_gbs) and cpu_adamw_mparams / "
		 "dev_adamw_mparams (or adamw_mparams), all positive, or measure it again (strata plan "
		 "--profile FILE on a new path)",
		 "%s: the matmul, copy and AdamW rates must be positive", path);
	ST_CHECK((p->disk_read_gbs > 0) == (p->disk_write_gbs > 0),
		 "give both disk rates, or 0 for both where there is no disk tier",
		 "%s: disk_read_gbs %g and disk_write_gbs %g: a disk that cannot be read or written", path,
		 p->disk_read_gbs, p->disk_write_gbs);
	ST_CHECK(p->disk_cpu_share <= 1 && p->copy_cpu_share <= 1 && p->shared_cores <= 1,
		 "disk_cpu_share and copy_cpu_share are shares (0 to 1), shared_cores 0 or 1",
		 "%s: disk_cpu_share %g, copy_cpu_share %g or shared_cores %g out of range", path,
		 p->disk_cpu_share, p->copy_cpu_share, p->shared_cores);
	return ST_OK;
}

int profile_save(const struct st_profile *p, const char *path)
{
	cJSON *root = cJSON_CreateObject();
	for (int i = 0; i < N_KEYS; i++)
		cJSON_AddNumberToObject(root, keys[i].key, *field((struct st_profile *)p, i));
	char *text = cJSON_Print(root);
	cJSON_Delete(root);
	int rc = text ? fs_write_file_atomic(path, text, strlen(text)) : ST_FAIL;
	free(text);
	return rc;
}

unsigned long profile_fs_magic(const char *dir)
{
	struct statfs st;
	return statfs(dir, &st) == 0 ? (unsigned long)st.f_type : 0;
}

const char *profile_fs_name(unsigned long magic, char *buf, size_t n)
{
	static const struct {
		unsigned long magic;
		const char *name;
	} fs[] = {{0xEF53, "ext4/ext3/ext2"}, {0x58465342, "xfs"},	{0x9123683E, "btrfs"},
		  {0x01021994, "tmpfs"},	 {0x858458F6, "ramfs"},	{0xF2F52010, "f2fs"},
		  {0x2FC12FC1, "zfs"},		 {0x6969, "nfs"},	{0x794C7630, "overlayfs"},
		  {0x65735546, "fuse"}};
	for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
		if (fs[i].magic == magic)
			return fs[i].name;
	snprintf(buf, n, "file system 0x%lx", magic);
	return buf;
}
