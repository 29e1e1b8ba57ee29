/* Tests for src/io: safetensors (round trip, fp16/bf16 conversion, and one
 * test per malformed-file rejection, each asserting the message names the
 * right problem), token shards, the byte tokenizer and the fs helpers.
 *
 * Malformed files are built byte by byte in a fresh mkdtemp directory; stderr
 * is captured around each failing call so a test fails when the wrong check
 * fires, not only when none does. */
#include <cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/fsutil.h"
#include "model/config.h"
#include "io/regex_ws.h"
#include "io/safetensors.h"
#include "io/shard.h"
#include "io/tokenizer.h"
#include "jsonutil.h"
#include "testutil.h"
#include "util/check.h"
#include "util/utf8.h"

/* ---- per-test temp directory and stderr capture ----------------------------- */

static char tdir[64]; /* the current test's directory (Criterion fixtures need a global) */

static void tmp_setup(void)
{
	strcpy(tdir, "/tmp/strata_test_io_XXXXXX");
	cr_assert(mkdtemp(tdir), "mkdtemp: %s", strerror(errno));
}

static void tmp_teardown(void)
{
	if (tdir[0])
		fs_rmtree(tdir);
}

TestSuite(io, .init = tmp_setup, .fini = tmp_teardown);

static const char *tpath(char *buf, const char *name)
{
	snprintf(buf, 256, "%s/%s", tdir, name);
	return buf;
}

struct capture {
	int saved;
	char path[256];
};

static void cap_begin(struct capture *c)
{
	tpath(c->path, "stderr.txt");
	fflush(stderr);
	int fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert(fd >= 0);
	c->saved = dup(2);
	cr_assert(c->saved >= 0 && dup2(fd, 2) == 2);
	close(fd);
}

/* Restore stderr and return what was written to it (malloc'd). */
static char *cap_end(struct capture *c)
{
	fflush(stderr);
	cr_assert(dup2(c->saved, 2) == 2);
	close(c->saved);
	char *text;
	size_t len;
	cr_assert(fs_read_file(c->path, &text, &len) == ST_OK);
	unlink(c->path);
	return text;
}

static void write_bytes(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	cr_assert(f, "fopen %s", path);
	cr_assert(len == 0 || fwrite(data, 1, len, f) == len);
	cr_assert(fclose(f) == 0);
}

/* A safetensors file by hand: u64 LE header length, header, data bytes. */
static void write_st_raw(const char *path, const char *header, const void *data, size_t dlen)
{
	size_t hlen = strlen(header);
	unsigned char *buf = malloc(8 + hlen + dlen + 1);
	for (int i = 0; i < 8; i++)
		buf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
	memcpy(buf + 8, header, hlen);
	if (dlen)
		memcpy(buf + 8 + hlen, data, dlen);
	write_bytes(path, buf, 8 + hlen + dlen);
	free(buf);
}

/* safetensors_open on path must fail, print one message naming the file and
 * containing want, and leave sf cleared. */
static void expect_open_fail(const char *path, const char *want)
{
	struct st_safetensors sf;
	struct capture c;
	cap_begin(&c);
	int rc = safetensors_open(&sf, path);
	char *msg = cap_end(&c);
	cr_assert_eq(rc, ST_FAIL, "open of %s should fail (stderr: %s)", path, msg);
	cr_assert(strstr(msg, want), "expected \"%s\" in the message, got: %s", want, msg);
	cr_assert(strstr(msg, path), "message does not name the file: %s", msg);
	cr_assert(!sf.map && !sf.tensors && !sf.path && sf.n == 0, "sf not cleared after failure");
	free(msg);
}

/* The header text must be rejected with want in the message (data: 16 zero bytes). */
static void expect_header_fail(const char *header, const char *want)
{
	char p[256];
	static const unsigned char zeros[16];
	write_st_raw(tpath(p, "bad.safetensors"), header, zeros, sizeof zeros);
	expect_open_fail(p, want);
}

static uint32_t f32_bits(float f)
{
	uint32_t b;
	memcpy(&b, &f, 4);
	return b;
}

/* ---- safetensors: round trip ------------------------------------------------ */

/* Known fp16 / bf16 bit patterns and their exact fp32 values. */
static const struct {
	uint16_t bits;
	float want;
} f16_cases[] = {
	{0x3C00, 1.0f},	       {0xC100, -2.5f},	       {0x7BFF, 65504.0f},
	{0x0001, 0x1p-24f},    {0x8001, -0x1p-24f},    {0x03FF, 1023 * 0x1p-24f}, /* largest subnormal */
	{0x0400, 0x1p-14f},    {0x3555, 0.333251953125f}, {0x0000, 0.0f},
	{0x8000, -0.0f},       {0x7C00, INFINITY},     {0xFC00, -INFINITY},
	{0x7E00, NAN},	       {0xFE01, NAN},
}, bf16_cases[] = {
	{0x3F80, 1.0f},	       {0xC020, -2.5f},	       {0x0001, 0x1p-133f}, /* smallest subnormal */
	{0x007F, 127 * 0x1p-133f}, {0x0080, 0x1p-126f}, {0x7F7F, 0x1.FEp127f}, /* largest finite */
	{0x8000, -0.0f},       {0x7F80, INFINITY},     {0xFF80, -INFINITY},
	{0x7FC0, NAN},	       {0xFFC1, NAN},
};
#define N_F16 (sizeof f16_cases / sizeof f16_cases[0])
#define N_BF16 (sizeof bf16_cases / sizeof bf16_cases[0])

static void check_known(const float *got, size_t n, int bf16)
{
	for (size_t i = 0; i < n; i++) {
		float want = bf16 ? bf16_cases[i].want : f16_cases[i].want;
		unsigned bits = bf16 ? bf16_cases[i].bits : f16_cases[i].bits;
		if (isnan(want)) {
			cr_assert(isnan(got[i]), "%s 0x%04x -> %g, want NaN", bf16 ? "bf16" : "f16",
				  bits, got[i]);
			cr_assert_eq(!!signbit(got[i]), !!(bits & 0x8000), "NaN sign lost");
		} else {
			cr_assert_eq(f32_bits(got[i]), f32_bits(want),
				     "%s 0x%04x -> %a (0x%08x), want %a (0x%08x)", bf16 ? "bf16" : "f16",
				     bits, got[i], f32_bits(got[i]), want, f32_bits(want));
		}
	}
}

Test(io, safetensors_round_trip)
{
	char p[256];
	tpath(p, "rt.safetensors");
	uint64_t seed = 0x5eed0001;
	float a[2 * 3 * 4];
	tu_fill_normal(a, 24, 1.0, &seed);
	uint16_t h[N_F16], bh[N_BF16];
	for (size_t i = 0; i < N_F16; i++)
		h[i] = f16_cases[i].bits;
	for (size_t i = 0; i < N_BF16; i++)
		bh[i] = bf16_cases[i].bits;
	double d[5] = {1.0, -2.5, 1e300, 1e-50, NAN};
	int32_t ints[3] = {-7, 0, 2147483647};
	uint8_t u8[5] = {1, 2, 3, 4, 5};
	float scalar = 42.5f;
	struct st_tensor_out t[] = {
		{"a.weight", ST_DT_F32, 3, {2, 3, 4}, a},
		{"half", ST_DT_F16, 1, {N_F16}, h},
		{"brain", ST_DT_BF16, 1, {N_BF16}, bh},
		{"dbl", ST_DT_F64, 2, {5, 1}, d},
		{"ints", ST_DT_I32, 1, {3}, ints},
		{"odd", ST_DT_U8, 1, {5}, u8}, /* 5 bytes: the next tensor starts unaligned */
		{"scalar", ST_DT_F32, 0, {0}, &scalar},
		{"empty", ST_DT_F32, 2, {3, 0}, NULL},
	};
	int n = (int)(sizeof t / sizeof t[0]);
	const char *meta[] = {"format", "pt", "step", "12"};
	cr_assert_eq(safetensors_write(p, t, n, meta, 2), ST_OK);

	struct st_safetensors sf;
	cr_assert_eq(safetensors_open(&sf, p), ST_OK);
	cr_assert_eq(sf.n, n);
	cr_assert_eq(sf.data_start % 8, 0, "header must be padded to a multiple of 8");
	/* Padding is spaces, right up to the data. */
	const char *hdr = (const char *)sf.map + 8;
	cr_assert_eq(hdr[0], '{');
	size_t close_at = sf.data_start - 8;
	while (close_at > 0 && hdr[close_at - 1] == ' ')
		close_at--;
	cr_assert_eq(hdr[close_at - 1], '}');
	uint64_t off = 0;
	for (int i = 0; i < n; i++) {
		const struct st_tensor_info *ti = safetensors_find(&sf, t[i].name);
		cr_assert(ti, "tensor %s missing", t[i].name);
		cr_assert_eq(ti->dtype, t[i].dtype);
		cr_assert_eq(ti->ndim, t[i].ndim);
		for (int k = 0; k < ti->ndim; k++)
			cr_assert_eq(ti->shape[k], t[i].shape[k]);
		/* in the given order, contiguous */
		cr_assert_eq(ti->begin, off, "%s begins at %llu, want %llu", t[i].name,
			     (unsigned long long)ti->begin, (unsigned long long)off);
		size_t bytes = (size_t)tensor_numel(ti) * dtype_size(ti->dtype);
		cr_assert_eq(ti->end - ti->begin, bytes);
		if (bytes)
			cr_assert(!memcmp(safetensors_data(&sf, ti), t[i].data, bytes));
		off = ti->end;
	}
	cr_assert_eq(sf.file_size, sf.data_start + off, "no trailing bytes");
	cr_assert_null(safetensors_find(&sf, "nope"));

	float got[32];
	int64_t shape[3] = {2, 3, 4};
	cr_assert_eq(safetensors_load_f32(&sf, "a.weight", 3, shape, got), ST_OK);
	cr_assert(!memcmp(got, a, sizeof a), "F32 must round-trip bit-exactly");
	cr_assert_eq(safetensors_read_f32(&sf, safetensors_find(&sf, "half"), got), ST_OK);
	check_known(got, N_F16, 0);
	cr_assert_eq(safetensors_read_f32(&sf, safetensors_find(&sf, "brain"), got), ST_OK);
	check_known(got, N_BF16, 1);
	int64_t dshape[2] = {5, 1};
	cr_assert_eq(safetensors_load_f32(&sf, "dbl", 2, dshape, got), ST_OK);
	cr_assert_eq(got[0], 1.0f);
	cr_assert_eq(got[1], -2.5f);
	cr_assert(isinf(got[2]) && got[2] > 0, "1e300 -> +inf");
	cr_assert_eq(got[3], 0.0f);
	cr_assert(isnan(got[4]));
	cr_assert_eq(safetensors_load_f32(&sf, "scalar", 0, NULL, got), ST_OK);
	cr_assert_eq(got[0], 42.5f);
	int64_t eshape[2] = {3, 0};
	cr_assert_eq(safetensors_load_f32(&sf, "empty", 2, eshape, got), ST_OK);

	cr_assert_str_eq(safetensors_meta(&sf, "format"), "pt");
	cr_assert_str_eq(safetensors_meta(&sf, "step"), "12");
	cr_assert_null(safetensors_meta(&sf, "nope"));
	safetensors_close(&sf);
	cr_assert_null(sf.map);
}

/* The bytes of a character begun and not ended, at a text's end: what
 * sample holds back until a later token ends it (and prints as U+FFFD where
 * none does). */
Test(io, utf8_incomplete_tail)
{
	const struct {
		const char *s;
		size_t want;
	} cases[] = {
		{"", 0},		  {"abc", 0},		  {"caf\xc3", 1},	    {"caf\xc3\xa9", 0},
		{"\xe6\x97\xa5\xe6", 1}, {"\xe6\x97", 2},	  {"\xe6\x97\xa5", 0},    {"\xf0\x9f\x98", 3},
		{"\xf0\x9f\x98\x80", 0}, {"\xf0\x9f", 2},	  {"x\xa9", 0},	    {"\xc0", 0},
		{"\xf5\x80", 0},	  {"\x80\x80\x80", 0}, {"a\xe8\xaa", 2},	    {"\xc3\xa9\xe2", 1},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		const size_t n = strlen(cases[i].s);
		cr_expect_eq(st_utf8_incomplete_tail((const unsigned char *)cases[i].s, n), cases[i].want,
			     "case %zu (%zu bytes)", i, n);
	}
}

/* Every one of the 65536 fp16 patterns against the compiler's own conversion. */
Test(io, f16_exhaustive)
{
#ifdef __FLT16_MAX__
	char p[256];
	tpath(p, "f16.safetensors");
	uint16_t *h = malloc(65536 * 2);
	float *got = malloc(65536 * 4);
	for (uint32_t i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	struct st_tensor_out t = {"all", ST_DT_F16, 1, {65536}, h};
	cr_assert_eq(safetensors_write(p, &t, 1, NULL, 0), ST_OK);
	struct st_safetensors sf;
	cr_assert_eq(safetensors_open(&sf, p), ST_OK);
	cr_assert_eq(safetensors_read_f32(&sf, &sf.tensors[0], got), ST_OK);
	for (uint32_t i = 0; i < 65536; i++) {
		_Float16 x;
		memcpy(&x, &h[i], 2);
		float want = (float)x;
		if (isnan(want))
			cr_assert(isnan(got[i]), "0x%04x", i);
		else
			cr_assert_eq(f32_bits(got[i]), f32_bits(want), "0x%04x -> %a, want %a", i,
				     got[i], want);
	}
	safetensors_close(&sf);
	free(h);
	free(got);
#else
	cr_skip_test("no _Float16 in this compiler");
#endif
}

/* A tokenizer's tables hold its texts themselves and the parsed file is
 * freed after loading: a 131072-token vocabulary with as many merges (a
 * 7.5 MiB tokenizer.json, tests/big_tokenizer.py) holds under 5 times the
 * file (30 MiB here), where with its tree it held 62 MiB for the
 * tokenizer's life (found by a helper's audit); and it encodes and decodes
 * as before. */
Test(io, tokenizer_tables_without_the_file_tree, .timeout = 120)
{
	char p[256], cmd[1024];
	tpath(p, "big.json");
	snprintf(cmd, sizeof cmd,
		 "python3 tests/big_tokenizer.py tests/data/tokenizers/llama3/tokenizer.json %s 131072", p);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	struct stat st;
	cr_assert_eq(stat(p, &st), 0);
	const long before = tu_status_kb("VmRSS");
	struct st_tokenizer tk;
	cr_assert_eq(tokenizer_load(&tk, p), ST_OK);
	const long held = tu_status_kb("VmRSS") - before;
	cr_log_info("a %ld kB tokenizer.json holds %ld kB loaded", (long)st.st_size / 1024, held);
	cr_expect_leq(held, 5 * (long)st.st_size / 1024, "loaded, it holds %ld kB for a %ld kB file",
		      held, (long)st.st_size / 1024);
	const char *text = "The quick brown fox jumps over the lazy dog, 12345 times.";
	uint32_t ids[256];
	const size_t n = tokenizer_encode(&tk, ids, text, strlen(text));
	char back[512] = "";
	size_t len = 0;
	for (size_t i = 0; i < n; i++)
		len += tokenizer_decode_one(&tk, back + len, sizeof back - len, ids[i]);
	cr_expect(n > 0 && len == strlen(text) && !memcmp(back, text, len), "decoded '%.*s'", (int)len,
		  back);
	tokenizer_free(&tk);
}

/* Tensors larger than the 64 MiB allowance over the budgets are read a
 * slice at a time, each slice's mapped pages dropped once copied: loading
 * a 64 MiB F32, a 32 MiB BF16 (converted) and a 64 MiB U8 tensor raises the
 * peak resident set by a few MiB, not by the tensor (it rose by the whole
 * tensor, which a 7B model's 500 MiB embedding put beside the budgets);
 * checking a view maps none of it in; the values are exact and a byte
 * changed past the first slice still fails the checksum. */
Test(io, large_tensors_load_a_slice_at_a_time, .timeout = 120)
{
	char p[256];
	tpath(p, "big.safetensors");
	const size_t n = (size_t)16 << 20; /* elements of each tensor */
	float *f = malloc(n * sizeof *f), *got = malloc(n * sizeof *got);
	uint16_t *h = malloc(n * sizeof *h);
	const size_t un = 4 * n; /* U8: 64 MiB too */
	uint8_t *u = malloc(un), *ugot = malloc(un);
	cr_assert(f && got && h && u && ugot);
	for (size_t i = 0; i < n; i++) {
		f[i] = (float)(i % 1000003) * 0.25f - 7.0f;
		h[i] = (uint16_t)(i * 2654435761u >> 16);
	}
	for (size_t i = 0; i < un; i++)
		u[i] = (uint8_t)(i * 31 + 7);
	const struct st_tensor_out t[3] = {{"f", ST_DT_F32, 2, {4096, (int64_t)n / 4096}, f},
					   {"h", ST_DT_BF16, 1, {(int64_t)n}, h},
					   {"u", ST_DT_U8, 1, {(int64_t)un}, u}};
	cr_assert_eq(safetensors_write(p, t, 3, NULL, 0), ST_OK);
	struct st_safetensors sf;
	cr_assert_eq(safetensors_open(&sf, p), ST_OK);
	cr_assert(sf.sums, "no checksums to take");
	memset(got, 0, n * sizeof *got); /* the destinations resident before */
	memset(ugot, 0, un);
	const long slack = 24 << 10; /* kB: a slice (8 MiB) and its neighbours' edges */
	long base = tu_peak_from_now();
	cr_assert_eq(safetensors_load_f32(&sf, "f", 2, t[0].shape, got), ST_OK);
	cr_expect_leq(tu_status_kb("VmHWM") - base, slack, "F32: the peak rose %ld kB",
		      tu_status_kb("VmHWM") - base);
	cr_expect(!memcmp(got, f, n * sizeof *f), "F32 values");
	base = tu_peak_from_now();
	cr_assert_eq(safetensors_load_f32(&sf, "h", 1, t[1].shape, got), ST_OK);
	cr_expect_leq(tu_status_kb("VmHWM") - base, slack, "BF16: the peak rose %ld kB",
		      tu_status_kb("VmHWM") - base);
	size_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t bits;
		memcpy(&bits, &got[i], 4);
		bad += bits != (uint32_t)h[i] << 16;
	}
	cr_expect_eq(bad, 0, "BF16: %zu values converted wrongly", bad);
	base = tu_peak_from_now();
	cr_assert_eq(safetensors_load_raw(&sf, "u", ST_DT_U8, 1, t[2].shape, ugot, un), ST_OK);
	cr_expect_leq(tu_status_kb("VmHWM") - base, slack, "U8: the peak rose %ld kB",
		      tu_status_kb("VmHWM") - base);
	cr_expect(!memcmp(ugot, u, un), "U8 values");
	base = tu_peak_from_now();
	const void *v = safetensors_view_raw(&sf, "u", ST_DT_U8, 1, t[2].shape, un);
	cr_assert(v);
	cr_expect_leq(tu_status_kb("VmHWM") - base, slack, "a view's check: the peak rose %ld kB",
		      tu_status_kb("VmHWM") - base);
	cr_expect(!memcmp(v, u, un), "the view's bytes");
	safetensors_view_done(&sf, v);
	safetensors_close(&sf);

	/* a byte changed in the F32 tensor's last slice */
	FILE *fp = fopen(p, "r+b");
	cr_assert(fp);
	cr_assert_eq(safetensors_open(&sf, p), ST_OK);
	const long at = (long)(sf.data_start + sf.tensors[0].end) - 5;
	safetensors_close(&sf);
	cr_assert_eq(fseek(fp, at, SEEK_SET), 0);
	const int c = fgetc(fp);
	cr_assert_eq(fseek(fp, at, SEEK_SET), 0);
	fputc(c ^ 0x40, fp);
	fclose(fp);
	cr_assert_eq(safetensors_open(&sf, p), ST_OK);
	struct capture cap;
	cap_begin(&cap);
	const int rc = safetensors_load_f32(&sf, "f", 2, t[0].shape, got);
	char *err = cap_end(&cap);
	cr_expect(rc != ST_OK && strstr(err, "fails its checksum"), "%s", err);
	free(err);
	safetensors_close(&sf);
	free(f);
	free(got);
	free(h);
	free(u);
	free(ugot);
}

Test(io, safetensors_metadata_round_trip)
{
	char p[256];
	tpath(p, "meta.safetensors");
	const char *meta[] = {"quote\"and\\slash", "line\nbreak\ttab", "utf8 ключ", "värde 🙂",
			      "empty", ""};
	cr_assert_eq(safetensors_write(p, NULL, 0, meta, 3), ST_OK);
	struct st_safetensors sf;
	cr_assert_eq(safetensors_open(&sf, p), ST_OK);
	cr_assert_eq(sf.n, 0);
	cr_assert_eq(sf.n_meta, 3);
	for (int i = 0; i < 3; i++)
		cr_assert_str_eq(safetensors_meta(&sf, meta[2 * i]), meta[2 * i + 1]);
	safetensors_close(&sf);

	/* No metadata at all: no __metadata__ key. */
	cr_assert_eq(safetensors_write(p, NULL, 0, NULL, 0), ST_OK);
	cr_assert_eq(safetensors_open(&sf, p), ST_OK);
	cr_assert_eq(sf.n_meta, 0);
	cr_assert_null(safetensors_meta(&sf, "format"));
	safetensors_close(&sf);
}

/* Flip one bit of the byte at file offset off. */
static void flip_byte(const char *path, long off)
{
	FILE *f = fopen(path, "r+b");
	cr_assert(f);
	cr_assert_eq(fseek(f, off, SEEK_SET), 0);
	int c = fgetc(f);
	cr_assert_eq(fseek(f, off, SEEK_SET), 0);
	fputc(c ^ 0x10, f);
	cr_assert_eq(fclose(f), 0);
}

/* Every file written carries each tensor's XXH3 (metadata strata_xxh3, in
 * name order); a changed byte fails the load of that tensor, and only that
 * one; a rewrite in another data order that keeps the metadata still loads; a damaged checksum field fails the open; a file without checksums
 * (another writer) loads as before. */
Test(io, safetensors_checksums)
{
	char p[256];
	tpath(p, "sum.safetensors");
	float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {7, 8, 9}, got[6];
	uint8_t c[5] = {1, 2, 3, 4, 5}, gotc[5];
	/* written out of name order: the digits follow the names */
	struct st_tensor_out t[] = {
		{"z", ST_DT_F32, 1, {6}, a},
		{"b", ST_DT_F32, 1, {3}, b},
		{"a.codes", ST_DT_U8, 1, {5}, c},
		{"empty", ST_DT_F32, 1, {0}, NULL},
	};
	const char *meta[] = {"strata_xxh3", "stale", "step", "3"};
	cr_assert_eq(safetensors_write(p, t, 4, meta, 2), ST_OK);
	struct st_safetensors sf;
	cr_assert_eq(safetensors_open(&sf, p), ST_OK);
	cr_assert_not_null(sf.sums);
	cr_assert_eq(strlen(safetensors_meta(&sf, "strata_xxh3")), 4 * 16, "the caller's stale value is replaced");
	const int64_t s6 = 6, s3 = 3, s5 = 5;
	cr_assert_eq(safetensors_load_f32(&sf, "z", 1, &s6, got), ST_OK);
	cr_assert_eq(safetensors_load_raw(&sf, "a.codes", ST_DT_U8, 1, &s5, gotc, 5), ST_OK);
	const long b_at = (long)(sf.data_start + safetensors_find(&sf, "b")->begin + 5);
	const long c_at = (long)(sf.data_start + safetensors_find(&sf, "a.codes")->begin + 4);
	safetensors_close(&sf);

	flip_byte(p, b_at);
	flip_byte(p, c_at);
	cr_assert_eq(safetensors_open(&sf, p), ST_OK);
	cr_assert_eq(safetensors_load_f32(&sf, "z", 1, &s6, got), ST_OK, "an intact tensor still loads");
	cr_assert(!memcmp(got, a, sizeof a));
	cr_assert_eq(safetensors_load_f32(&sf, "b", 1, &s3, got), ST_FAIL, "a changed float loaded");
	cr_assert_eq(safetensors_load_raw(&sf, "a.codes", ST_DT_U8, 1, &s5, gotc, 5), ST_FAIL,
		     "a changed code loaded");
	safetensors_close(&sf);

	/* another tool's rewrite in another data order that keeps the metadata:
	 * still verified, since the digits follow the names */
	{
		struct st_tensor_out two[] = {{"z", ST_DT_F32, 1, {6}, a}, {"b", ST_DT_F32, 1, {3}, b}};
		cr_assert_eq(safetensors_write(p, two, 2, NULL, 0), ST_OK);
		cr_assert_eq(safetensors_open(&sf, p), ST_OK);
		char head[512];
		snprintf(head, sizeof head,
			 "{\"__metadata__\":{\"strata_xxh3\":\"%s\"},"
			 "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
			 "\"z\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[12,36]}}",
			 safetensors_meta(&sf, "strata_xxh3"));
		safetensors_close(&sf);
		for (int swap = 0; swap < 2; swap++) {
			FILE *f = fopen(p, "wb");
			const uint64_t hl = strlen(head);
			fwrite(&hl, 8, 1, f);
			fputs(head, f);
			if (swap) { /* the bytes under the wrong names */
				fwrite(a, 4, 3, f);
				fwrite(b, 4, 3, f);
				fwrite(a + 3, 4, 3, f);
			} else {
				fwrite(b, 4, 3, f);
				fwrite(a, 4, 6, f);
			}
			cr_assert_eq(fclose(f), 0);
			cr_assert_eq(safetensors_open(&sf, p), ST_OK);
			const int rb = safetensors_load_f32(&sf, "b", 1, &s3, got);
			const int rz = safetensors_load_f32(&sf, "z", 1, &s6, got);
			cr_assert(swap ? rb == ST_FAIL && rz == ST_FAIL : rb == ST_OK && rz == ST_OK,
				  "reordered file (bytes %s): b %d, z %d", swap ? "swapped" : "intact", rb,
				  rz);
			safetensors_close(&sf);
		}
	}
	/* a checksum field of the wrong length (short, or two tensors' worth
	 * for one) or not 16 lowercase hex digits (strtoull alone would take a
	 * sign, spaces, 0x): the open fails; the last file has no field */
#define X_ENTRY "\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}"
#define X_SUMS(d) "{\"__metadata__\":{\"strata_xxh3\":\"" d "\"}," X_ENTRY
	const char *bad[] = {X_SUMS("00"),
			     X_SUMS("00000000000000000000000000000000"),
			     X_SUMS("00000000000000zz"),
			     X_SUMS("-000000000000001"),
			     X_SUMS(" 00000000000000f"),
			     X_SUMS("0x0000000000000f"),
			     X_SUMS("00000000000000FF"),
			     "{" X_ENTRY};
#undef X_SUMS
#undef X_ENTRY
	const int nbad = (int)(sizeof bad / sizeof bad[0]);
	for (int k = 0; k < nbad; k++) {
		FILE *f = fopen(p, "wb");
		const uint64_t hl = strlen(bad[k]);
		fwrite(&hl, 8, 1, f);
		fputs(bad[k], f);
		fputc(9, f);
		cr_assert_eq(fclose(f), 0);
		if (k < nbad - 1) {
			cr_assert_eq(safetensors_open(&sf, p), ST_FAIL, "bad checksum field %d accepted", k);
			continue;
		}
		/* no checksums: loads unverified */
		cr_assert_eq(safetensors_open(&sf, p), ST_OK);
		cr_assert_null(sf.sums);
		const int64_t s1 = 1;
		cr_assert_eq(safetensors_load_raw(&sf, "x", ST_DT_U8, 1, &s1, gotc, 1), ST_OK);
		cr_assert_eq(gotc[0], 9);
		safetensors_close(&sf);
	}
}

Test(io, safetensors_overwrite_is_atomic)
{
	char p[256];
	tpath(p, "w.safetensors");
	float x[4] = {1, 2, 3, 4}, y[2] = {5, 6};
	struct st_tensor_out t = {"x", ST_DT_F32, 1, {4}, x};
	cr_assert_eq(safetensors_write(p, &t, 1, NULL, 0), ST_OK);
	t = (struct st_tensor_out){"y", ST_DT_F32, 1, {2}, y};
	cr_assert_eq(safetensors_write(p, &t, 1, NULL, 0), ST_OK);
	struct st_safetensors sf;
	cr_assert_eq(safetensors_open(&sf, p), ST_OK);
	cr_assert_eq(sf.n, 1);
	cr_assert_str_eq(sf.tensors[0].name, "y");
	safetensors_close(&sf);
	/* only the file itself is left: no temp files */
	DIR *d = opendir(tdir);
	int entries = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		entries += e->d_name[0] != '.';
	closedir(d);
	cr_assert_eq(entries, 1);
}

Test(io, safetensors_write_errors)
{
	char p[256];
	float x = 1;
	struct st_tensor_out t[2] = {{"x", ST_DT_F32, 0, {0}, &x}, {"x", ST_DT_F32, 0, {0}, &x}};
	struct capture c;

	cap_begin(&c);
	int rc = safetensors_write(tpath(p, "no/such/dir/f.safetensors"), t, 1, NULL, 0);
	char *msg = cap_end(&c);
	cr_assert_eq(rc, ST_FAIL);
	cr_assert(strstr(msg, p) && strstr(msg, "No such file"), "got: %s", msg);
	free(msg);

	cap_begin(&c);
	rc = safetensors_write(tpath(p, "dup.safetensors"), t, 2, NULL, 0);
	msg = cap_end(&c);
	cr_assert_eq(rc, ST_FAIL);
	cr_assert(strstr(msg, "duplicate name 'x'"), "got: %s", msg);
	cr_assert(!fs_exists(p), "nothing written on failure");
	free(msg);
}

/* ---- safetensors: rejections ------------------------------------------------ */

Test(io, reject_shorter_than_8_bytes)
{
	char p[256];
	write_bytes(tpath(p, "short.safetensors"), "\x10\0\0\0\0", 5);
	expect_open_fail(p, "shorter than the 8-byte header length");
	write_bytes(p, "", 0);
	expect_open_fail(p, "shorter than the 8-byte header length");
}

Test(io, reject_header_length_larger_than_file)
{
	char p[256];
	unsigned char b[8 + 20] = {40}; /* says 40 header bytes, 20 follow */
	memcpy(b + 8, "{\"__metadata__\":{}} ", 20);
	write_bytes(tpath(p, "hl.safetensors"), b, sizeof b);
	expect_open_fail(p, "larger than the rest of the file");
}

Test(io, reject_header_over_100mb)
{
	char p[256];
	unsigned char b[16] = {0};
	uint64_t hlen = 100000001;
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(hlen >> (8 * i));
	write_bytes(tpath(p, "huge.safetensors"), b, sizeof b);
	expect_open_fail(p, "exceeds the 100 MB limit");
}

Test(io, reject_invalid_json)
{
	expect_header_fail("{\"a\": {\"dtype\": ", "not valid JSON");
	expect_header_fail("", "not valid JSON");
	expect_header_fail("{} x", "not valid JSON"); /* junk after the object */
	/* a NUL inside the declared header (strlen would stop there; the parser must not) */
	char p[256];
	unsigned char b[8 + 8] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', 0, ' ', ' ', ' ', ' ', ' '};
	write_bytes(tpath(p, "nul.safetensors"), b, sizeof b);
	expect_open_fail(p, "not valid JSON");
}

Test(io, reject_json_not_object)
{
	expect_header_fail("[1, 2]  ", "not a JSON object");
	expect_header_fail("\"str\"  ", "not a JSON object");
}

Test(io, reject_entry_not_object)
{
	expect_header_fail("{\"a\": [1]}", "entry 'a' is not an object");
}

/* A field given twice, and a name cut short by an escaped NUL, would each
 * read as something else: the first "dtype" of two, "a\u0000x" as "a". */
Test(io, reject_repeated_field_and_nul_in_names)
{
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], "
			   "\"dtype\": \"BF16\"}}",
			   "duplicate name 'dtype' in the header");
	expect_header_fail("{\"a\\u0000x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
			   "header holds a NUL character");
	expect_header_fail("{\"a\\\\\\u0000x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
			   "header holds a NUL character"); /* a backslash, then the escape */
	/* an escaped backslash before the text "u0000" is no NUL */
	char p[256];
	static const unsigned char zeros[16];
	write_st_raw(tpath(p, "ok.safetensors"),
		     "{\"__metadata__\": {\"note\": \"C:\\\\u0000dir\"}, \"a\": {\"dtype\": \"F32\", "
		     "\"shape\": [1], \"data_offsets\": [0, 4]}}",
		     zeros, 4);
	struct st_safetensors sf;
	cr_expect_eq(safetensors_open(&sf, p), ST_OK, "an escaped backslash before u0000 refused");
	safetensors_close(&sf);
}

Test(io, reject_missing_fields)
{
	expect_header_fail("{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}",
			   "tensor 'a' is missing \"dtype\"");
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}",
			   "tensor 'a' is missing \"shape\"");
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}",
			   "tensor 'a' is missing \"data_offsets\"");
}

Test(io, reject_wrong_json_types)
{
	expect_header_fail("{\"a\": {\"dtype\": 7, \"shape\": [1], \"data_offsets\": [0, 4]}}",
			   "\"dtype\" must be a string");
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}",
			   "\"shape\" must be an array");
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [\"1\"], \"data_offsets\": [0, 4]}}",
			   "\"shape\" must be an array of integers");
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}",
			   "\"shape\" must be an array of integers");
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}",
			   "\"data_offsets\" must be an array of two");
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": \"0,4\"}}",
			   "\"data_offsets\" must be an array of two");
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}",
			   "\"data_offsets\" must be an array of two non-negative");
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}",
			   "begin after end");
}

Test(io, reject_unknown_dtype)
{
	expect_header_fail("{\"a\": {\"dtype\": \"Q4_K\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
			   "unknown dtype \"Q4_K\"");
	expect_header_fail("{\"a\": {\"dtype\": \"f32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
			   "unknown dtype \"f32\"");
}

Test(io, reject_negative_dim)
{
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [2, -1], \"data_offsets\": [0, 4]}}",
			   "negative dimension");
}

Test(io, reject_more_than_8_dims)
{
	expect_header_fail("{\"a\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], "
			   "\"data_offsets\": [0, 1]}}",
			   "9 dimensions, more than the 8 supported");
}

Test(io, reject_byte_size_mismatch)
{
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}",
			   "byte size mismatch");
	expect_header_fail("{\"a\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [0, 16]}}",
			   "byte size mismatch");
	/* numel * size overflowing 64 bits must not wrap around to a match */
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296], "
			   "\"data_offsets\": [0, 0]}}",
			   "byte size mismatch");
	/* past the 2^53 cap, the partial product (8 bytes) must not count as a match */
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [2, 9007199254740992], "
			   "\"data_offsets\": [0, 8]}}",
			   "byte size mismatch");
}

Test(io, reject_end_beyond_data)
{
	/* 16 data bytes; the tensor claims [8, 24) */
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 24]}}",
			   "beyond the end of the data section");
}

Test(io, reject_overlap)
{
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
			   " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
			   "overlap");
	/* listed out of order, and one fully inside another */
	expect_header_fail("{\"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [12, 14]},"
			   " \"a\": {\"dtype\": \"U8\", \"shape\": [16], \"data_offsets\": [0, 16]}}",
			   "overlap");
}

Test(io, reject_duplicate_names)
{
	expect_header_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
			   " \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
			   "duplicate name 'a'");
	expect_header_fail("{\"__metadata__\": {}, \"__metadata__\": {}}",
			   "duplicate name '__metadata__'");
}

Test(io, reject_bad_metadata)
{
	expect_header_fail("{\"__metadata__\": [\"a\"]}", "\"__metadata__\" must be an object");
	expect_header_fail("{\"__metadata__\": {\"k\": \"v\", \"n\": 1}}",
			   "\"__metadata__\" value for key 'n' is not a string");
	/* null is no metadata, as the safetensors library reads it (refused) */
	char p[256];
	static const unsigned char zeros[16];
	write_st_raw(tpath(p, "nullmeta.safetensors"),
		     "{\"__metadata__\": null, \"a\": {\"dtype\": \"F32\", \"shape\": [4], "
		     "\"data_offsets\": [0, 16]}}",
		     zeros, sizeof zeros);
	struct st_safetensors sf;
	cr_assert_eq(safetensors_open(&sf, p), ST_OK, "%s", st_log_last_error());
	cr_expect(sf.n == 1 && sf.n_meta == 0 && !safetensors_meta(&sf, "format"));
	safetensors_close(&sf);
}

Test(io, reject_truncated_file)
{
	char p[256];
	tpath(p, "trunc.safetensors");
	float x[64];
	uint64_t seed = 7;
	tu_fill_normal(x, 64, 1.0, &seed);
	struct st_tensor_out t[2] = {{"x", ST_DT_F32, 2, {8, 4}, x}, {"y", ST_DT_F32, 1, {32}, x + 32}};
	cr_assert_eq(safetensors_write(p, t, 2, NULL, 0), ST_OK);
	struct stat st;
	cr_assert_eq(stat(p, &st), 0);
	cr_assert_eq(truncate(p, st.st_size - 100), 0); /* cut in the middle of y */
	expect_open_fail(p, "tensor 'y' ends at byte 256, beyond the end of the data section");
}

Test(io, reject_not_a_file)
{
	char p[256];
	expect_open_fail(tpath(p, "missing.safetensors"), "No such file");
	expect_open_fail(tdir, "is a directory");
}

Test(io, zero_size_tensors_are_legal)
{
	char p[256];
	static const unsigned char data[8];
	/* Zero-size tensors may share an offset with each other and sit inside
	 * another tensor's range: they own no bytes. */
	write_st_raw(tpath(p, "zero.safetensors"),
		     "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
		     " \"e1\": {\"dtype\": \"F16\", \"shape\": [0], \"data_offsets\": [4, 4]},"
		     " \"e2\": {\"dtype\": \"F32\", \"shape\": [3, 0, 2], \"data_offsets\": [4, 4]},"
		     " \"e3\": {\"dtype\": \"I64\", \"shape\": [0], \"data_offsets\": [8, 8]}}",
		     data, sizeof data);
	struct st_safetensors sf;
	cr_assert_eq(safetensors_open(&sf, p), ST_OK);
	cr_assert_eq(sf.n, 4);
	cr_assert_eq(tensor_numel(safetensors_find(&sf, "e2")), 0);
	safetensors_close(&sf);
}

Test(io, load_f32_errors)
{
	char p[256];
	tpath(p, "load.safetensors");
	float x[6] = {1, 2, 3, 4, 5, 6};
	int32_t i[2] = {1, 2};
	struct st_tensor_out t[2] = {{"x", ST_DT_F32, 2, {2, 3}, x}, {"i", ST_DT_I32, 1, {2}, i}};
	cr_assert_eq(safetensors_write(p, t, 2, NULL, 0), ST_OK);
	struct st_safetensors sf;
	cr_assert_eq(safetensors_open(&sf, p), ST_OK);
	float got[6];
	int64_t want32[2] = {3, 2}, want2[1] = {2};
	struct capture c;
	char *msg, expect[512];

	cap_begin(&c);
	cr_assert_eq(safetensors_load_f32(&sf, "nope", 1, want2, got), ST_FAIL);
	msg = cap_end(&c);
	snprintf(expect, sizeof expect, "missing tensor nope in %s", p);
	cr_assert(strstr(msg, expect), "got: %s", msg);
	free(msg);

	cap_begin(&c);
	cr_assert_eq(safetensors_load_f32(&sf, "i", 1, want2, got), ST_FAIL);
	msg = cap_end(&c);
	cr_assert(strstr(msg, "wrong dtype I32") && strstr(msg, p), "got: %s", msg);
	free(msg);

	cap_begin(&c);
	cr_assert_eq(safetensors_read_f32(&sf, safetensors_find(&sf, "i"), got), ST_FAIL);
	msg = cap_end(&c);
	cr_assert(strstr(msg, "wrong dtype I32"), "got: %s", msg);
	free(msg);

	cap_begin(&c);
	cr_assert_eq(safetensors_load_f32(&sf, "x", 2, want32, got), ST_FAIL);
	msg = cap_end(&c);
	cr_assert(strstr(msg, "'x' has shape [2, 3], expected [3, 2]"), "got: %s", msg);
	free(msg);

	cap_begin(&c);
	cr_assert_eq(safetensors_load_f32(&sf, "x", 1, want2, got), ST_FAIL);
	msg = cap_end(&c);
	cr_assert(strstr(msg, "has shape [2, 3], expected [2]"), "got: %s", msg);
	free(msg);
	safetensors_close(&sf);
}

/* ---- shards ---------------------------------------------------------------- */

static uint64_t ref_fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 14695981039346656037ULL;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ULL;
	return h;
}

static uint64_t rd64le(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void shard_round_trip(uint32_t vocab, uint32_t want_tb, uint64_t n)
{
	char p[256];
	tpath(p, "s.bin");
	uint32_t *tok = malloc((size_t)(n ? n : 1) * 4);
	uint64_t seed = 0x5ead + vocab;
	for (uint64_t i = 0; i < n; i++)
		tok[i] = (uint32_t)(tu_next(&seed) % vocab);
	if (n > 1)
		tok[1] = vocab - 1; /* the largest id survives */
	cr_assert_eq(shard_write(p, tok, n, vocab, "byte"), ST_OK);

	/* the on-disk layout, byte by byte */
	char *raw;
	size_t len;
	cr_assert_eq(fs_read_file(p, &raw, &len), ST_OK);
	const uint8_t *b = (const uint8_t *)raw;
	cr_assert_eq(len, 64 + n * want_tb);
	cr_assert(!memcmp(b, "STRATOK1", 8));
	cr_assert_eq(b[8], 1);
	cr_assert_eq(b[12], want_tb);
	cr_assert_eq(rd64le(b + 24), n);
	cr_assert_str_eq((const char *)b + 32, "byte");
	cr_assert_eq(rd64le(b + 56), ref_fnv1a(b + 64, len - 64));
	free(raw);

	struct st_shard s;
	cr_assert_eq(shard_open(&s, p), ST_OK);
	cr_assert_eq(s.token_bytes, want_tb);
	cr_assert_eq(s.vocab_size, vocab);
	cr_assert_eq(s.n_tokens, n);
	cr_assert_str_eq(s.tokenizer, "byte");
	cr_assert_str_eq(s.path, p);
	for (uint64_t i = 0; i < n; i++)
		cr_assert_eq(shard_token(&s, i), tok[i], "token %llu", (unsigned long long)i);
	shard_close(&s);
	cr_assert_null(s.map);
	free(tok);
}

Test(io, shard_round_trip_2byte)
{
	shard_round_trip(ST_BYTE_VOCAB, 2, 10007);
	shard_round_trip(65536, 2, 1000);
}

Test(io, shard_round_trip_4byte)
{
	shard_round_trip(65537, 4, 1000);
	shard_round_trip(128256, 4, 10007);
}

Test(io, shard_empty)
{
	shard_round_trip(ST_BYTE_VOCAB, 2, 0);
}

static void expect_shard_fail(const char *path, const char *want)
{
	struct st_shard s;
	struct capture c;
	cap_begin(&c);
	int rc = shard_open(&s, path);
	char *msg = cap_end(&c);
	cr_assert_eq(rc, ST_FAIL, "shard_open(%s) should fail", path);
	cr_assert(strstr(msg, want), "expected \"%s\" in the message, got: %s", want, msg);
	cr_assert(strstr(msg, path), "message does not name the file: %s", msg);
	cr_assert(!s.map && !s.path, "s not cleared after failure");
	free(msg);
}

/* A valid 100-token shard at tdir/name, returned as raw bytes for tampering. */
static char *good_shard(char *p, const char *name, size_t *len)
{
	uint32_t tok[100];
	for (int i = 0; i < 100; i++)
		tok[i] = (uint32_t)(i * 7 % ST_BYTE_VOCAB);
	cr_assert_eq(shard_write(tpath(p, name), tok, 100, ST_BYTE_VOCAB, "byte"), ST_OK);
	char *raw;
	cr_assert_eq(fs_read_file(p, &raw, len), ST_OK);
	return raw;
}

Test(io, shard_corrupt_token_byte)
{
	char p[256];
	size_t len;
	char *raw = good_shard(p, "c.bin", &len);
	raw[64 + 77] ^= 0x10;
	write_bytes(p, raw, len);
	expect_shard_fail(p, "token data hash mismatch");
	/* and the hint says what to do */
	struct st_shard s;
	struct capture c;
	cap_begin(&c);
	shard_open(&s, p);
	char *msg = cap_end(&c);
	cr_assert(strstr(msg, "re-run strata prepare"), "got: %s", msg);
	free(msg);
	free(raw);
}

Test(io, shard_truncated)
{
	char p[256];
	size_t len;
	char *raw = good_shard(p, "t.bin", &len);
	write_bytes(p, raw, len - 1);
	expect_shard_fail(p, "is truncated");
	write_bytes(p, raw, 40);
	expect_shard_fail(p, "shorter than the 64-byte token shard header");
	write_bytes(p, raw, 0);
	expect_shard_fail(p, "shorter than the 64-byte token shard header");
	char *longer = malloc(len + 2);
	memcpy(longer, raw, len);
	longer[len] = longer[len + 1] = 0;
	write_bytes(p, longer, len + 2);
	expect_shard_fail(p, "longer than its header says");
	free(longer);
	free(raw);
}

Test(io, shard_bad_header)
{
	char p[256];
	size_t len;
	char *raw = good_shard(p, "h.bin", &len);
	raw[3] = 'X';
	write_bytes(p, raw, len);
	expect_shard_fail(p, "bad magic");
	raw[3] = 'A';
	raw[8] = 2;
	write_bytes(p, raw, len);
	expect_shard_fail(p, "format version 2");
	raw[8] = 1;
	raw[12] = 3;
	write_bytes(p, raw, len);
	expect_shard_fail(p, "token width 3 bytes");
	raw[12] = 2;
	write_bytes(p, raw, len);
	struct st_shard s;
	cr_assert_eq(shard_open(&s, p), ST_OK, "restored header must open again");
	shard_close(&s);
	free(raw);
}

Test(io, shard_write_rejects_bad_tokens)
{
	char p[256];
	uint32_t tok[3] = {1, 300, 2};
	struct capture c;
	cap_begin(&c);
	int rc = shard_write(tpath(p, "x.bin"), tok, 3, ST_BYTE_VOCAB, "byte");
	char *msg = cap_end(&c);
	cr_assert_eq(rc, ST_FAIL);
	cr_assert(strstr(msg, "token 300 at position 1"), "got: %s", msg);
	cr_assert(!fs_exists(p));
	free(msg);
}

/* The shard shard_write made before the streaming writer (the whole token
 * array hashed, then header and tokens written in one go), kept here as the
 * reference that shard_writer's output must equal byte for byte. */
static void ref_shard_write(const char *path, const uint32_t *tok, size_t n, uint32_t vocab,
			    const char *name)
{
	const uint32_t tb = vocab <= 65536 ? 2 : 4;
	uint8_t *data = malloc(n * tb + 1);
	for (size_t i = 0; i < n; i++)
		for (uint32_t k = 0; k < tb; k++)
			data[i * tb + k] = (uint8_t)(tok[i] >> (8 * k));
	uint8_t h[64] = {0};
	memcpy(h, "STRATOK1", 8);
	const uint64_t fields[] = {1, tb, vocab};
	for (int f = 0; f < 3; f++)
		for (int k = 0; k < 4; k++)
			h[8 + 4 * f + k] = (uint8_t)(fields[f] >> (8 * k));
	const uint64_t hash = ref_fnv1a(data, n * tb);
	for (int k = 0; k < 8; k++) {
		h[24 + k] = (uint8_t)((uint64_t)n >> (8 * k));
		h[56 + k] = (uint8_t)(hash >> (8 * k));
	}
	memcpy(h + 32, name, strlen(name));
	FILE *f = fopen(path, "wb");
	cr_assert(f && fwrite(h, 1, 64, f) == 64 && fwrite(data, tb, n, f) == n && !fclose(f));
	free(data);
}

/* Whether two files hold the same bytes. */
static int files_equal(const char *a, const char *b)
{
	char *x, *y;
	size_t nx, ny;
	cr_assert_eq(fs_read_file(a, &x, &nx), ST_OK);
	cr_assert_eq(fs_read_file(b, &y, &ny), ST_OK);
	const int same = nx == ny && !memcmp(x, y, nx);
	free(x);
	free(y);
	return same;
}

/* Random ids with runs of one value (as a loss mask has), < vocab. */
static uint32_t *runs_of_tokens(size_t n, uint32_t vocab, uint64_t seed)
{
	uint32_t *t = malloc(n * sizeof *t + 4);
	for (size_t i = 0; i < n;) {
		const uint32_t v = (uint32_t)(tu_next(&seed) % vocab);
		size_t run = tu_next(&seed) % 4 ? 1 : 1 + tu_next(&seed) % 5000;
		for (; run && i < n; run--)
			t[i++] = v;
	}
	t[n / 2] = vocab - 1; /* the largest id survives */
	return t;
}

/* shard_writer, given the tokens in pieces of odd sizes (1, 3, 65537,
 * ... crossing its 1 MiB buffer many times), with runs through
 * shard_writer_fill, writes the same bytes as the reference writer and as
 * shard_write: both token widths (vocab 258: 2 bytes, 70000: 4), and an
 * empty shard. */
Test(io, shard_writer_matches_shard_write)
{
	const uint32_t vocabs[] = {ST_BYTE_VOCAB, 70000};
	const size_t ns[] = {1300003, 0};
	for (int v = 0; v < 2; v++)
		for (int c = 0; c < 2; c++) {
			const size_t n = ns[c];
			uint32_t *tok = runs_of_tokens(n, vocabs[v], 0x5171 + (uint64_t)v);
			char ref[256], whole[256], stream[256];
			tpath(ref, "ref.bin");
			tpath(whole, "whole.bin");
			tpath(stream, "stream.bin");
			ref_shard_write(ref, tok, n, vocabs[v], "bpe-test");
			cr_assert_eq(shard_write(whole, tok, n, vocabs[v], "bpe-test"), ST_OK);
			struct shard_writer w;
			cr_assert_eq(shard_writer_open(&w, stream, vocabs[v], "bpe-test"), ST_OK);
			static const size_t sizes[] = {1, 3, 65537, 7, 262147, 2, 999, 131071};
			uint64_t seed = 77;
			for (size_t i = 0, k = 0; i < n; k++) {
				size_t m = sizes[k % 8];
				m = m < n - i ? m : n - i;
				size_t run = 1; /* a run goes in through fill */
				while (i + run < n && tok[i + run] == tok[i])
					run++;
				if (run > 16 && tu_next(&seed) % 2) {
					cr_assert_eq(shard_writer_fill(&w, tok[i], run), ST_OK);
					m = run;
				} else {
					cr_assert_eq(shard_writer_put(&w, tok + i, m), ST_OK);
				}
				i += m;
				cr_assert_eq(w.n, i);
			}
			cr_assert_eq(shard_writer_finish(&w), ST_OK);
			cr_assert(files_equal(ref, whole), "shard_write differs from the reference, "
				  "vocab %u, %zu tokens", vocabs[v], n);
			cr_assert(files_equal(ref, stream), "shard_writer differs from the reference, "
				  "vocab %u, %zu tokens", vocabs[v], n);
			struct st_shard s;
			cr_assert_eq(shard_open(&s, stream), ST_OK);
			cr_assert_eq(s.n_tokens, n);
			cr_assert_eq(s.token_bytes, v ? 4u : 2u);
			shard_close(&s);
			free(tok);
		}
}

/* Files in tdir whose names begin with prefix. */
static int count_named(const char *prefix)
{
	DIR *d = opendir(tdir);
	cr_assert(d);
	int k = 0;
	for (struct dirent *e; (e = readdir(d));)
		k += !strncmp(e->d_name, prefix, strlen(prefix));
	closedir(d);
	return k;
}

/* A streaming write that fails part-way (a token outside the vocabulary
 * after a buffer has gone out; a file-size limit, as a full disk) says why
 * naming the shard, leaves no temp file, keeps the file already at the
 * path as it was, and fails later puts and finish; abort is then harmless. */
Test(io, shard_writer_failure_leaves_nothing)
{
	char p[256], old[256];
	tpath(p, "s.bin");
	tpath(old, "old.bin");
	const uint32_t keep[] = {5, 6, 7};
	cr_assert_eq(shard_write(p, keep, 3, ST_BYTE_VOCAB, "byte"), ST_OK);
	cr_assert_eq(shard_write(old, keep, 3, ST_BYTE_VOCAB, "byte"), ST_OK);
	const size_t n = 1u << 20; /* 2 MiB of tokens: a flush comes first */
	uint32_t *tok = runs_of_tokens(n, ST_BYTE_VOCAB, 3);
	struct shard_writer w;
	cr_assert_eq(shard_writer_open(&w, p, ST_BYTE_VOCAB, "byte"), ST_OK);
	cr_assert_eq(shard_writer_put(&w, tok, n), ST_OK);
	const uint32_t bad[] = {1, 258};
	struct capture c;
	cap_begin(&c);
	int rc = shard_writer_put(&w, bad, 2);
	char *msg = cap_end(&c);
	cr_assert_eq(rc, ST_FAIL);
	cr_expect(strstr(msg, "s.bin: token 258 at position 1048577 is outside the vocabulary"),
		  "got: %s", msg);
	free(msg);
	cr_expect_eq(shard_writer_put(&w, tok, 1), ST_FAIL);
	cr_expect_eq(shard_writer_finish(&w), ST_FAIL);
	cr_expect_eq(count_named("s.bin.tmp"), 0, "the failed write left its temp file");
	shard_writer_abort(&w); /* harmless after the failure */
	cr_expect(files_equal(p, old), "the failed write changed the shard at its path");

	/* 1 MiB file-size limit (SIGXFSZ ignored, as main.c does): EFBIG */
	signal(SIGXFSZ, SIG_IGN);
	struct rlimit lim = {1u << 20, 1u << 20};
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
	cr_assert_eq(shard_writer_open(&w, p, ST_BYTE_VOCAB, "byte"), ST_OK);
	cap_begin(&c);
	rc = shard_writer_put(&w, tok, n);
	if (rc == ST_OK)
		rc = shard_writer_finish(&w);
	msg = cap_end(&c);
	cr_assert_eq(rc, ST_FAIL, "2 MiB written under a 1 MiB file-size limit");
	cr_expect(strstr(msg, "cannot write ") && strstr(msg, "/s.bin (temp file ") &&
			  strstr(msg, "File too large") && strstr(msg, "ulimit -f"),
		  "got: %s", msg);
	free(msg);
	cr_expect_eq(count_named("s.bin.tmp"), 0, "the failed write left its temp file");
	cr_expect_eq(shard_writer_put(&w, tok, 1), ST_FAIL, "a put after a failed write");
	shard_writer_abort(&w); /* harmless after the failure */
	cr_expect(files_equal(p, old), "the failed write changed the shard at its path");
	free(tok);
}

/* ---- tokenizer ------------------------------------------------------------- */

Test(io, byte_tokenizer_round_trip)
{
	struct st_tokenizer tk;
	tokenizer_byte(&tk);
	cr_assert_str_eq(tk.name, "byte");
	cr_assert_eq(tk.vocab_size, 258);
	cr_assert_eq(tk.bos_id, 256);
	cr_assert_eq(tk.eos_id, 257);
	const char *text = "héllo, wörld — 世界 🙂\n\x01\xff";
	size_t len = strlen(text);
	uint32_t ids[64];
	cr_assert_eq(tokenizer_encode(&tk, ids, text, len), len);
	char out[128];
	size_t k = 0;
	for (size_t i = 0; i < len; i++) {
		cr_assert_lt(ids[i], 256);
		k += tokenizer_decode_one(&tk, out + k, sizeof out - k, ids[i]);
	}
	cr_assert_eq(k, len);
	cr_assert(!memcmp(out, text, len));
	cr_assert_eq(ids[1], 0xC3, "é is two bytes: C3 A9");
	cr_assert_eq(ids[2], 0xA9);
	char buf[8];
	cr_assert_eq(tokenizer_decode_one(&tk, buf, sizeof buf, ST_BYTE_BOS), 0);
	cr_assert_eq(tokenizer_decode_one(&tk, buf, sizeof buf, ST_BYTE_EOS), 0);
	cr_assert_eq(tokenizer_decode_one(&tk, buf, sizeof buf, 100000), 0);
}

/* The ids of text encoded a part at a time, as strata prepare reads a file:
 * parts of w bytes from where the last one's ids ended, twice as long after
 * a part that encoded nothing. out: room for 2 tokenizer_max_ids(len). */
static size_t encode_in_parts(const struct st_tokenizer *tk, const char *t, size_t len, size_t w,
			      uint32_t *out, int *stalls)
{
	size_t off = 0, n = 0, win = w;
	unsigned fresh = ~0u;
	*stalls = 0;
	for (;;) {
		const size_t have = len - off < win ? len - off : win;
		const int last = off + have == len;
		size_t used;
		const size_t k = tokenizer_encode_part(tk, out + n, t + off, have, last, &fresh, &used);
		cr_assert_neq(k, ST_ENCODE_FAILED);
		cr_assert_leq(used, have);
		cr_assert(!last || used == have, "the last part encoded %zu of %zu bytes", used, have);
		cr_assert(used || !k, "a part that used no bytes gave %zu ids", k);
		n += k;
		off += used;
		if (last)
			return n;
		*stalls += !used;
		win = used ? w : 2 * win;
	}
}

/* tokenizer_encode_part: for every part length from 1 byte, the parts' ids
 * are the whole text's, on the reference samples one by one and joined
 * (added tokens, whitespace runs, digits, invalid UTF-8 cut anywhere). */
static void check_parts_match_whole(const struct st_tokenizer *tk, const char *name,
				    const char *t, size_t tl)
{
	uint32_t *whole = malloc(tokenizer_max_ids(tl) * sizeof *whole);
	uint32_t *parts = malloc(2 * tokenizer_max_ids(tl) * sizeof *parts);
	const size_t n = tokenizer_encode(tk, whole, t, tl);
	const size_t widths[] = {1, 2, 3, 4, 5, 7, 11, 16, 33, 64, 200};
	for (size_t k = 0; k < sizeof widths / sizeof *widths; k++) {
		int stalls;
		const size_t m = encode_in_parts(tk, t, tl, widths[k], parts, &stalls);
		size_t at = 0;
		while (at < n && at < m && parts[at] == whole[at])
			at++;
		cr_expect(m == n && at == n,
			  "%s: parts of %zu bytes give %zu ids, the whole text %zu; first difference "
			  "at id %zu, in \"%.60s\"",
			  name, widths[k], m, n, at, t);
	}
	free(whole);
	free(parts);
}

/* Hugging Face byte-level BPE: the ids of the reference library (tokenizers,
 * written by scripts/tokref.py into tests/data/tokenizers/NAME/ref.json) on
 * a varied sample: unicode, whitespace runs, digits, contractions, special
 * and added tokens; and decode(encode(x)) == x. */
static void check_bpe_reference(const char *name)
{
	char path[256];
	snprintf(path, sizeof path, "tests/data/tokenizers/%s", name);
	struct st_tokenizer tk;
	cr_assert_eq(tokenizer_load(&tk, path), ST_OK, "cannot load %s", path);
	cr_assert(!strncmp(tk.name, "bpe-", 4), "name %s", tk.name);
	snprintf(path, sizeof path, "tests/data/tokenizers/%s/ref.json", name);
	cJSON *root = tu_read_json(path);
	cr_assert_eq(tk.vocab_size,
		     (int)cJSON_GetObjectItem(root, "vocab_size")->valuedouble, "vocabulary size");
	const cJSON *sample;
	int n_samples = 0;
	cJSON_ArrayForEach(sample, cJSON_GetObjectItem(root, "samples"))
	{
		const char *t = cJSON_GetObjectItem(sample, "text")->valuestring;
		const cJSON *want = cJSON_GetObjectItem(sample, "ids");
		size_t tl = strlen(t);
		uint32_t *ids = malloc(tokenizer_max_ids(tl) * sizeof *ids);
		size_t n = tokenizer_encode(&tk, ids, t, tl);
		int same = n == (size_t)cJSON_GetArraySize(want);
		for (size_t i = 0; same && i < n; i++)
			same = ids[i] == (uint32_t)cJSON_GetArrayItem(want, (int)i)->valuedouble;
		char *got = cJSON_PrintUnformatted(want);
		cr_expect(same, "%s: ids differ from the tokenizers library for \"%s\" (%zu ids, want %s)",
			  name, t, n, got);
		free(got);
		char *dec = malloc(tl * 2 + 64);
		size_t k = 0;
		for (size_t i = 0; i < n; i++)
			k += tokenizer_decode_one(&tk, dec + k, tl * 2 + 64 - k, ids[i]);
		cr_expect(k == tl && !memcmp(dec, t, tl), "%s: decode(encode(x)) != x for \"%s\"", name, t);
		const char *ref_dec = cJSON_GetObjectItem(sample, "decoded")->valuestring;
		cr_expect(k == strlen(ref_dec) && !memcmp(dec, ref_dec, k),
			  "%s: decoding differs from the library's for \"%s\"", name, t);
		free(dec);
		free(ids);
		check_parts_match_whole(&tk, name, t, tl);
		n_samples++;
	}
	cr_expect_gt(n_samples, 20);
	/* the samples joined, with text around them that has long runs */
	char *joined = NULL;
	size_t jl = 0;
	FILE *f = open_memstream(&joined, &jl);
	cJSON_ArrayForEach(sample, cJSON_GetObjectItem(root, "samples"))
		fprintf(f, "%s\n\n   %s", cJSON_GetObjectItem(sample, "text")->valuestring,
			"word\xff\xe2\x82 12345 ");
	fclose(f);
	check_parts_match_whole(&tk, name, joined, jl);
	free(joined);
	cJSON_Delete(root);
	tokenizer_free(&tk);
}

/* The gpt2 test tokenizer with added tokens appended ("content@id", each
 * not special, normalized), loaded; ST_OK or not, errors muted. */
static int load_with_added(struct st_tokenizer *tk, const char *const *added, int n)
{
	cJSON *t = tu_read_json("tests/data/tokenizers/gpt2/tokenizer.json");
	cJSON *list = cJSON_GetObjectItem(t, "added_tokens");
	for (int i = 0; i < n; i++) {
		char content[64];
		const char *at = strrchr(added[i], '@');
		snprintf(content, sizeof content, "%.*s", (int)(at - added[i]), added[i]);
		cJSON *e = cJSON_CreateObject();
		cJSON_AddNumberToObject(e, "id", atoi(at + 1));
		cJSON_AddStringToObject(e, "content", content);
		cJSON_AddBoolToObject(e, "special", 0);
		cJSON_AddBoolToObject(e, "normalized", 1);
		cJSON_AddItemToArray(list, e);
	}
	char dir[] = "/tmp/strata-test-added-XXXXXX", path[64];
	cr_assert(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	char *s = cJSON_Print(t);
	FILE *f = fopen(path, "w");
	cr_assert(f && fputs(s, f) >= 0 && fclose(f) == 0);
	free(s);
	cJSON_Delete(t);
	const int old = st_log_mute(1);
	const int rc = tokenizer_load(tk, path);
	st_log_mute(old);
	return rc;
}

/* Added tokens as the tokenizers library reads them. Their ids: the
 * vocabulary's id of the text, else the next after the vocabulary (3000
 * entries) and the added tokens before (custom_word at 3000); a file listing
 * others is refused (strata used the listed ids, the library its own: a gap,
 * an out-of-order pair, a vocabulary text listed past the vocabulary).
 * Their bytes, as its ByteLevel decoder gives them: a text wholly in the
 * byte alphabet stands for those bytes ("Ġthe" decoded as "Ġthe" where the
 * library gives " the"; "é" is the byte 0xe9), any other for its UTF-8. */
Test(io, bpe_added_tokens_as_the_library)
{
	struct st_tokenizer tk;
	const char *bad[][2] = {{"foo@3002", NULL}, {"foo@3002", "bar@3001"}, {"Ġthe@3001", NULL},
				{" the@260", NULL}};
	for (int i = 0; i < 4; i++)
		cr_expect_neq(load_with_added(&tk, bad[i], bad[i][1] ? 2 : 1), ST_OK, "%s taken", bad[i][0]);
	cr_expect(strstr(st_log_last_error(), "added token ' the' is listed with id 260, but the "
					      "tokenizers library gives it 3001"),
		  "%s", st_log_last_error());
	const char *good[] = {"Ġthe@260", "é@167", "foo@3001", "<|思考|>@3002", "café@3003"};
	cr_assert_eq(load_with_added(&tk, good, 5), ST_OK, "%s", st_log_last_error());
	const struct {
		uint32_t id;
		const char *bytes;
	} dec[] = {{260, " the"}, {167, "\xe9"}, {3001, "foo"}, {3002, "<|思考|>"}, {3003, "caf\xe9"}};
	for (int i = 0; i < 5; i++) {
		char buf[64];
		const size_t n = tokenizer_decode_one(&tk, buf, sizeof buf, dec[i].id);
		cr_expect(n == strlen(dec[i].bytes) && !memcmp(buf, dec[i].bytes, n), "id %u: %.*s",
			  dec[i].id, (int)n, buf);
	}
	/* " the" still encodes to 260 */
	uint32_t ids[8];
	cr_expect(tokenizer_encode(&tk, ids, "a the", 5) == 2 && ids[0] == 66 && ids[1] == 260);
	tokenizer_free(&tk);
}

Test(io, bpe_gpt2_matches_reference) { check_bpe_reference("gpt2"); }
Test(io, bpe_llama3_matches_reference) { check_bpe_reference("llama3"); }
/* SmolLM2 / StarCoder style: Digits (one by one), then ByteLevel's regex */
Test(io, bpe_smollm_matches_reference) { check_bpe_reference("smollm"); }

/* The name shards record is the FNV-1a hash of tokenizer.json, the same
 * whether the tokenizer is given as the file or as its directory (these
 * have no config.json; strata hashed that missing file instead). */
Test(io, tokenizer_name_is_the_file_hash)
{
	const char *names[] = {"gpt2", "llama3", "smollm"};
	char seen[3][64];
	for (int i = 0; i < 3; i++) {
		char dir[256], file[300];
		snprintf(dir, sizeof dir, "tests/data/tokenizers/%s", names[i]);
		snprintf(file, sizeof file, "%s/tokenizer.json", dir);
		char *text;
		size_t len;
		cr_assert_eq(fs_read_file(file, &text, &len), ST_OK);
		uint64_t h = 0xcbf29ce484222325ull;
		for (size_t k = 0; k < len; k++)
			h = (h ^ (unsigned char)text[k]) * 0x100000001b3ull;
		free(text);
		char want[64];
		snprintf(want, sizeof want, "bpe-%016llx", (unsigned long long)h);
		struct st_tokenizer a, b;
		cr_assert_eq(tokenizer_load(&a, dir), ST_OK);
		cr_assert_eq(tokenizer_load(&b, file), ST_OK);
		cr_expect_str_eq(a.name, want, "%s as a directory", names[i]);
		cr_expect_str_eq(b.name, want, "%s as a file", names[i]);
		snprintf(seen[i], sizeof seen[i], "%s", a.name);
		for (int j = 0; j < i; j++)
			cr_expect_str_neq(seen[j], seen[i], "%s and %s share a name", names[j], names[i]);
		tokenizer_free(&a);
		tokenizer_free(&b);
	}
}

/* Files that are not byte-level BPE tokenizers: each a clear error. */
/* The test tokenizer's custom_word (listed at 3000, the id after its 3000
 * vocabulary entries) taken out of a file whose vocabulary grew: the
 * tokenizers library would give it another id, and strata refuses such a
 * file. */
static void drop_custom_word(cJSON *t)
{
	cJSON *list = cJSON_GetObjectItem(t, "added_tokens");
	for (int i = cJSON_GetArraySize(list) - 1; i >= 0; i--)
		if (!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(list, i), "content")->valuestring,
			    "custom_word"))
			cJSON_DeleteItemFromArray(list, i);
}

/* Two tokenizers strata refused though they are valid (found by fuzzing):
 * a Split by a plain String pattern (PCRE2_UCP beside PCRE2_LITERAL is an
 * error) and a merge of two tokens of 1024 bytes or more (a fixed buffer).
 * Both made from the GPT-2 test tokenizer; the ids are the tokenizers
 * library's (0.22) for the same files. */
Test(io, bpe_string_split_and_long_merge)
{
	char dir[] = "/tmp/strata-bpe2-XXXXXX", path[256];
	cr_assert(mkdtemp(dir));
	for (int k = 0; k < 2; k++) {
		cJSON *t = tu_read_json("tests/data/tokenizers/gpt2/tokenizer.json");
		if (k == 0) {
			cJSON *pre = cJSON_Parse(
				"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
				"\"pattern\": {\"String\": \" \"}, \"behavior\": \"Isolated\", \"invert\": false}, "
				"{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
				"\"use_regex\": true}]}");
			cJSON_ReplaceItemInObject(t, "pre_tokenizer", pre);
		} else {
			cJSON *model = cJSON_GetObjectItem(t, "model");
			cJSON *vocab = cJSON_GetObjectItem(model, "vocab");
			const int n = cJSON_GetArraySize(vocab) + 1000;
			char a[601], aa[1201];
			memset(a, 'a', 600), a[600] = '\0';
			memset(aa, 'a', 1200), aa[1200] = '\0';
			cJSON_AddNumberToObject(vocab, a, n);
			cJSON_AddNumberToObject(vocab, aa, n + 1);
			cJSON *pair = cJSON_CreateArray();
			cJSON_AddItemToArray(pair, cJSON_CreateString(a));
			cJSON_AddItemToArray(pair, cJSON_CreateString(a));
			cJSON_AddItemToArray(cJSON_GetObjectItem(model, "merges"), pair);
			drop_custom_word(t);
		}
		snprintf(path, sizeof path, "%s/t%d.json", dir, k);
		char *text = cJSON_PrintUnformatted(t);
		cr_assert_eq(fs_write_file_atomic(path, text, strlen(text)), ST_OK);
		free(text);
		cJSON_Delete(t);
		struct st_tokenizer tk;
		cr_assert_eq(tokenizer_load(&tk, path), ST_OK, "case %d refused", k);
		const uint32_t want[2][8] = {{73, 575, 80, 222, 88, 282, 324, 200},
					     {73, 575, 80, 1176, 200}};
		const size_t n_want = k ? 5 : 8;
		uint32_t ids[64];
		const size_t n = tokenizer_encode(&tk, ids, "hello world\n", 12);
		cr_expect(n == n_want && !memcmp(ids, want[k], n * sizeof *ids), "case %d: %zu ids", k, n);
		tokenizer_free(&tk);
		unlink(path);
	}
	rmdir(dir);
}

/* Each of texts encoded by tk gives the ids listed at the same index of
 * want (the tokenizers library's). */
static void expect_library_ids(const struct st_tokenizer *tk, const cJSON *texts,
			       const cJSON *want, const char *what)
{
	for (int i = 0; i < cJSON_GetArraySize(texts); i++) {
		const char *t = cJSON_GetArrayItem(texts, i)->valuestring;
		const cJSON *w = cJSON_GetArrayItem(want, i);
		uint32_t ids[64];
		const size_t n = tokenizer_encode(tk, ids, t, strlen(t));
		int same = n == (size_t)cJSON_GetArraySize(w);
		for (size_t k = 0; same && k < n; k++)
			same = ids[k] == (uint32_t)cJSON_GetArrayItem(w, (int)k)->valuedouble;
		cr_expect(same, "%s: text %d: %zu ids differ from the library's", what, i, n);
	}
}

/* Whitespace as the tokenizers library's regex engine reads \s (Unicode's
 * White_Space): U+180E, a format character since Unicode 6.3, is not
 * whitespace (PCRE2's \s kept it, so "\u180e's" was cut before the
 * apostrophe); the other spaces, U+3000, U+2028, U+0085, \v and U+00A0,
 * stay whitespace. The ids are the library's (0.23) for each test
 * tokenizer, the last with a prefix space. */
Test(io, bpe_white_space_as_unicode)
{
	const char *ref =
		"{\"texts\": [\"\\u180e's\", \"it\\u180e's\", \"a \\u180eb\", \"x\\u180e\\u180e  y\", \""
		"\\u3000's \\u2028x\\u0085y\\u000bz\\u00a0's\", \"tab\\t\\u180e\\n\"], \"ids\": {\"gpt2\":"
		" [[159, 256, 238, 8, 84], [295, 159, 256, 238, 8, 84], [66, 222, 159, 256, 238, 67], [89"
		", 159, 256, 238, 159, 256, 238, 222, 308], [161, 224, 224, 501, 222, 160, 224, 103, 89, "
		"128, 229, 90, 201, 91, 128, 256, 501], [85, 471, 199, 159, 256, 238, 200]], \"llama3\": "
		"[[160, 257, 239, 9, 85], [297, 160, 257, 239, 9, 85], [67, 223, 160, 257, 239, 68], [90,"
		" 160, 257, 239, 160, 257, 239, 223, 310], [162, 225, 225, 504, 223, 161, 225, 104, 90, 1"
		"29, 230, 91, 202, 92, 129, 257, 504], [86, 474, 200, 160, 257, 239, 201]], \"smollm\": ["
		"[160, 257, 239, 9, 85], [296, 160, 257, 239, 9, 85], [67, 223, 160, 257, 239, 68], [90, "
		"160, 257, 239, 160, 257, 239, 223, 309], [162, 225, 225, 502, 223, 161, 225, 104, 90, 12"
		"9, 230, 91, 202, 92, 129, 257, 502], [86, 472, 200, 160, 257, 239, 201]], \"xllama3\": ["
		"[223, 160, 257, 239, 9, 264], [357, 223, 160, 257, 239, 9, 264], [262, 223, 160, 257, 23"
		"9, 273], [223, 90, 223, 160, 257, 239, 160, 257, 239, 223, 310], [223, 162, 225, 225, 22"
		"3, 504, 223, 223, 161, 225, 104, 90, 223, 129, 230, 91, 223, 202, 92, 223, 129, 257, 223"
		", 504], [883, 223, 200, 223, 160, 257, 239, 201]]}}";
	cJSON *root = cJSON_Parse(ref);
	cr_assert(root);
	const cJSON *texts = cJSON_GetObjectItem(root, "texts"), *tok;
	cJSON_ArrayForEach(tok, cJSON_GetObjectItem(root, "ids"))
	{
		char path[256];
		snprintf(path, sizeof path, "tests/data/tokenizers/%s", tok->string);
		struct st_tokenizer tk;
		cr_assert_eq(tokenizer_load(&tk, path), ST_OK, "%s", path);
		expect_library_ids(&tk, texts, tok, tok->string);
		tokenizer_free(&tk);
	}
	cJSON_Delete(root);
}

/* The rewrite of \s and \S (regex_ws.h) on the pattern syntax around them:
 * classes (negated, a leading ], POSIX names, a "[:" that names none),
 * escapes (\\s, \c\, \Q...\E), comments, and extended mode left alone. */
Test(io, regex_whitespace_rewrite)
{
	static const char *const cases[][2] = {
		{"\\s+(?!\\S)", "[\\t-\\r\\x{85}\\p{Z}]+(?![\\S\\x{180E}])"},
		{"[^\\s\\p{L}]", "[^\\t-\\r\\x{85}\\p{Z}\\p{L}]"},
		{"[\\s\\S]", "[\\t-\\r\\x{85}\\p{Z}\\S\\x{180E}]"},
		{"[^\\S\\r\\n]+", "[^\\S\\x{180E}\\r\\n]+"},
		{"[]\\s]", "[]\\t-\\r\\x{85}\\p{Z}]"},
		{"[[:alpha:]\\s]|\\s", "[[:alpha:]\\t-\\r\\x{85}\\p{Z}]|[\\t-\\r\\x{85}\\p{Z}]"},
		{"[[:]\\s", "[[:][\\t-\\r\\x{85}\\p{Z}]"},
		{"\\\\s", "\\\\s"},
		{"\\c\\s", "\\c\\s"}, /* control-backslash, then s */
		{"\\Q\\s[\\E\\s", "\\Q\\s[\\E[\\t-\\r\\x{85}\\p{Z}]"},
		{"(?#[)\\s", "(?#[)[\\t-\\r\\x{85}\\p{Z}]"},
		{"(?x)a # [\n\\s", "(?x)a # [\n\\s"},
		{"(?i-x:a)\\s", "(?i-x:a)[\\t-\\r\\x{85}\\p{Z}]"},
		{"(?<!\\x{41})\\s|(?=x)\\S", "(?<!\\x{41})[\\t-\\r\\x{85}\\p{Z}]|(?=x)[\\S\\x{180E}]"},
		{"(?<ex>\\s)\\(?x)", "(?<ex>[\\t-\\r\\x{85}\\p{Z}])\\(?x)"},
		{"(?i:'s)\\s", "(?i:'s)[\\t-\\r\\x{85}\\p{Z}]"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char *got = regex_unicode_whitespace(cases[i][0]);
		cr_assert(got);
		cr_expect_str_eq(got, cases[i][1], "%s", cases[i][0]);
		free(got);
	}
}

/* \s and \S as White_Space and its complement in a file's own Split regex
 * too, inside classes and out: "[\s\S]{2}" pairs U+180E with its neighbour
 * (with \S left to PCRE2 in a class, it matched neither \s nor \S), and
 * "[^\S\r\n]+" leaves it out of a space run. Merges added to the GPT-2
 * test tokenizer (U+180E as one token, with a space on either side, and
 * "a" with a space) show where the pieces end; the ids are the tokenizers
 * library's (0.23). */
Test(io, bpe_white_space_in_split_regexes)
{
	const char *ref =
		"{\"patterns\": [\"[\\\\s\\\\S]{2}\", \"[^\\\\S\\\\r\\\\n]+\", \"\\\\S+|\\\\s+\", \"["
		"^\\\\s]+|[\\\\s]+\"], \"texts\": [\"a \\u180e b\", \"x\\u180e\\u180ey z\", \"\\u180e"
		"\\u180e \\t\\u180e\\n\", \"a\\u180e \\u180e\"], \"ids\": {\"[\\\\s\\\\S]{2}\": [[301"
		"4, 3013, 67], [89, 3011, 3011, 90, 222, 91], [3011, 3011, 222, 199, 3011, 200], [66,"
		" 3011, 3012]], \"[^\\\\S\\\\r\\\\n]+\": [[66, 222, 3011, 222, 67], [89, 3011, 3011, "
		"90, 222, 91], [3011, 3011, 222, 199, 3011, 200], [66, 3011, 222, 3011]], \"\\\\S+|\\"
		"\\s+\": [[66, 222, 3011, 222, 67], [89, 3011, 3011, 90, 222, 91], [3011, 3011, 222, "
		"199, 3011, 200], [66, 3011, 222, 3011]], \"[^\\\\s]+|[\\\\s]+\": [[66, 222, 3011, 22"
		"2, 67], [89, 3011, 3011, 90, 222, 91], [3011, 3011, 222, 199, 3011, 200], [66, 3011,"
		" 222, 3011]]}}";
	cJSON *root = cJSON_Parse(ref);
	cr_assert(root);
	const cJSON *texts = cJSON_GetObjectItem(root, "texts");
	static const char *const merges[5][2] = {
		{"\u00e1", "\u0142"}, {"\u00e1\u0142", "\u0130"}, {"\u0120", "\u00e1\u0142\u0130"},
		{"\u00e1\u0142\u0130", "\u0120"}, {"a", "\u0120"}};
	char dir[] = "/tmp/strata-bpe4-XXXXXX", path[256];
	cr_assert(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/t.json", dir);
	const cJSON *pat;
	cJSON_ArrayForEach(pat, cJSON_GetObjectItem(root, "patterns"))
	{
		cJSON *t = tu_read_json("tests/data/tokenizers/gpt2/tokenizer.json");
		cJSON *model = cJSON_GetObjectItem(t, "model");
		for (int k = 0; k < 5; k++) {
			char joined[64];
			snprintf(joined, sizeof joined, "%s%s", merges[k][0], merges[k][1]);
			cJSON_AddNumberToObject(cJSON_GetObjectItem(model, "vocab"), joined, 3010 + k);
			cJSON *pair = cJSON_CreateArray();
			cJSON_AddItemToArray(pair, cJSON_CreateString(merges[k][0]));
			cJSON_AddItemToArray(pair, cJSON_CreateString(merges[k][1]));
			cJSON_AddItemToArray(cJSON_GetObjectItem(model, "merges"), pair);
		}
		drop_custom_word(t);
		char pre[512];
		cJSON *re = cJSON_CreateString(pat->valuestring);
		char *quoted = cJSON_PrintUnformatted(re);
		snprintf(pre, sizeof pre,
			 "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
			 "{\"Regex\": %s}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
			 "\"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}",
			 quoted);
		free(quoted);
		cJSON_Delete(re);
		cJSON_ReplaceItemInObject(t, "pre_tokenizer", cJSON_Parse(pre));
		char *text = cJSON_PrintUnformatted(t);
		cr_assert_eq(fs_write_file_atomic(path, text, strlen(text)), ST_OK);
		free(text);
		cJSON_Delete(t);
		struct st_tokenizer tk;
		cr_assert_eq(tokenizer_load(&tk, path), ST_OK, "%s", pat->valuestring);
		const cJSON *want_all = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "ids"), pat->valuestring);
		expect_library_ids(&tk, texts, want_all, pat->valuestring);
		tokenizer_free(&tk);
	}
	unlink(path);
	rmdir(dir);
	cJSON_Delete(root);
}

/* A text encoded a part at a time (strata prepare reads a file so) gives
 * the whole text's ids where the prefix space goes on the first stage's
 * texts (GPT-2's ByteLevel with add_prefix_space: every run between added
 * tokens) or the second's (a Split, then ByteLevel with it: every piece),
 * and through three stages (SmolLM's Digits, then ByteLevel's regex, with
 * and without the prefix space), and for Splits that match empty or look
 * behind. The text: llama3's reference samples joined, with added tokens
 * among them.
 * Parts of 64 bytes must also move on without waiting for the text's end. */
Test(io, bpe_encodes_in_parts)
{
	char dir[] = "/tmp/strata-bpe5-XXXXXX", path[256];
	cr_assert(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/t.json", dir);
	cJSON *t = tu_read_json("tests/data/tokenizers/gpt2/tokenizer.json");
	cJSON_ReplaceItemInObject(cJSON_GetObjectItem(t, "pre_tokenizer"), "add_prefix_space",
				  cJSON_CreateTrue());
	char *json = cJSON_PrintUnformatted(t);
	cr_assert_eq(fs_write_file_atomic(path, json, strlen(json)), ST_OK);
	free(json);
	cJSON_Delete(t);
	/* SmolLM's stages with the prefix space: the Digits split leaves gaps,
	 * which go on down a stage part by part */
	char path2[256];
	snprintf(path2, sizeof path2, "%s/s.json", dir);
	t = tu_read_json("tests/data/tokenizers/smollm/tokenizer.json");
	cJSON *stages = cJSON_GetObjectItem(cJSON_GetObjectItem(t, "pre_tokenizer"), "pretokenizers");
	cJSON_ReplaceItemInObject(cJSON_GetArrayItem(stages, 1), "add_prefix_space", cJSON_CreateTrue());
	json = cJSON_PrintUnformatted(t);
	cr_assert_eq(fs_write_file_atomic(path2, json, strlen(json)), ST_OK);
	free(json);
	cJSON_Delete(t);
	/* Splits whose regex can match empty ((?=t): a gap ends only at the
	 * next t) or looks behind ((?<=\d): such a text is encoded at its last
	 * part, whole); both gave other ids in parts */
	char path3[256], path4[256];
	static const char *const splits[2] = {"(?=t)", "(?<=\\d)\\p{L}+|\\d|\\p{L}"};
	for (int k = 0; k < 2; k++) {
		snprintf(k ? path4 : path3, sizeof path3, "%s/r%d.json", dir, k);
		t = tu_read_json("tests/data/tokenizers/gpt2/tokenizer.json");
		cJSON *pt = cJSON_Parse(
			"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
			"{\"Regex\": \"\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
			"\"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}");
		cr_assert(pt);
		cJSON_ReplaceItemInObject(
			cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(pt, "pretokenizers"), 0),
					    "pattern"),
			"Regex", cJSON_CreateString(splits[k]));
		cJSON_ReplaceItemInObject(t, "pre_tokenizer", pt);
		json = cJSON_PrintUnformatted(t);
		cr_assert_eq(fs_write_file_atomic(k ? path4 : path3, json, strlen(json)), ST_OK);
		free(json);
		cJSON_Delete(t);
	}
	cJSON *ref = tu_read_json("tests/data/tokenizers/llama3/ref.json");
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	const cJSON *sample;
	int k = 0;
	cJSON_ArrayForEach(sample, cJSON_GetObjectItem(ref, "samples"))
		fprintf(f, "%s%s", cJSON_GetObjectItem(sample, "text")->valuestring,
			k++ % 3 ? "\n" : "<|endoftext|>  x<|begin_of_text|>");
	fclose(f);
	const char *const toks[7] = {path,  "tests/data/tokenizers/xllama3", path2,
				     "tests/data/tokenizers/smollm", "tests/data/tokenizers/llama3",
				     path3, path4};
	for (int i = 0; i < 7; i++) {
		struct st_tokenizer tk;
		cr_assert_eq(tokenizer_load(&tk, toks[i]), ST_OK, "%s", toks[i]);
		check_parts_match_whole(&tk, toks[i], text, len);
		uint32_t *ids = malloc(2 * tokenizer_max_ids(len) * sizeof *ids);
		int stalls;
		encode_in_parts(&tk, text, len, 64, ids, &stalls);
		if (i < 5) /* (?=t) waits for a t, the lookbehind for the last part */
			cr_expect_lt(stalls, (int)(len / 64 / 4),
				     "%s: %d of %zu parts of 64 bytes encoded nothing", toks[i], stalls,
				     len / 64);
		free(ids);
		tokenizer_free(&tk);
	}
	free(text);
	cJSON_Delete(ref);
	unlink(path);
	unlink(path2);
	unlink(path3);
	unlink(path4);
	rmdir(dir);
}

/* Added tokens matched leftmost-longest through their byte trie: nested
 * ones ("<x>" and "<x>y"), one whose text starts inside another's ("zz<x"
 * before "<x>y"), near misses ("<t30>", "<x" at the end) and 3000 sharing
 * the prefix "<t". The ids are the tokenizers library's (0.23) for the
 * same file. (A scan of every token with the text's byte took minutes with
 * 10^4 tokens sharing one; the trie walks a token's bytes once.) */
Test(io, bpe_added_tokens_longest_first)
{
	char dir[] = "/tmp/strata-bpe3-XXXXXX", path[256];
	cr_assert(mkdtemp(dir));
	cJSON *t = tu_read_json("tests/data/tokenizers/gpt2/tokenizer.json");
	cJSON *added = cJSON_GetObjectItem(t, "added_tokens");
	for (int i = 0; i < 3004; i++) {
		static const char *first[4] = {"<x>", "<x>y", "<xz", "zz<x"};
		char content[16];
		if (i < 4)
			snprintf(content, sizeof content, "%s", first[i]);
		else
			snprintf(content, sizeof content, "<t%04d>", i - 4);
		cJSON *a = cJSON_CreateObject();
		cJSON_AddNumberToObject(a, "id", 3001 + i);
		cJSON_AddStringToObject(a, "content", content);
		cJSON_AddBoolToObject(a, "special", 1);
		cJSON_AddItemToArray(added, a);
	}
	snprintf(path, sizeof path, "%s/t.json", dir);
	char *text = cJSON_PrintUnformatted(t);
	cr_assert_eq(fs_write_file_atomic(path, text, strlen(text)), ST_OK);
	free(text);
	cJSON_Delete(t);
	struct st_tokenizer tk;
	cr_assert_eq(tokenizer_load(&tk, path), ST_OK);
	static const struct {
		const char *text;
		uint32_t ids[32];
		size_t n;
	} cases[] = {
		{"a<x>yb<x>c<xzd zz<x>y <t0042><t2999>x<t30> <x",
		 {66, 3002, 67, 3001, 68, 3003, 69, 222, 3004, 31, 90, 222, 3047, 6004, 89, 29, 85, 20,
		  17, 31, 222, 29, 89},
		 23},
		{"<t<t0<t000<t0000<t0000>>",
		 {29, 85, 29, 85, 17, 29, 85, 17, 17, 17, 29, 85, 17, 17, 17, 17, 3005, 31},
		 18},
		{"zz<xz<x>yy<|user|><x><x>y", {3004, 91, 3002, 90, 1, 3001, 3002}, 7},
	};
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		uint32_t ids[128];
		const size_t n = tokenizer_encode(&tk, ids, cases[c].text, strlen(cases[c].text));
		cr_expect(n == cases[c].n && !memcmp(ids, cases[c].ids, n * sizeof *ids),
			  "\"%s\": %zu ids, want %zu", cases[c].text, n, cases[c].n);
		check_parts_match_whole(&tk, "added", cases[c].text, strlen(cases[c].text));
	}
	tokenizer_free(&tk);
	/* in two passes, as the library cuts them: the tokens with normalized
	 * false first, then those with normalized true in the text between
	 * (one leftmost-longest pass over both took "ab<" out of "xab<s>y") */
	t = tu_read_json("tests/data/tokenizers/gpt2/tokenizer.json");
	added = cJSON_GetObjectItem(t, "added_tokens");
	cJSON_AddItemToArray(added, cJSON_Parse("{\"id\": 3001, \"content\": \"<s>\", "
						"\"normalized\": false, \"special\": true}"));
	cJSON_AddItemToArray(added, cJSON_Parse("{\"id\": 3002, \"content\": \"ab<\", "
						"\"normalized\": true, \"special\": false}"));
	text = cJSON_PrintUnformatted(t);
	cr_assert_eq(fs_write_file_atomic(path, text, strlen(text)), ST_OK);
	free(text);
	cJSON_Delete(t);
	cr_assert_eq(tokenizer_load(&tk, path), ST_OK);
	static const uint32_t two[2][4] = {{89, 471, 3001, 90}, {3002, 84}};
	static const char *const two_texts[2] = {"xab<s>y", "ab<s"};
	for (int c = 0; c < 2; c++) {
		uint32_t ids[16];
		const size_t n = tokenizer_encode(&tk, ids, two_texts[c], strlen(two_texts[c]));
		cr_expect(n == (c ? 2u : 4u) && !memcmp(ids, two[c], n * sizeof *ids),
			  "\"%s\": %zu ids", two_texts[c], n);
		check_parts_match_whole(&tk, "two passes", two_texts[c], strlen(two_texts[c]));
	}
	tokenizer_free(&tk);
	unlink(path);
	rmdir(dir);
}

/* A fresh directory from the template dir (mkdtemp) holding a copy of the
 * test tokenizer `name`'s tokenizer.json, whose path goes into file. */
static void copy_tokenizer(char *dir, const char *name, char *file, size_t n)
{
	cr_assert(mkdtemp(dir));
	char src[256], *text = NULL;
	size_t len = 0;
	snprintf(src, sizeof src, "tests/data/tokenizers/%s/tokenizer.json", name);
	cr_assert_eq(fs_read_file(src, &text, &len), ST_OK);
	snprintf(file, n, "%s/tokenizer.json", dir);
	cr_assert_eq(fs_write_file_atomic(file, text, len), ST_OK);
	free(text);
}

/* A model directory's config.json, read for its end token, is read as every
 * JSON file is: a key given twice refused (transformers would take the
 * last id, strata's parser the first). An id there that names an ordinary
 * token of tokenizer.json (strata init's byte ids 256/257 beside a BPE
 * tokenizer copied in) is warned and not used: sample stopped at that
 * letter. */
Test(io, tokenizer_dir_config_read_strictly)
{
	char dir[] = "/tmp/strata-tokcfg-XXXXXX", path[256];
	copy_tokenizer(dir, "gpt2", path, sizeof path);
	snprintf(path, sizeof path, "%s/config.json", dir);
	const char *twice = "{\"eos_token_id\": 5, \"eos_token_id\": 7}";
	cr_assert_eq(fs_write_file_atomic(path, twice, strlen(twice)), ST_OK);
	struct st_tokenizer tk;
	const int old = st_log_mute(1);
	cr_expect_eq(tokenizer_load(&tk, dir), ST_FAIL, "a key given twice was read");
	st_log_mute(old);
	const char *once = "{\"eos_token_id\": 1}"; /* <|user|>, an added token */
	cr_assert_eq(fs_write_file_atomic(path, once, strlen(once)), ST_OK);
	cr_assert_eq(tokenizer_load(&tk, dir), ST_OK);
	cr_expect_eq(tk.eos_id, 1);
	tokenizer_free(&tk);
	const char *plain = "{\"eos_token_id\": 7}"; /* an ordinary token */
	cr_assert_eq(fs_write_file_atomic(path, plain, strlen(plain)), ST_OK);
	st_log_mute(1);
	cr_assert_eq(tokenizer_load(&tk, dir), ST_OK);
	st_log_mute(old);
	cr_expect_eq(tk.eos_id, 0, "config.json's ordinary token 7 became <eos>");
	tokenizer_free(&tk);
	/* a list: its first is <eos>, and every added token of it an end that
	 * sample stops at (Llama 3.1 Instruct lists three; it stopped at the
	 * first alone), an ordinary token (7) and one past the vocabulary
	 * left out; read as well through the tokenizer.json as a file */
	const char *list = "{\"vocab_size\": 3001, \"eos_token_id\": [1, 7, 0, 99999]}";
	cr_assert_eq(fs_write_file_atomic(path, list, strlen(list)), ST_OK);
	char file[300];
	snprintf(file, sizeof file, "%s/tokenizer.json", dir);
	for (int k = 0; k < 2; k++) {
		cr_assert_eq(tokenizer_load(&tk, k ? file : dir), ST_OK);
		cr_expect_eq(tk.eos_id, 1);
		cr_expect(tk.n_end == 2 && tk.end_ids[0] == 1 && tk.end_ids[1] == 0, "%d ends: %d %d",
			  tk.n_end, tk.end_ids[0], tk.end_ids[1]);
		/* a second config.json without eos_token_id (sample's --model
		 * beside another --tokenizer) keeps the list with its <eos> */
		char other[] = "/tmp/strata-tokcfg2-XXXXXX", opath[300];
		cr_assert(mkdtemp(other));
		snprintf(opath, sizeof opath, "%s/config.json", other);
		cr_assert_eq(fs_write_file_atomic(opath, "{\"vocab_size\": 3001}", 20), ST_OK);
		cr_assert_eq(tokenizer_model_ids(&tk, other), ST_OK);
		cr_expect(tk.eos_id == 1 && tk.n_end == 2, "eos %d, %d ends", tk.eos_id, tk.n_end);
		unlink(opath);
		rmdir(other);
		tokenizer_free(&tk);
	}
	/* beside a tokenizer.json given as a file, a config.json that is no
	 * model's (no model_type, architectures or vocab_size) or does not
	 * parse is left out: <eos> is the tokenizer's own (it stopped the load) */
	const char *notmodel[2] = {"{\"eos_token_id\": 1}", "{\"a\": 1, \"a\": 2}"};
	for (int k = 0; k < 2; k++) {
		cr_assert_eq(fs_write_file_atomic(path, notmodel[k], strlen(notmodel[k])), ST_OK);
		st_log_mute(1);
		cr_assert_eq(tokenizer_load(&tk, file), ST_OK, "case %d", k);
		st_log_mute(old);
		cr_expect_eq(tk.eos_id, 0, "case %d: the config.json beside was read", k);
		tokenizer_free(&tk);
	}
	/* generation_config.json's end tokens join config.json's, after its
	 * <eos> (Llama 3 Instruct lists <|eot_id|> there alone: sample ran on
	 * past it); ordinary tokens, ids past the vocabulary and one already
	 * listed left out; one that does not parse warned and left out */
	const char *one = "{\"vocab_size\": 3001, \"eos_token_id\": 1}";
	cr_assert_eq(fs_write_file_atomic(path, one, strlen(one)), ST_OK);
	char gen[300];
	snprintf(gen, sizeof gen, "%s/generation_config.json", dir);
	const char *gens[3] = {"{\"eos_token_id\": [1, 7, 0, 99999]}", "{\"eos_token_id\": 0}",
			       "{\"eos_token_id\": [0], \"eos_token_id\": [2]}"};
	for (int k = 0; k < 3; k++) {
		cr_assert_eq(fs_write_file_atomic(gen, gens[k], strlen(gens[k])), ST_OK);
		st_log_mute(k == 2);
		struct capture cap;
		cap_begin(&cap);
		cr_assert_eq(tokenizer_load(&tk, dir), ST_OK, "case %d", k);
		char *said = cap_end(&cap);
		st_log_mute(old);
		/* the ordinary token is said (transformers' generate stops at it;
		 * it was left out without a word) */
		if (k == 0)
			cr_expect(strstr(said, "generation_config.json: end token 7 is '") &&
					  strstr(said, "sample does not stop at it"),
				  "%s", said);
		free(said);
		cr_expect_eq(tk.eos_id, 1, "case %d", k);
		if (k < 2)
			cr_expect(tk.n_end == 2 && tk.end_ids[0] == 1 && tk.end_ids[1] == 0,
				  "case %d: %d ends: %d %d", k, tk.n_end, tk.end_ids[0], tk.end_ids[1]);
		else
			cr_expect(tk.n_end <= 1, "a generation_config.json that does not parse was read");
		tokenizer_free(&tk);
	}
	unlink(gen);
	unlink(path);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	unlink(path);
	rmdir(dir);
}

/* A normalizer Sequence of no normalizers (DeepSeek-V3's tokenizer.json has
 * one) changes no text: loaded, with the ids the file gives without it; one
 * that holds a normalizer is refused naming that one (it was refused as
 * "normalizer Sequence", the empty one too). */
/* <bos> and <eos> as transformers' tokenizer takes them: tokenizer_config.json's
 * bos_token / eos_token (a text, an {"content": ...} object, or null for
 * none) beside the tokenizer.json, over the names strata knows, which
 * picked <|im_start|> as the <bos> of SmolLM2's vocabulary (its file names
 * <|endoftext|>); a config.json's bos_token_id does not replace the file's,
 * and a config.json with "bos_token_id": null (Qwen2's) means none. */
Test(io, tokenizer_config_names_bos_and_eos)
{
	char dir[] = "/tmp/strata-tokbos-XXXXXX", path[256], tc[256], file[256];
	copy_tokenizer(dir, "smollm", file, sizeof file);
	snprintf(tc, sizeof tc, "%s/tokenizer_config.json", dir);
	snprintf(path, sizeof path, "%s/config.json", dir);
	struct st_tokenizer tk;
	/* no file: the names (<|im_start|> 1, <|endoftext|> 0) */
	cr_assert_eq(tokenizer_load(&tk, dir), ST_OK);
	cr_expect(tk.bos_id == 1 && tk.eos_id == 0, "bos %d eos %d", tk.bos_id, tk.eos_id);
	tokenizer_free(&tk);
	const struct {
		const char *tok_config, *config;
		int bos, eos;
	} cases[] = {
		{"{\"bos_token\": \"<|endoftext|>\", \"eos_token\": \"<|im_end|>\"}", NULL, 0, 2},
		{"{\"bos_token\": {\"content\": \"<|endoftext|>\", \"lstrip\": false}}", NULL, 0, 0},
		{"{\"bos_token\": null, \"eos_token\": \"<|endoftext|>\"}", NULL, -1, 0},
		/* the model's config.json: its <eos> still wins, its <bos> not */
		{"{\"bos_token\": null}", "{\"vocab_size\": 3001, \"bos_token_id\": 1, \"eos_token_id\": 2}", -1, 2},
		{NULL, "{\"vocab_size\": 3001, \"bos_token_id\": null, \"eos_token_id\": 0}", -1, 0},
		/* a text the tokenizer does not hold: warned, the names stand */
		{"{\"bos_token\": \"<s>\"}", NULL, 1, 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		unlink(tc);
		unlink(path);
		if (cases[i].tok_config)
			cr_assert_eq(fs_write_file_atomic(tc, cases[i].tok_config, strlen(cases[i].tok_config)),
				     ST_OK);
		if (cases[i].config)
			cr_assert_eq(fs_write_file_atomic(path, cases[i].config, strlen(cases[i].config)), ST_OK);
		for (int k = 0; k < 2; k++) { /* the directory, and the file in it */
			const int old = st_log_mute(1);
			cr_assert_eq(tokenizer_load(&tk, k ? file : dir), ST_OK, "case %zu", i);
			st_log_mute(old);
			cr_expect(tk.bos_id == cases[i].bos && tk.eos_id == cases[i].eos,
				  "case %zu (%s): bos %d eos %d, want %d %d", i, k ? "file" : "dir", tk.bos_id,
				  tk.eos_id, cases[i].bos, cases[i].eos);
			tokenizer_free(&tk);
		}
	}
	unlink(tc);
	unlink(path);
	unlink(file);
	rmdir(dir);
}

Test(io, bpe_empty_normalizer_sequence)
{
	cJSON *root = tu_read_json("tests/data/tokenizers/gpt2/tokenizer.json");
	cJSON_DeleteItemFromObjectCaseSensitive(root, "normalizer");
	cJSON *norm = cJSON_AddObjectToObject(root, "normalizer");
	cJSON_AddStringToObject(norm, "type", "Sequence");
	cJSON *list = cJSON_AddArrayToObject(norm, "normalizers");
	char path[256];
	tpath(path, "tokenizer.json");
	char *text = cJSON_PrintUnformatted(root);
	cr_assert_eq(fs_write_file_atomic(path, text, strlen(text)), ST_OK);
	free(text);
	struct st_tokenizer tk, ref;
	cr_assert_eq(tokenizer_load(&tk, path), ST_OK, "an empty normalizer Sequence was refused");
	cr_assert_eq(tokenizer_load(&ref, "tests/data/tokenizers/gpt2"), ST_OK);
	const char *s = "caf\xc3\xa9 e\xcc\x81 <|endoftext|> don't  123\n";
	uint32_t a[128], b[128];
	const size_t na = tokenizer_encode(&tk, a, s, strlen(s)), nb = tokenizer_encode(&ref, b, s, strlen(s));
	cr_expect(na == nb && !memcmp(a, b, na * sizeof *a), "other ids with an empty normalizer Sequence");
	tokenizer_free(&tk);
	tokenizer_free(&ref);
	cJSON *nfc = cJSON_CreateObject();
	cJSON_AddStringToObject(nfc, "type", "NFC");
	cJSON_AddItemToArray(list, nfc);
	text = cJSON_PrintUnformatted(root);
	cr_assert_eq(fs_write_file_atomic(path, text, strlen(text)), ST_OK);
	free(text);
	cJSON_Delete(root);
	const int old = st_log_mute(1);
	cr_expect_eq(tokenizer_load(&tk, path), ST_FAIL, "a Sequence holding NFC was accepted");
	st_log_mute(old);
	cr_expect(strstr(st_log_last_error(), "normalizer NFC is not supported"), "%s",
		  st_log_last_error());
}

/* Model fields the tokenizers library reads as no change are taken: a
 * model without "type" (read as the BPE its vocab and merges make) and a
 * "dropout" of 0 give the file's ids; a dropout above 0 is refused. */
Test(io, bpe_untyped_model_and_zero_dropout)
{
	struct st_tokenizer ref;
	cr_assert_eq(tokenizer_load(&ref, "tests/data/tokenizers/gpt2"), ST_OK);
	const char *s = "caf\xc3\xa9 <|endoftext|> don't  123\n";
	uint32_t a[128], b[128];
	const size_t nb = tokenizer_encode(&ref, b, s, strlen(s));
	tokenizer_free(&ref);
	for (int k = 0; k < 3; k++) {
		cJSON *root = tu_read_json("tests/data/tokenizers/gpt2/tokenizer.json");
		cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
		if (k == 0) {
			cJSON_DeleteItemFromObjectCaseSensitive(model, "type");
		} else {
			cJSON_DeleteItemFromObjectCaseSensitive(model, "dropout");
			cJSON_AddNumberToObject(model, "dropout", k == 1 ? 0.0 : 0.1);
		}
		char path[256];
		tpath(path, "tokenizer.json");
		char *text = cJSON_PrintUnformatted(root);
		cJSON_Delete(root);
		cr_assert_eq(fs_write_file_atomic(path, text, strlen(text)), ST_OK);
		free(text);
		struct st_tokenizer tk;
		const int old = st_log_mute(1);
		const int rc = tokenizer_load(&tk, path);
		st_log_mute(old);
		if (k == 2) {
			cr_expect(rc == ST_FAIL && strstr(st_log_last_error(), "dropout is not supported"),
				  "%s", st_log_last_error());
			continue;
		}
		cr_assert_eq(rc, ST_OK, "case %d: %s", k, st_log_last_error());
		const size_t na = tokenizer_encode(&tk, a, s, strlen(s));
		cr_expect(na == nb && !memcmp(a, b, na * sizeof *a), "case %d: other ids", k);
		tokenizer_free(&tk);
	}
}

Test(io, bpe_bad_files)
{
	char dir[] = "/tmp/strata-bpe-XXXXXX";
	cr_assert(mkdtemp(dir));
	const char *cases[][2] = {
		{"not json", "{"},
		{"a WordPiece model", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}"},
		{"a normalizer", "{\"normalizer\": {\"type\": \"NFC\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}"},
		{"a Metaspace pre-tokenizer", "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Metaspace\"}}"},
		{"a vocabulary outside the byte alphabet", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\\u0100\\u0100\\u4e00\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}"},
		{"bytes without tokens", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char path[256];
		snprintf(path, sizeof path, "%s/t%zu.json", dir, i);
		FILE *f = fopen(path, "w");
		cr_assert(f);
		fputs(cases[i][1], f);
		fclose(f);
		struct st_tokenizer tk;
		cr_expect_eq(tokenizer_load(&tk, path), ST_FAIL, "%s was accepted", cases[i][0]);
	}
	struct st_tokenizer tk;
	cr_expect_eq(tokenizer_load(&tk, "/nonexistent/tokenizer.json"), ST_FAIL);
}

/* ---- fsutil ---------------------------------------------------------------- */

static void expect_file(const char *path, const char *want)
{
	char *text;
	size_t len;
	cr_assert_eq(fs_read_file(path, &text, &len), ST_OK);
	cr_assert_eq(len, strlen(want));
	cr_assert_str_eq(text, want);
	free(text);
}

Test(io, atomic_write_old_or_new)
{
	char p[256];
	tpath(p, "f.txt");
	cr_assert_eq(fs_write_file_atomic(p, "old content", 11), ST_OK);
	expect_file(p, "old content");
	cr_assert_eq(fs_write_file_atomic(p, "new", 3), ST_OK);
	expect_file(p, "new");
	/* A writer that dies before commit leaves the old file and no temp file. */
	struct fs_atomic a;
	cr_assert_eq(fs_atomic_begin(&a, p), ST_OK);
	cr_assert_eq(fs_atomic_write(&a, "partial", 7), ST_OK);
	expect_file(p, "new");
	fs_atomic_abort(&a);
	expect_file(p, "new");
	DIR *d = opendir(tdir);
	int entries = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		entries += e->d_name[0] != '.';
	closedir(d);
	cr_assert_eq(entries, 1, "temp file left behind");
	cr_assert_eq(fs_write_file_atomic(p, "", 0), ST_OK);
	expect_file(p, "");
}

Test(io, mkdir_p_nested)
{
	char p[256], f[256];
	tpath(p, "a/b//c/d/");
	cr_assert_eq(fs_mkdir_p(p), ST_OK);
	cr_assert(fs_is_dir(p));
	cr_assert_eq(fs_mkdir_p(p), ST_OK, "existing directories are fine");
	cr_assert_eq(fs_write_file_atomic(tpath(f, "a/b/file"), "x", 1), ST_OK);
	cr_assert(fs_exists(f) && !fs_is_dir(f));
	struct capture c;
	cap_begin(&c);
	int rc = fs_mkdir_p(tpath(p, "a/b/file/sub"));
	char *msg = cap_end(&c);
	cr_assert_eq(rc, ST_FAIL);
	cr_assert(strstr(msg, "exists and is not a directory") && strstr(msg, p), "got: %s", msg);
	free(msg);
}

Test(io, rmtree_removes_tree_not_symlink_targets)
{
	char p[256], q[256], keep[256];
	cr_assert_eq(fs_mkdir_p(tpath(p, "tree/x/y")), ST_OK);
	cr_assert_eq(fs_mkdir_p(tpath(keep, "keep")), ST_OK);
	cr_assert_eq(fs_write_file_atomic(tpath(q, "keep/precious"), "1", 1), ST_OK);
	cr_assert_eq(fs_write_file_atomic(tpath(q, "tree/x/y/f"), "1", 1), ST_OK);
	cr_assert_eq(fs_write_file_atomic(tpath(q, "tree/g"), "1", 1), ST_OK);
	cr_assert_eq(symlink(keep, tpath(q, "tree/x/link")), 0);
	cr_assert_eq(fs_rmtree(tpath(p, "tree")), ST_OK);
	cr_assert(!fs_exists(p));
	cr_assert(fs_exists(tpath(q, "keep/precious")), "rmtree followed a symlink");
	cr_assert_eq(fs_rmtree(p), ST_OK, "removing what is gone is fine");
	cr_assert_eq(fs_rmtree(q), ST_OK, "a plain file is removed too");
	cr_assert(!fs_exists(q));
}

Test(io, read_file_errors)
{
	char p[256];
	struct capture c;
	char *text, *msg;
	size_t len;
	cap_begin(&c);
	int rc = fs_read_file(tpath(p, "absent"), &text, &len);
	msg = cap_end(&c);
	cr_assert_eq(rc, ST_FAIL);
	cr_assert(strstr(msg, p) && strstr(msg, "No such file"), "got: %s", msg);
	cr_assert_null(text);
	free(msg);
	cap_begin(&c);
	rc = fs_read_file(tdir, &text, &len);
	msg = cap_end(&c);
	cr_assert_eq(rc, ST_FAIL);
	cr_assert(strstr(msg, "Is a directory"), "got: %s", msg);
	free(msg);
}

Test(io, dirname_cases)
{
	static const char *cases[][2] = {
		{"a/b/c", "a/b"}, {"c", "."},	  {"/c", "/"},	   {"/", "/"},
		{"a/b/", "a"},	  {"a//b", "a"},  {"", "."},	   {"./x", "."},
	};
	char out[64];
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		fs_dirname(out, sizeof out, cases[i][0]);
		cr_assert_str_eq(out, cases[i][1], "dirname(\"%s\")", cases[i][0]);
	}
	fs_dirname(out, 3, "abcdef/g");
	cr_assert_str_eq(out, "ab", "truncated to the buffer");
}

/* safetensors_load_raw, the loader of the 8-bit optimizer codes, takes a
 * tensor only with the dtype and shape asked for: not another dtype of the
 * same size (I8 for U8), not another shape with the same element count. */
Test(io, load_raw_checks_dtype_and_shape)
{
	char p[256];
	tpath(p, "raw.safetensors");
	uint8_t codes[24], back[24];
	for (int i = 0; i < 24; i++)
		codes[i] = (uint8_t)(i * 7);
	const struct st_tensor_out t = {"x.codes", ST_DT_U8, 2, {4, 6}, codes};
	cr_assert_eq(safetensors_write(p, &t, 1, NULL, 0), ST_OK);
	struct st_safetensors sf;
	cr_assert_eq(safetensors_open(&sf, p), ST_OK);
	const int64_t s46[2] = {4, 6}, s64[2] = {6, 4}, s24 = 24;
	cr_expect_eq(safetensors_load_raw(&sf, "x.codes", ST_DT_U8, 2, s46, back, 24), ST_OK);
	cr_expect(!memcmp(back, codes, 24));
	cr_expect_eq(safetensors_load_raw(&sf, "x.codes", ST_DT_I8, 2, s46, back, 24), ST_FAIL,
		     "a U8 tensor loaded as I8");
	cr_expect_eq(safetensors_load_raw(&sf, "x.codes", ST_DT_U8, 2, s64, back, 24), ST_FAIL,
		     "a (4, 6) tensor loaded as (6, 4)");
	cr_expect_eq(safetensors_load_raw(&sf, "x.codes", ST_DT_U8, 1, &s24, back, 24), ST_FAIL,
		     "a (4, 6) tensor loaded as (24)");
	safetensors_close(&sf);
}

/* A key twice in one object, at any depth, in any JSON file strata reads:
 * refused naming the key and the file, since cJSON would read the first and
 * transformers (Python's json) the last. Objects of more than 32 keys take
 * the allocated path. */
Test(io, json_duplicate_keys_refused)
{
	char dir[] = "/tmp/strata-dup-XXXXXX", path[64];
	cr_assert(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/config.json", dir);
	const char *base = "\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":128,"
			   "\"num_hidden_layers\":2,\"num_attention_heads\":4";
	const struct {
		const char *extra, *dup;
	} cases[] = {
		{"\"hidden_size\":128", "hidden_size"},
		{"\"rope_scaling\":{\"rope_type\":\"default\",\"rope_type\":\"llama3\"}", "rope_type"},
		{"\"x\":[1,{\"a\":1,\"b\":2,\"a\":3}]", "a"},
		{"\"rope_scaling\":{\"rope_type\":\"default\"},\"y\":{\"rope_type\":1}", NULL},
	};
	struct st_config c;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char text[512], want[128];
		snprintf(text, sizeof text, "{%s,%s}", base, cases[i].extra);
		write_bytes(path, text, strlen(text));
		cJSON *root = cJSON_Parse(text);
		const char *got = fs_json_duplicate_key(root);
		cr_expect(cases[i].dup ? got && !strcmp(got, cases[i].dup) : !got, "%s: found %s", text,
			  got ? got : "none");
		cJSON_Delete(root);
		struct capture cap;
		cap_begin(&cap);
		const int rc = config_load(&c, path);
		char *msg = cap_end(&cap);
		if (!cases[i].dup) {
			cr_expect_eq(rc, ST_OK, "%s: %s", text, msg);
			free(msg);
			continue;
		}
		snprintf(want, sizeof want, "config.json: the key \"%s\" appears twice in one object",
			 cases[i].dup);
		cr_expect_eq(rc, ST_FAIL, "%s loaded", text);
		cr_expect(strstr(msg, want), "%s: %s", text, msg);
		free(msg);
	}
	/* 40 keys, the repeated one last and first */
	char big[2048] = "{";
	for (int k = 0; k < 40; k++)
		snprintf(big + strlen(big), sizeof big - strlen(big), "\"k%d\":%d,", k, k);
	strcat(big, "\"k0\":1}");
	cJSON *root = cJSON_Parse(big);
	const char *got = fs_json_duplicate_key(root);
	cr_expect(got && !strcmp(got, "k0"), "40 keys: found %s", got ? got : "none");
	cJSON_Delete(root);
	big[strlen(big) - 9] = '}';
	big[strlen(big) - 8] = '\0';
	root = cJSON_Parse(big);
	cr_assert(root, "%s", big);
	cr_expect(!fs_json_duplicate_key(root), "%s", big);
	cJSON_Delete(root);
}
