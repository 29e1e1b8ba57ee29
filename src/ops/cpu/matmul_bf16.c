/* CPU matmul with bf16 inputs: c = alpha * op(a) @ op(b) + beta * c, with a
 * and b rounded to bf16 (to nearest, ties to even) and the products summed in
 * fp32. The opt-in `--matmul-precision bf16` of the model's linear layers
 * (DESIGN.md, Precision: "bf16 matmuls via AMX/AVX512-BF16 later, opt-in").
 *
 * oneDNN does both halves: a reorder rounds a tile of each operand into the
 * caller's workspace, and its matmul primitive multiplies the bf16 tiles on
 * AMX tiles or AVX512-BF16 dot products. oneDNN 2.6 ignores the fpmath-mode
 * attribute that would let an f32 matmul round its inputs itself, so the
 * rounding is explicit. Measured on the 2-core Xeon VM (AMX), 2048 x 1376 x
 * 512: 3.1-3.8 TFLOP/s against dnnl_sgemm's 0.39; the reorder runs at 10.6
 * Gelem/s in cache and 4.2 in a llama-60m step, where rounding took 23% of
 * the bf16 matmuls' time (the shared inputs of q/k/v and gate/up, and dy of
 * a backward's two products, are rounded once per product).
 *
 * The workspace bounds the tiles, not the product: a product whose operands
 * do not fit is cut into tiles of output rows and columns and into chunks of
 * the summed dimension k (the first chunk scales c by beta, the later ones
 * add onto it), so any workspace from ST_MATMUL_BF16_MIN_WS works and a
 * larger one converts less twice and passes over c fewer times.
 *
 * Deterministic for a fixed thread count and workspace, as ops.h requires:
 * the reorder is elementwise, the tiling depends only on the sizes, and
 * oneDNN's matmul partitions the same way every call. Like cpu_matmul it has
 * no error path: a failure is a bug in the caller's sizes or oneDNN out of
 * memory for its own scratch, reported before the process aborts. */
#include <dnnl.h>
#include <dnnl_debug.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/cpu_kernels.h"
#include "util/check.h"

/* oneDNN's CPU engine and stream: one per process, as dnnl_sgemm keeps its
 * own internally. A stream is not thread-safe, so calls come from one thread
 * at a time (ops.h). The implementation a bf16 matmul gets here is probed
 * once. */
static struct {
	dnnl_engine_t eng;
	dnnl_stream_t stream;
	const char *impl; /* oneDNN's name for the bf16 matmul kernel; NULL: none */
	int native;       /* impl runs on bf16 hardware (AMX or AVX512-BF16) */
} g;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void die(const char *what, dnnl_status_t st)
{
	ST_ERROR("this is a bug, or oneDNN ran out of memory for its scratch; please report it",
		 "oneDNN %s failed (%s) in the bf16 matmul", what, dnnl_status2str(st));
	abort();
}

#define DN(call, what)                                                                             \
	do {                                                                                       \
		dnnl_status_t st_ = (call);                                                        \
		if (st_ != dnnl_success)                                                           \
			die(what, st_);                                                            \
	} while (0)

static void md_2d(dnnl_memory_desc_t *md, int rows, int cols, dnnl_dim_t row_stride,
		  dnnl_dim_t col_stride, dnnl_data_type_t t)
{
	const dnnl_dims_t dims = {rows, cols}, strides = {row_stride, col_stride};
	DN(dnnl_memory_desc_init_by_strides(md, 2, dims, t, strides), "memory_desc_init");
}

/* The matmul primitive for op(a) (m,k) @ op(b) (k,n) into c (m,n), row stride
 * ldc; a and b bf16, stored transposed where ta / tb. NULL where oneDNN has
 * no implementation (a CPU without AVX-512, for oneDNN 2.6). */
static dnnl_primitive_desc_t matmul_pd(int m, int n, int k, int ta, int tb, int ldc, float alpha,
				       float beta)
{
	dnnl_memory_desc_t ad, bd, cd;
	md_2d(&ad, m, k, ta ? 1 : k, ta ? m : 1, dnnl_bf16);
	md_2d(&bd, k, n, tb ? 1 : n, tb ? k : 1, dnnl_bf16);
	md_2d(&cd, m, n, ldc, 1, dnnl_f32);
	dnnl_matmul_desc_t d;
	DN(dnnl_matmul_desc_init(&d, &ad, &bd, NULL, &cd), "matmul_desc_init");
	dnnl_primitive_attr_t attr;
	DN(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
	if (alpha != 1.0f)
		DN(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), "set_output_scales");
	if (beta != 0.0f) { /* c = alpha * a b + beta * c */
		dnnl_post_ops_t po;
		DN(dnnl_post_ops_create(&po), "post_ops_create");
		DN(dnnl_post_ops_append_sum(po, beta), "post_ops_append_sum");
		DN(dnnl_primitive_attr_set_post_ops(attr, po), "set_post_ops");
		dnnl_post_ops_destroy(po);
	}
	dnnl_primitive_desc_t pd = NULL;
	if (dnnl_primitive_desc_create(&pd, &d, attr, g.eng, NULL) != dnnl_success)
		pd = NULL;
	dnnl_primitive_attr_destroy(attr);
	return pd;
}

static void init_once(void)
{
	DN(dnnl_engine_create(&g.eng, dnnl_cpu, 0), "engine_create");
	DN(dnnl_stream_create(&g.stream, g.eng, dnnl_stream_default_flags), "stream_create");
	/* a layer-sized shape: oneDNN picks its kernel by ISA, not by size */
	dnnl_primitive_desc_t pd = matmul_pd(256, 256, 256, 0, 1, 256, 1.0f, 0.0f);
	if (!pd)
		return;
	const char *impl = NULL;
	if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
	    impl) {
		g.impl = strdup(impl);
		/* "brg:avx512_core_amx_bf16", "brg:avx512_core_bf16": the bf16
		 * units; "gemm:jit" on a plain AVX-512 core converts to fp32
		 * and ran at a fifth of dnnl_sgemm's rate */
		g.native = g.impl && (strstr(g.impl, "amx") || strstr(g.impl, "bf16"));
	}
	dnnl_primitive_desc_destroy(pd);
}

int cpu_matmul_bf16_native(const char **impl)
{
	pthread_once(&g_once, init_once);
	*impl = g.impl ? g.impl : "none";
	return g.native;
}

/* Run the primitive pd describes on n arguments (kinds[i], described by
 * mds[i], at ptrs[i]), wait for it, and free it and pd: oneDNN's primitive
 * cache keeps the compiled kernel for the next call of the same shape. */
static void run_primitive(dnnl_primitive_desc_t pd, int n, const int *kinds,
			  const dnnl_memory_desc_t *const *mds, void *const *ptrs, const char *what)
{
	dnnl_primitive_t p;
	DN(dnnl_primitive_create(&p, pd), what);
	dnnl_memory_t mem[3];
	dnnl_exec_arg_t args[3];
	for (int i = 0; i < n; i++) {
		DN(dnnl_memory_create(&mem[i], mds[i], g.eng, ptrs[i]), "memory_create");
		args[i] = (dnnl_exec_arg_t){kinds[i], mem[i]};
	}
	DN(dnnl_primitive_execute(p, g.stream, n, args), what);
	DN(dnnl_stream_wait(g.stream), "stream_wait");
	for (int i = 0; i < n; i++)
		dnnl_memory_destroy(mem[i]);
	dnnl_primitive_destroy(p);
	dnnl_primitive_desc_destroy(pd);
}

/* Round a rows x cols block of fp32 (row stride ld) into dst, rows x cols
 * contiguous. */
static void to_bf16(uint16_t *dst, const float *src, int rows, int cols, int ld)
{
	dnnl_memory_desc_t sd, dd;
	md_2d(&sd, rows, cols, ld, 1, dnnl_f32);
	md_2d(&dd, rows, cols, cols, 1, dnnl_bf16);
	dnnl_primitive_desc_t pd;
	DN(dnnl_reorder_primitive_desc_create(&pd, &sd, g.eng, &dd, g.eng, NULL), "reorder_create");
	const int kinds[2] = {DNNL_ARG_FROM, DNNL_ARG_TO};
	const dnnl_memory_desc_t *mds[2] = {&sd, &dd};
	void *const ptrs[2] = {(void *)src, dst};
	run_primitive(pd, 2, kinds, mds, ptrs, "reorder");
}

/* Rows r0.. and columns c0.. of op(x), x stored transposed where trans, into
 * dst in x's orientation (the matmul's descriptor says which). */
static void tile_to_bf16(uint16_t *dst, const float *x, int ld, int trans, int r0, int rows, int c0,
			 int cols)
{
	if (trans)
		to_bf16(dst, x + (size_t)c0 * ld + r0, cols, rows, ld);
	else
		to_bf16(dst, x + (size_t)r0 * ld + c0, rows, cols, ld);
}

static void matmul_tile(float *c, const uint16_t *a, const uint16_t *b, int m, int n, int k, int ta,
			int tb, float alpha, float beta, int ldc)
{
	dnnl_primitive_desc_t pd = matmul_pd(m, n, k, ta, tb, ldc, alpha, beta);
	if (!pd) {
		ST_ERROR("use --matmul-precision fp32 on this CPU",
			 "oneDNN has no bf16 matmul for this CPU (m=%d n=%d k=%d)", m, n, k);
		abort();
	}
	const int kinds[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
	const dnnl_memory_desc_t *mds[3] = {dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0),
					    dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0),
					    dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0)};
	void *const ptrs[3] = {(void *)a, (void *)b, c};
	run_primitive(pd, 3, kinds, mds, ptrs, "matmul");
}

static int min_i(long a, long b) { return (int)(a < b ? a : b); }

/* Round x down to a multiple of q where that leaves at least q. */
static int round_down(int x, int q) { return x >= q ? x / q * q : x; }

void cpu_matmul_bf16_tiles(int m, int n, int k, size_t ws_bytes, int *mc, int *nc, int *kc)
{
	/* elements of the two tiles, less each tile's rounding up to 64 bytes */
	const long t = (long)(ws_bytes / sizeof(uint16_t)) - 64;
	/* k in chunks of at least 256 where it is that long: shorter chunks pass
	 * over c more often than they save */
	*kc = min_i(k, (long)(m + n) * k <= t ? k : t / (m + n) > 256 ? t / (m + n) : 256);
	if (*kc < k)
		*kc = round_down(*kc, 32); /* AMX takes k in 32-element rows */
	const long r = t / *kc;            /* what is left for mc + nc */
	if ((long)m + n <= r) {
		*mc = m;
		*nc = n;
	} else if ((long)m <= r / 2) {
		*mc = m;
		*nc = round_down((int)(r - m), 16);
	} else if ((long)n <= r / 2) {
		*nc = n;
		*mc = round_down((int)(r - n), 16);
	} else {
		*mc = round_down((int)(r / 2), 16);
		*nc = round_down((int)(r / 2), 16);
	}
}

/* bytes of a tile of e bf16 elements, rounded up to 64 */
static size_t tile_bytes(size_t e) { return (e * sizeof(uint16_t) + 63) & ~(size_t)63; }

void cpu_matmul_bf16(float *c, const float *a, const float *b, int m, int n, int k, int ta, int tb,
		     float alpha, float beta, int lda, int ldb, int ldc, void *ws, size_t ws_bytes)
{
	if (m <= 0 || n <= 0)
		return;
	if (k <= 0) { /* no products: whatever dnnl_sgemm does then, as the fp32 path */
		cpu_matmul(c, a, b, m, n, k, ta, tb, alpha, beta, lda, ldb, ldc);
		return;
	}
	pthread_once(&g_once, init_once);
	if (ws_bytes < ST_MATMUL_BF16_MIN_WS || ((uintptr_t)ws & 63)) {
		ST_ERROR("this is a bug in the caller's workspace; please report it",
			 "bf16 matmul workspace of %zu bytes at %p: needs %d, 64-byte aligned",
			 ws_bytes, ws, ST_MATMUL_BF16_MIN_WS);
		abort();
	}
	int mc, nc, kc;
	cpu_matmul_bf16_tiles(m, n, k, ws_bytes, &mc, &nc, &kc);
	uint16_t *wa = ws;
	uint16_t *wb = (uint16_t *)((char *)ws + tile_bytes((size_t)mc * kc));
	for (int j0 = 0; j0 < n; j0 += nc) {
		const int nb = min_i(nc, n - j0);
		for (int k0 = 0; k0 < k; k0 += kc) {
			const int kb = min_i(kc, k - k0);
			tile_to_bf16(wb, b, ldb, tb, k0, kb, j0, nb);
			for (int i0 = 0; i0 < m; i0 += mc) {
				const int mb = min_i(mc, m - i0);
				tile_to_bf16(wa, a, lda, ta, i0, mb, k0, kb);
				matmul_tile(c + (size_t)i0 * ldc + j0, wa, wb, mb, nb, kb, ta, tb,
					    alpha, k0 ? 1.0f : beta, ldc);
			}
		}
	}
}
