/* bench/optim_cuda: the optimizer kernels on the GPU, over one flat unit of
 * many parameters (256M by default: every array far larger than L2), against
 * the device's memory-bandwidth ceiling measured in the same run.
 *
 * usage: optim_cuda [--params 268435456] [--reps 20] [--json FILE]
 *
 * Ceiling: a device-to-device cudaMemcpy of 1 GiB, counting bytes read plus
 * bytes written. Kernels: fp32 AdamW (cuda_adamw_step, 28 B/param moved),
 * 8-bit AdamW at block 256 through the warp-per-block kernel and through the
 * general kernel (16 + 16/256 B/param), 8-bit AdamW at block 2048 (the
 * general kernel's shared-memory stash), and 8-bit SGD with momentum at
 * block 256 (14 + 8/256 B/param). Each figure is the median of --reps
 * calls timed with CUDA events after 3 warm-up calls; the inputs are
 * pseudo-random (never zeros: they would hide unwritten outputs and can run
 * faster). Then both AdamW kernels on small tensors (64K, 1M, 16M params,
 * a fresh slice of the big arrays per call so L2 does not hold them), against
 * the time their bytes take at the ceiling: what launch and per-call set-up
 * cost. Without a GPU (or without nvcc) it says so and exits 0. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ops/ops.h"
#include "optim/quantmap.h"
#include "util/check.h"

#ifdef ST_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/cuda_optim.h"

#define CK(call)                                                                               \
	do {                                                                                   \
		cudaError_t e_ = (call);                                                       \
		if (e_ != cudaSuccess) {                                                       \
			fprintf(stderr, "optim_cuda: %s: %s\n", #call, cudaGetErrorString(e_)); \
			exit(1);                                                               \
		}                                                                              \
	} while (0)

static void *dalloc(size_t bytes)
{
	void *d;
	cudaError_t e = cudaMalloc(&d, bytes);
	if (e != cudaSuccess) {
		fprintf(stderr, "optim_cuda: cannot allocate %zu bytes on the GPU (%s): try --params smaller\n",
			bytes, cudaGetErrorString(e));
		exit(1);
	}
	return d;
}

/* fill device floats with pseudo-random values in [lo, lo + scale) */
static void dfill(float *d, size_t n, float lo, float scale, uint64_t seed)
{
	const size_t chunk = (size_t)1 << 24;
	float *h = malloc(chunk * 4);
	if (!h)
		exit(1);
	for (size_t i0 = 0; i0 < n; i0 += chunk) {
		size_t len = n - i0 < chunk ? n - i0 : chunk;
		for (size_t i = 0; i < len; i++) {
			uint64_t z = (i0 + i + 1) * 0x9e3779b97f4a7c15ULL ^ seed;
			z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ULL;
			z ^= z >> 29;
			h[i] = lo + scale * ((float)(z >> 40) * (1.0f / 16777216.0f));
		}
		CK(cudaMemcpy(d + i0, h, len * 4, cudaMemcpyHostToDevice));
	}
	free(h);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

enum kern { K_COPY, K_ADAMW, K_ADAMW8, K_ADAMW8_GENERAL, K_ADAMW8_2048, K_SGD8, K_COUNT };

struct bufs {
	float *p, *g, *m, *v, *ma, *va, *map_s, *map_u;
	uint8_t *mc, *vc;
	void *copy_src, *copy_dst;
	size_t n, copy_bytes;
	size_t total, off; /* small-tensor runs: n of total, from element off */
};

static void launch(enum kern k, struct bufs *b, int t)
{
	const float bc1 = (float)(1 - pow(0.9, t)), bc2 = (float)(1 - pow(0.999, t));
	struct st_adamw_args a = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
				   .weight_decay = 0.1f, .grad_scale = 1.0f, .bc1 = bc1, .bc2 = bc2 };
	struct st_adamw8_args a8 = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
				     .weight_decay = 0.1f, .grad_scale = 1.0f, .bc1 = bc1, .bc2 = bc2,
				     .block = k == K_ADAMW8_2048 ? 2048 : 256, .map_m = b->map_s,
				     .map_v = b->map_u };
	/* a different slice each call (off advances by n), so small tensors
	 * are not timed out of L2 */
	const size_t o = b->off, o8 = o / 256;
	b->off = b->off + 2 * b->n <= b->total ? b->off + b->n : 0;
	switch (k) {
	case K_COPY:
		CK(cudaMemcpyAsync(b->copy_dst, b->copy_src, b->copy_bytes, cudaMemcpyDeviceToDevice, 0));
		break;
	case K_ADAMW:
		CK(cuda_adamw_step(b->p + o, b->m + o, b->v + o, b->g + o, b->n, &a, 0));
		break;
	case K_ADAMW8:
		CK(cuda_adamw8_step(b->p + o, b->mc + o, b->vc + o, b->ma + o8, b->va + o8, b->g + o,
				    b->n, &a8, 0));
		break;
	case K_ADAMW8_GENERAL:
	case K_ADAMW8_2048:
		CK(cuda_adamw8_step_general(b->p, b->mc, b->vc, b->ma, b->va, b->g, b->n, &a8, 0));
		break;
	case K_SGD8: {
		struct st_sgd8_args s8 = { .lr = 1e-3f, .momentum = 0.9f, .weight_decay = 0.01f,
					   .grad_scale = 1.0f, .first_step = t == 1, .block = 256,
					   .map = b->map_s };
		CK(cuda_sgd8_step(b->p, b->mc, b->ma, b->g, b->n, &s8, 0));
		break;
	}
	default:
		break;
	}
}

/* median seconds of reps timed calls after 3 warm-ups */
static double time_kernel(enum kern k, struct bufs *b, int reps)
{
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	double *t = malloc((size_t)reps * sizeof *t);
	for (int r = 0; r < 3; r++)
		launch(k, b, r + 1);
	for (int r = 0; r < reps; r++) {
		CK(cudaEventRecord(e0, 0));
		launch(k, b, r + 4);
		CK(cudaEventRecord(e1, 0));
		CK(cudaEventSynchronize(e1));
		float ms;
		CK(cudaEventElapsedTime(&ms, e0, e1));
		t[r] = 1e-3 * ms;
	}
	qsort(t, (size_t)reps, sizeof *t, cmp_double);
	/* the middle one, or the mean of the middle two */
	double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
	free(t);
	cudaEventDestroy(e0), cudaEventDestroy(e1);
	return med;
}

/* The measurement on device 0, reported on stdout and into jf (when
 * given); 1 when it could not be written. */
static int measure(struct cli_args *args, FILE *jf, size_t n, int reps)
{
	struct cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));

	struct bufs b = { .n = n, .total = n, .copy_bytes = (size_t)1 << 30 };
	const size_t nb256 = (n + 255) / 256;
	b.p = dalloc(n * 4), b.g = dalloc(n * 4), b.m = dalloc(n * 4), b.v = dalloc(n * 4);
	b.mc = dalloc(n), b.vc = dalloc(n), b.ma = dalloc(nb256 * 4), b.va = dalloc(nb256 * 4);
	b.map_s = dalloc(1024), b.map_u = dalloc(1024);
	b.copy_src = dalloc(b.copy_bytes), b.copy_dst = dalloc(b.copy_bytes);
	dfill(b.p, n, -0.5f, 1.0f, 1), dfill(b.g, n, -5e-3f, 1e-2f, 2);
	dfill(b.m, n, -5e-4f, 1e-3f, 3), dfill(b.v, n, 1e-7f, 1e-6f, 4); /* v > 0 */
	dfill(b.copy_src, b.copy_bytes / 4, -0.5f, 1.0f, 5);
	/* 8-bit state starts at zero; the 3 warm-up steps give it real codes */
	CK(cudaMemset(b.mc, 0, n));
	CK(cudaMemset(b.vc, 0, n));
	CK(cudaMemset(b.ma, 0, nb256 * 4));
	CK(cudaMemset(b.va, 0, nb256 * 4));
	float map_s[256], map_u[256];
	quantmap_dynamic(map_s, 1);
	quantmap_dynamic(map_u, 0);
	CK(cudaMemcpy(b.map_s, map_s, sizeof map_s, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(b.map_u, map_u, sizeof map_u, cudaMemcpyHostToDevice));

	const char *name[K_COUNT] = { "d2d copy",      "adamw fp32",  "adamw 8-bit",
				      "8-bit general", "8-bit b2048", "sgd 8-bit" };
	const char *key[K_COUNT] = { "copy",	       "adamw_fp32",	       "adamw_8bit",
				     "adamw_8bit_general", "adamw_8bit_block2048", "sgd_8bit" };
	/* SGD: p read and written, g read, the codes read and written (14 B),
	 * one absmax read and written per block */
	const double bytes[K_COUNT] = { 0, 28.0, 16.0 + 16.0 / 256, 16.0 + 16.0 / 256,
					16.0 + 16.0 / 2048, 14.0 + 8.0 / 256 };
	double sec[K_COUNT];
	for (int k = 0; k < K_COUNT; k++)
		sec[k] = time_kernel((enum kern)k, &b, reps);
	const double ceiling = 2.0 * (double)b.copy_bytes / sec[K_COPY] / 1e9;

	printf("bench/optim_cuda: %s, %d SMs, %zu params (%.0fM), median of %d\n", prop.name,
	       prop.multiProcessorCount, n, (double)n / 1048576.0, reps);
	printf("ceiling: d2d copy %.0f GB/s (read + written)\n", ceiling);
	printf("%-14s %9s %12s %8s %8s %10s\n", "kernel", "step ms", "params/s", "B/param", "GB/s",
	       "of ceiling");
	double ps[K_COUNT] = { 0 }, gbs[K_COUNT] = { 0 };
	for (int k = 1; k < K_COUNT; k++) {
		ps[k] = (double)n / sec[k];
		gbs[k] = bytes[k] * ps[k] / 1e9;
		printf("%-14s %9.3f %12.3e %8.2f %8.0f %9.0f%%\n", name[k], 1e3 * sec[k], ps[k],
		       bytes[k], gbs[k], 100 * gbs[k] / ceiling);
	}
	printf("fp32 GB/s / ceiling = %.2f; 8-bit / fp32 params/s = %.2f (bound by bytes: %.2f); "
	       "8-bit GB/s / ceiling = %.2f\n",
	       gbs[K_ADAMW] / ceiling, ps[K_ADAMW8] / ps[K_ADAMW], 28.0 / bytes[K_ADAMW8],
	       gbs[K_ADAMW8] / ceiling);
	/* Small tensors (one layer's matrix, a norm's vector...): fixed costs
	 * per call (launch, the 8-bit kernel's per-thread-block tables) against
	 * the time their bytes take at the ceiling. */
	const size_t small[3] = { (size_t)1 << 16, (size_t)1 << 20, (size_t)16 << 20 };
	double small_s[3][2];
	printf("%-10s %12s %12s %14s %14s\n", "params", "fp32 us", "8-bit us", "fp32 at ceil",
	       "8-bit at ceil");
	for (int i = 0; i < 3 && small[i] * 2 <= n; i++) {
		b.n = small[i], b.off = 0;
		small_s[i][0] = time_kernel(K_ADAMW, &b, reps);
		small_s[i][1] = time_kernel(K_ADAMW8, &b, reps);
		printf("%-10zu %12.1f %12.1f %14.1f %14.1f\n", small[i], 1e6 * small_s[i][0],
		       1e6 * small_s[i][1], 1e6 * 28.0 * (double)small[i] / (ceiling * 1e9),
		       1e6 * bytes[K_ADAMW8] * (double)small[i] / (ceiling * 1e9));
	}
	b.n = n;
	if (jf) {
		fprintf(jf, "{\"device\": \"%s\", \"sms\": %d, \"params\": %zu, \"reps\": %d, "
			   "\"ceiling_gbs\": %.3f",
			prop.name, prop.multiProcessorCount, n, reps, ceiling);
		for (int k = 1; k < K_COUNT; k++)
			fprintf(jf,
				", \"%s\": {\"step_s\": %.7f, \"params_per_s\": %.4e, "
				"\"bytes_per_param\": %.4f, \"gbs\": %.3f}",
				key[k], sec[k], ps[k], bytes[k], gbs[k]);
		fprintf(jf, ", \"small\": [");
		for (int i = 0; i < 3 && small[i] * 2 <= n; i++)
			fprintf(jf, "%s{\"params\": %zu, \"adamw_fp32_s\": %.7f, \"adamw_8bit_s\": %.7f}",
				i ? ", " : "", small[i], small_s[i][0], small_s[i][1]);
		fprintf(jf, "], \"speedup_8bit_over_fp32\": %.4f}\n", ps[K_ADAMW8] / ps[K_ADAMW]);
		if (cli_close_out(args, "json", jf) != ST_OK)
			return 1;
	}
	return 0;
}

#endif

static const char usage[] =
	"usage: bench/optim_cuda [--params 268435456] [--reps 20] [--json FILE]\n"
	"The optimizer kernels on the GPU against its bandwidth ceiling (a\n"
	"device-to-device copy) measured in the same run; median of --reps calls.\n";

/* The options are read the same with or without nvcc: a build without it
 * refuses a bad one and writes its JSON as one without a device does (it
 * took any arguments and wrote nothing). */
int main(int argc, char **argv)
{
	struct cli_args args;
	const int rc = cli_start(&args, argc, argv, usage);
	if (rc != CLI_RUN)
		return rc;
	FILE *jf;
	long params, lreps;
	if (cli_get_out(&args, "json", &jf) != ST_OK ||
	    cli_get_long(&args, "params", 256L << 20, LONG_MIN, LONG_MAX, &params) != ST_OK ||
	    cli_get_long(&args, "reps", 20, LONG_MIN, LONG_MAX, &lreps) != ST_OK ||
	    cli_check_unused(&args, "bench/optim_cuda") != ST_OK)
		return 2;
	if (params < 4096 || lreps < 1 || lreps > 100000) {
		fprintf(stderr, "bench/optim_cuda: need --params >= 4096 and 1 <= --reps <= 100000\n");
		return 2;
	}
#ifdef ST_HAVE_CUDA
	int count = 0;
	if (cudaGetDeviceCount(&count) != cudaSuccess)
		count = 0;
	if (count > 0)
		return measure(&args, jf, (size_t)params, (int)lreps);
	printf("optim_cuda: no CUDA device here: nothing measured\n");
#else
	printf("optim_cuda: built without nvcc: nothing measured\n");
#endif
	if (jf) {
		fprintf(jf, "{\"device\": null}\n");
		if (cli_close_out(&args, "json", jf) != ST_OK)
			return 1;
	}
	return 0;
}
