/* Hardware profile: measured, saved, loaded; see profile.h. */
#include <cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/profile.h"
#include "io/fsutil.h"
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

int profile_measure(struct st_profile *p, const struct st_ops *ops, const char *dir)
{
	memset(p, 0, sizeof *p);
	const int n = 1024;          /* a square matmul: the backend's rate at model-sized shapes */
	const size_t big = 1u << 24; /* 64 MiB per array: past the caches */
	float *a = st_aligned_alloc(big * sizeof(float)), *b = st_aligned_alloc(big * sizeof(float));
	float *c = st_aligned_alloc(big * sizeof(float)), *d = st_aligned_alloc(big * sizeof(float));
	int rc = a && b && c && d ? ST_OK : ST_FAIL;
	if (rc == ST_OK) {
		for (size_t i = 0; i < big; i++)
			a[i] = b[i] = c[i] = d[i] = (float)(i % 97) * 1e-3f;
		struct mm_ctx mm = {ops, a, b, c, n};
		p->matmul_gflops = 2.0 * n * n * n / best_of(5, run_mm, &mm) / 1e9;
		struct copy_ctx cp = {c, a, big};
		p->copy_gbs = 2.0 * (double)big * sizeof(float) / best_of(5, run_copy, &cp) / 1e9;
		struct adam_ctx ad = {ops, a, b, c, d, big};
		p->adamw_mparams = (double)big / best_of(3, run_adam, &ad) / 1e6;
	}
	if (rc == ST_OK && dir && *dir) {
		/* the store's own engine over 256 MiB in 64 MiB slabs */
		const char *dirs[] = {dir};
		struct st_io io;
		const size_t slab = 64u << 20, total = 4 * slab;
		void *buf = NULL; /* O_DIRECT needs page-aligned buffers */
		if (posix_memalign(&buf, ST_IO_ALIGN, slab) != 0) {
			ST_ERROR(NULL, "out of memory for the disk measurement");
			rc = ST_FAIL;
		} else {
			memcpy(buf, a, slab);
			rc = io_open(&io, dirs, 1, 1u << 20, 16, total);
		}
		if (rc == ST_OK) {
			struct st_io_item items[4];
			for (int i = 0; i < 4; i++)
				items[i] = (struct st_io_item){(uint64_t)i * slab, buf, slab};
			double t0 = now_s();
			rc = io_transfer(&io, 1, items, 4, NULL, NULL);
			p->disk_write_gbs = (double)total / (now_s() - t0) / 1e9;
			t0 = now_s();
			if (rc == ST_OK)
				rc = io_transfer(&io, 0, items, 4, NULL, NULL);
			p->disk_read_gbs = (double)total / (now_s() - t0) / 1e9;
			io_close(&io);
		}
		free(buf);
	}
	free(a);
	free(b);
	free(c);
	free(d);
	return rc;
}

static const char *keys[] = {"matmul_gflops", "copy_gbs", "adamw_mparams", "disk_read_gbs",
			     "disk_write_gbs"};

static double *field(struct st_profile *p, int i)
{
	double *f[] = {&p->matmul_gflops, &p->copy_gbs, &p->adamw_mparams, &p->disk_read_gbs,
		       &p->disk_write_gbs};
	return f[i];
}

int profile_load(struct st_profile *p, const char *path)
{
	char *text = NULL;
	size_t len = 0;
	ST_TRY(fs_read_file(path, &text, &len));
	cJSON *root = cJSON_ParseWithLength(text, len);
	free(text);
	ST_CHECK(cJSON_IsObject(root), "the profile is a JSON object of rates", "%s: not valid JSON",
		 path);
	int rc = ST_OK;
	for (int i = 0; i < 5 && rc == ST_OK; i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
		if (!cJSON_IsNumber(v) || v->valuedouble < 0) {
			ST_ERROR("give every rate as a number >= 0 (0 where there is no disk tier)",
				 "%s: '%s' is missing or not a rate", path, keys[i]);
			rc = ST_FAIL;
		} else {
			*field(p, i) = v->valuedouble;
		}
	}
	cJSON_Delete(root);
	ST_TRY(rc);
	ST_CHECK(p->matmul_gflops > 0 && p->adamw_mparams > 0, "measure it again (strata plan --profile FILE on a new path)",
		 "%s: the matmul and AdamW rates must be positive", path);
	return ST_OK;
}

int profile_save(const struct st_profile *p, const char *path)
{
	cJSON *root = cJSON_CreateObject();
	for (int i = 0; i < 5; i++)
		cJSON_AddNumberToObject(root, keys[i], *field((struct st_profile *)p, i));
	char *text = cJSON_Print(root);
	cJSON_Delete(root);
	int rc = text ? fs_write_file_atomic(path, text, strlen(text)) : ST_FAIL;
	free(text);
	return rc;
}
