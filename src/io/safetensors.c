/* safetensors: the weight and checkpoint format (layout in safetensors.h).
 *
 * Reading maps the file read-only and validates the whole header before any
 * tensor is touched: a file from the internet or a half-written checkpoint
 * must fail here, with the file and the problem named, and never later as a
 * wild read. After safetensors_open succeeds every tensor's [begin, end) lies
 * inside the data section, matches its dtype and shape, and overlaps no other.
 * F16/BF16/F64 are converted to fp32 by hand (subnormals, inf and NaN exact).
 *
 * (Writing: safetensors_write.c.)
 *
 * Checksums: every file written carries "strata_xxh3" in its metadata, the
 * XXH3-64 of each tensor's bytes as 16 hex digits, in the order of the
 * tensor names (strcmp), so a tool that rewrites the file in another data
 * order but keeps the metadata keeps them valid. The header
 * goes first, so it is written with zeros there and the digits are put in
 * place (pwrite) once the data is out. Loading a tensor from a file that has
 * them hashes the bytes it copies and refuses a mismatch: a flipped bit in a
 * checkpoint is an error, not a silently different run. Files without the
 * key (Hugging Face, older strata) load as before. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include <cJSON.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "io/fsutil.h"
#include "io/safetensors.h"
#include "util/check.h"

#define CORRUPT "the file is damaged or is not a safetensors file; re-download or re-export it"

static const struct {
	const char *name;
	size_t size;
} dtypes[ST_DT__COUNT] = {
	[ST_DT_F32] = {"F32", 4}, [ST_DT_F16] = {"F16", 2}, [ST_DT_BF16] = {"BF16", 2},
	[ST_DT_F64] = {"F64", 8}, [ST_DT_I32] = {"I32", 4}, [ST_DT_I64] = {"I64", 8},
	[ST_DT_U8] = {"U8", 1},   [ST_DT_I8] = {"I8", 1},   [ST_DT_U16] = {"U16", 2},
};

size_t dtype_size(enum st_dtype dt)
{
	return (unsigned)dt < ST_DT__COUNT ? dtypes[dt].size : 0;
}

const char *dtype_name(enum st_dtype dt)
{
	return (unsigned)dt < ST_DT__COUNT ? dtypes[dt].name : "?";
}

static int dtype_parse(const char *s, enum st_dtype *dt)
{
	for (int i = 0; i < ST_DT__COUNT; i++)
		if (!strcmp(s, dtypes[i].name)) {
			*dt = (enum st_dtype)i;
			return 1;
		}
	return 0;
}

int64_t tensor_numel(const struct st_tensor_info *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

static char *dup_str(const char *s)
{
	char *d = st_malloc(strlen(s) + 1);
	if (d)
		strcpy(d, s);
	return d;
}

/* "[2, 3]" into buf; shapes have at most ST_MAX_DIMS entries. */
static const char *shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
	size_t k = (size_t)snprintf(buf, n, "[");
	for (int i = 0; i < ndim && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
	return buf;
}

/* ---- fp16 / bf16 -> fp32 ------------------------------------------------- */

static float f32_from_bits(uint32_t b)
{
	float f;
	memcpy(&f, &b, sizeof f);
	return f;
}

/* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Every value
 * is exactly representable in fp32, so this is exact. */
float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
	if (exp == 0x1f) /* inf, or NaN keeping its payload and quiet bit */
		return f32_from_bits(sign | 0x7f800000u | mant << 13);
	if (exp != 0) /* normal: rebias 15 -> 127 */
		return f32_from_bits(sign | (exp + 112) << 23 | mant << 13);
	if (mant == 0)
		return f32_from_bits(sign); /* +-0 */
	/* Subnormal mant * 2^-24: shift the leading 1 up to the implicit bit. */
	uint32_t e = 113; /* fp32 biased exponent of 2^-14, the smallest f16 normal */
	while (!(mant & 0x400u)) {
		mant <<= 1;
		e--;
	}
	return f32_from_bits(sign | e << 23 | (mant & 0x3ffu) << 13);
}

/* bfloat16 is the top half of an fp32: exact for every value. */
float bf16_to_f32(uint16_t h)
{
	return f32_from_bits((uint32_t)h << 16);
}

/* ---- reading -------------------------------------------------------------- */

/* A JSON number that is a non-negative integer below 2^53; 0 otherwise. */
static int json_count(const cJSON *v, uint64_t *out)
{
	if (!cJSON_IsNumber(v))
		return 0;
	double d = v->valuedouble;
	if (!(d >= 0 && d <= ST_SF_JSON_INT_MAX) || d != (double)(uint64_t)d)
		return 0;
	*out = (uint64_t)d;
	return 1;
}

static int parse_metadata(struct st_safetensors *sf, const cJSON *m)
{
	if (cJSON_IsNull(m)) /* the safetensors library reads it as no metadata */
		return ST_OK;
	ST_CHECK(cJSON_IsObject(m), CORRUPT, "%s: \"__metadata__\" must be an object of strings",
		 sf->path);
	int n = cJSON_GetArraySize(m);
	sf->meta_keys = st_calloc((size_t)n, sizeof *sf->meta_keys);
	sf->meta_vals = st_calloc((size_t)n, sizeof *sf->meta_vals);
	if (!sf->meta_keys || !sf->meta_vals)
		return ST_FAIL;
	const cJSON *kv;
	cJSON_ArrayForEach(kv, m) {
		ST_CHECK(cJSON_IsString(kv), CORRUPT,
			 "%s: \"__metadata__\" value for key '%s' is not a string", sf->path,
			 kv->string);
		int i = sf->n_meta++; /* counted first, so close() frees a partial entry */
		sf->meta_keys[i] = dup_str(kv->string);
		sf->meta_vals[i] = dup_str(kv->valuestring);
		if (!sf->meta_keys[i] || !sf->meta_vals[i])
			return ST_FAIL;
	}
	return ST_OK;
}

/* One header entry into t (t->name already set); checks its own consistency
 * and that it lies inside the data section. */
static int parse_entry(const struct st_safetensors *sf, const cJSON *e,
		       struct st_tensor_info *t)
{
	const char *path = sf->path, *name = t->name;
	ST_CHECK(cJSON_IsObject(e), CORRUPT, "%s: header entry '%s' is not an object", path, name);

	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
	ST_CHECK(dt, CORRUPT, "%s: tensor '%s' is missing \"dtype\"", path, name);
	ST_CHECK(cJSON_IsString(dt), CORRUPT, "%s: tensor '%s': \"dtype\" must be a string", path,
		 name);
	ST_CHECK(dtype_parse(dt->valuestring, &t->dtype),
		 "convert the tensor to F32, F16 or BF16 (strata reads F32 F16 BF16 F64 I32 I64 U8 I8 U16)",
		 "%s: tensor '%s' has unknown dtype \"%s\"", path, name, dt->valuestring);

	const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
	ST_CHECK(sh, CORRUPT, "%s: tensor '%s' is missing \"shape\"", path, name);
	ST_CHECK(cJSON_IsArray(sh), CORRUPT, "%s: tensor '%s': \"shape\" must be an array", path,
		 name);
	int ndim = cJSON_GetArraySize(sh);
	ST_CHECK(ndim <= ST_MAX_DIMS, "strata handles tensors of at most 8 dimensions",
		 "%s: tensor '%s' has %d dimensions, more than the %d supported", path, name, ndim,
		 ST_MAX_DIMS);
	t->ndim = ndim;
	/* numel * dtype size, every partial product capped at 2^53: offsets are
	 * below 2^53, so nothing larger can match, and the cap keeps
	 * tensor_numel's int64 product from overflowing later. */
	uint64_t bytes = dtype_size(t->dtype);
	int i = 0, overflow = 0;
	const cJSON *d;
	cJSON_ArrayForEach(d, sh) {
		ST_CHECK(!cJSON_IsNumber(d) || d->valuedouble >= 0, CORRUPT,
			 "%s: tensor '%s' has a negative dimension (%g) in its shape", path, name,
			 d->valuedouble);
		uint64_t v;
		ST_CHECK(json_count(d, &v), CORRUPT,
			 "%s: tensor '%s': \"shape\" must be an array of integers (entry %d is not)",
			 path, name, i);
		t->shape[i++] = (int64_t)v;
		if (v && bytes > (uint64_t)ST_SF_JSON_INT_MAX / v)
			overflow = 1;
		else
			bytes *= v;
	}

	const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
	ST_CHECK(off, CORRUPT, "%s: tensor '%s' is missing \"data_offsets\"", path, name);
	ST_CHECK(cJSON_IsArray(off) && cJSON_GetArraySize(off) == 2 &&
			 json_count(cJSON_GetArrayItem(off, 0), &t->begin) &&
			 json_count(cJSON_GetArrayItem(off, 1), &t->end),
		 CORRUPT, "%s: tensor '%s': \"data_offsets\" must be an array of two non-negative integers",
		 path, name);
	ST_CHECK(t->begin <= t->end, CORRUPT,
		 "%s: tensor '%s' has data_offsets [%llu, %llu) with begin after end", path, name,
		 (unsigned long long)t->begin, (unsigned long long)t->end);
	char sbuf[256];
	unsigned long long shown = overflow ? (unsigned long long)ST_SF_JSON_INT_MAX : bytes;
	ST_CHECK(!overflow && bytes == t->end - t->begin, CORRUPT,
		 "%s: tensor '%s': byte size mismatch: shape %s of %s is %s%llu bytes but data_offsets [%llu, %llu) span %llu",
		 path, name, shape_str(sbuf, sizeof sbuf, t->ndim, t->shape), dtype_name(t->dtype),
		 overflow ? "more than " : "", shown, (unsigned long long)t->begin, (unsigned long long)t->end,
		 (unsigned long long)(t->end - t->begin));
	uint64_t data_size = sf->file_size - sf->data_start;
	ST_CHECK(t->end <= data_size, "the file is truncated or damaged; re-download or re-export it",
		 "%s: tensor '%s' ends at byte %llu, beyond the end of the data section (%llu bytes): the file is truncated",
		 path, name, (unsigned long long)t->end, (unsigned long long)data_size);
	return ST_OK;
}

static int cmp_begin(const void *a, const void *b)
{
	const struct st_tensor_info *x = *(const struct st_tensor_info *const *)a;
	const struct st_tensor_info *y = *(const struct st_tensor_info *const *)b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return (x->end > y->end) - (x->end < y->end);
}

/* No two tensors share a byte. Zero-size tensors own no bytes and are skipped.
 * Gaps are tolerated: the reference writer leaves none, but they are harmless. */
static int check_overlaps(const struct st_safetensors *sf)
{
	const struct st_tensor_info **by = st_malloc((size_t)sf->n * sizeof *by);
	if (!by)
		return ST_FAIL;
	for (int i = 0; i < sf->n; i++)
		by[i] = &sf->tensors[i];
	qsort(by, (size_t)sf->n, sizeof *by, cmp_begin);
	const struct st_tensor_info *last = NULL; /* the nonempty tensor reaching furthest */
	int rc = ST_OK;
	for (int i = 0; i < sf->n && rc == ST_OK; i++) {
		const struct st_tensor_info *t = by[i];
		if (t->begin == t->end)
			continue;
		if (last && t->begin < last->end) {
			ST_ERROR(CORRUPT, "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
				 sf->path, last->name, (unsigned long long)last->begin,
				 (unsigned long long)last->end, t->name,
				 (unsigned long long)t->begin, (unsigned long long)t->end);
			rc = ST_FAIL;
		}
		if (!last || t->end > last->end)
			last = t;
	}
	free(by);
	return rc;
}

static int parse_sums(struct st_safetensors *sf);

static int cmp_info_name(const void *a, const void *b)
{
	return strcmp((*(const struct st_tensor_info *const *)a)->name,
		      (*(const struct st_tensor_info *const *)b)->name);
}

static int parse_header(struct st_safetensors *sf, const cJSON *root)
{
	ST_CHECK(cJSON_IsObject(root), CORRUPT, "%s: the header is not a JSON object", sf->path);
	/* repeated names (and fields) are refused before, where it is parsed */
	const int n_items = cJSON_GetArraySize(root);
	const cJSON *it;
	const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
	if (meta)
		ST_TRY(parse_metadata(sf, meta));
	int n = n_items - (meta != NULL);
	sf->tensors = st_calloc((size_t)n, sizeof *sf->tensors);
	if (!sf->tensors)
		return ST_FAIL;
	cJSON_ArrayForEach(it, root) {
		if (it == meta)
			continue;
		struct st_tensor_info *t = &sf->tensors[sf->n++];
		t->name = dup_str(it->string);
		if (!t->name)
			return ST_FAIL;
		ST_TRY(parse_entry(sf, it, t));
	}
	ST_TRY(check_overlaps(sf));
	return parse_sums(sf);
}

/* The per-tensor checksums of ST_SF_SUM_KEY into sf->sums (indexed like
 * sf->tensors), when the file has them. */
static int parse_sums(struct st_safetensors *sf)
{
	const char *hex = safetensors_meta(sf, ST_SF_SUM_KEY);
	if (!hex)
		return ST_OK;
	/* a tool that re-saved the file with its metadata and other tensors */
	ST_CHECK(strlen(hex) == (size_t)sf->n * ST_SF_SUM_HEX,
		 "the file is damaged: use an earlier checkpoint or re-export it; or another tool "
		 "rewrote it and kept strata's \"" ST_SF_SUM_KEY "\" metadata: remove that key",
		 "%s: \"" ST_SF_SUM_KEY "\" holds %zu digits for %d tensors (16 each)", sf->path,
		 strlen(hex), sf->n);
	/* name order (names are unique: open_mapped refuses repeats) */
	const struct st_tensor_info **by = st_malloc((size_t)(sf->n ? sf->n : 1) * sizeof *by);
	sf->sums = st_malloc((size_t)(sf->n ? sf->n : 1) * sizeof *sf->sums);
	if (!by || !sf->sums) {
		free(by);
		return ST_FAIL;
	}
	for (int i = 0; i < sf->n; i++)
		by[i] = &sf->tensors[i];
	qsort(by, (size_t)sf->n, sizeof *by, cmp_info_name);
	int rc = ST_OK;
	for (int k = 0; k < sf->n && rc == ST_OK; k++) {
		char digits[ST_SF_SUM_HEX + 1], *end;
		memcpy(digits, hex + (size_t)k * ST_SF_SUM_HEX, ST_SF_SUM_HEX);
		digits[ST_SF_SUM_HEX] = '\0';
		sf->sums[by[k] - sf->tensors] = strtoull(digits, &end, 16);
		if (*end || strspn(digits, "0123456789abcdef") != ST_SF_SUM_HEX) {
			ST_ERROR(CORRUPT, "%s: \"" ST_SF_SUM_KEY "\" is not hex digits", sf->path);
			rc = ST_FAIL;
		}
	}
	free(by);
	return rc;
}

/* Whether JSON text holds the escape \u0000 (a backslash run of odd length
 * before "u0000": "\\u0000" is a backslash and the text "u0000"). cJSON
 * cuts a string there, so a name or value holding it would be read short. */
static int has_nul_escape(const char *text)
{
	for (const char *q = strstr(text, "u0000"); q; q = strstr(q + 1, "u0000")) {
		size_t run = 0;
		while (q - run > text && q[-1 - (ptrdiff_t)run] == '\\')
			run++;
		if (run % 2)
			return 1;
	}
	return 0;
}

/* Everything after the map: header length, JSON, entries. */
static int open_mapped(struct st_safetensors *sf)
{
	const char *path = sf->path;
	ST_CHECK(sf->file_size >= 8, CORRUPT,
		 "%s is %zu bytes, shorter than the 8-byte header length field", path, sf->file_size);
	const unsigned char *p = sf->map;
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | p[i];
	ST_CHECK(hlen <= ST_SF_HEADER_MAX, CORRUPT,
		 "%s: header length %llu exceeds the 100 MB limit", path, (unsigned long long)hlen);
	ST_CHECK(hlen <= sf->file_size - 8, "the file is truncated or damaged; re-download or re-export it",
		 "%s: header length %llu is larger than the rest of the file (%zu bytes): truncated or not a safetensors file",
		 path, (unsigned long long)hlen, sf->file_size - 8);
	sf->data_start = 8 + (size_t)hlen;

	/* A NUL-terminated copy: the parser never reads past what it was given. */
	char *text = st_malloc((size_t)hlen + 1);
	if (!text)
		return ST_FAIL;
	memcpy(text, p + 8, (size_t)hlen);
	text[hlen] = '\0';
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)hlen, &end, 0);
	int rc = ST_OK;
	if (!root) {
		ST_ERROR(CORRUPT, "%s: header is not valid JSON (parse error near byte %zu of %llu)",
			 path, end ? (size_t)(end - text) : (size_t)0, (unsigned long long)hlen);
		rc = ST_FAIL;
	} else {
		/* Only the space padding may follow the JSON value. */
		const size_t q = fs_json_rest(text, (size_t)(end - text), (size_t)hlen);
		if (q < (size_t)hlen) {
			ST_ERROR(CORRUPT, "%s: header is not valid JSON (unexpected byte 0x%02x after the JSON object, at byte %zu)",
				 path, (unsigned char)text[q], q);
			rc = ST_FAIL;
		}
	}
	/* a name or field given twice, or cut short by a NUL, would read as
	 * another (the first of two "dtype"s; "w\u0000x" as "w") */
	const char *dup = rc == ST_OK ? fs_json_duplicate_key(root) : NULL;
	if (dup) {
		ST_ERROR(CORRUPT, "%s: duplicate name '%s' in the header", path, dup);
		rc = ST_FAIL;
	}
	if (rc == ST_OK && (memchr(text, 0, (size_t)hlen) || has_nul_escape(text))) {
		ST_ERROR(CORRUPT, "%s: header holds a NUL character (\\u0000), which would cut a name or value short", path);
		rc = ST_FAIL;
	}
	if (rc == ST_OK)
		rc = parse_header(sf, root);
	cJSON_Delete(root);
	free(text);
	return rc;
}

int safetensors_open(struct st_safetensors *sf, const char *path)
{
	memset(sf, 0, sizeof *sf);
	sf->path = dup_str(path);
	if (!sf->path)
		return ST_FAIL;
	int rc = fs_map_file(path, "safetensors file", &sf->map, &sf->file_size);
	if (rc == ST_OK)
		rc = open_mapped(sf);
	if (rc != ST_OK)
		safetensors_close(sf);
	return rc;
}

void safetensors_close(struct st_safetensors *sf)
{
	for (int i = 0; i < sf->n; i++)
		free(sf->tensors[i].name);
	free(sf->tensors);
	for (int i = 0; i < sf->n_meta; i++) {
		free(sf->meta_keys[i]);
		free(sf->meta_vals[i]);
	}
	free(sf->meta_keys);
	free(sf->meta_vals);
	free(sf->sums);
	fs_unmap_file(sf->map, sf->file_size);
	free(sf->path);
	memset(sf, 0, sizeof *sf);
}

const struct st_tensor_info *safetensors_find(const struct st_safetensors *sf, const char *name)
{
	for (int i = 0; i < sf->n; i++)
		if (!strcmp(sf->tensors[i].name, name))
			return &sf->tensors[i];
	return NULL;
}

const void *safetensors_data(const struct st_safetensors *sf, const struct st_tensor_info *t)
{
	return (const char *)sf->map + sf->data_start + t->begin;
}

const char *safetensors_meta(const struct st_safetensors *sf, const char *key)
{
	for (int i = 0; i < sf->n_meta; i++)
		if (!strcmp(sf->meta_keys[i], key))
			return sf->meta_vals[i];
	return NULL;
}

static int convertible(enum st_dtype dt)
{
	return dt == ST_DT_F32 || dt == ST_DT_F16 || dt == ST_DT_BF16 || dt == ST_DT_F64;
}

/* n elements of dtype dt at p, converted to fp32 into dst. Bytes are
 * assembled little-endian explicitly: the data need not be aligned (other
 * writers do not pad the header) and the format is little-endian. */
static void to_f32(enum st_dtype dt, const unsigned char *p, size_t n, float *dst)
{
	switch (dt) {
	case ST_DT_F32:
		for (size_t i = 0; i < n; i++, p += 4)
			dst[i] = f32_from_bits((uint32_t)p[0] | (uint32_t)p[1] << 8 |
					       (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
		break;
	case ST_DT_F16:
		for (size_t i = 0; i < n; i++, p += 2)
			dst[i] = f16_to_f32((uint16_t)(p[0] | p[1] << 8));
		break;
	case ST_DT_BF16:
		for (size_t i = 0; i < n; i++, p += 2)
			dst[i] = bf16_to_f32((uint16_t)(p[0] | p[1] << 8));
		break;
	default: /* F64: round to nearest; out of range becomes +-inf (IEEE) */
		for (size_t i = 0; i < n; i++, p += 8) {
			uint64_t b = 0;
			for (int k = 7; k >= 0; k--)
				b = b << 8 | p[k];
			double d;
			memcpy(&d, &b, sizeof d);
			dst[i] = (float)d;
		}
		break;
	}
}

int safetensors_read_f32(const struct st_safetensors *sf, const struct st_tensor_info *t,
			 float *dst)
{
	ST_CHECK(convertible(t->dtype), "convert the tensor to F32, F16, BF16 or F64",
		 "%s: tensor '%s' has wrong dtype %s: only F32, F16, BF16 and F64 convert to fp32",
		 sf->path, t->name, dtype_name(t->dtype));
	to_f32(t->dtype, safetensors_data(sf, t), (size_t)tensor_numel(t), dst);
	return ST_OK;
}

/* A loaded tensor's pages leave the process's resident set: a model is read
 * once, unit by unit, and a file larger than the memory budgets must not stay
 * mapped in (the pages are refetched should anyone read the tensor again). */
static void drop_range(const struct st_safetensors *sf, size_t begin, size_t end)
{
	fs_map_drop(sf->map, sf->file_size, begin, end);
}

static void drop_pages(const struct st_safetensors *sf, const struct st_tensor_info *t)
{
	drop_range(sf, sf->data_start + t->begin, sf->data_start + t->end);
}

/* got, t's bytes' XXH3, against the file's checksum of t. */
static int checksum_ok(const struct st_safetensors *sf, const struct st_tensor_info *t,
		       uint64_t got)
{
	const uint64_t want = sf->sums[t - sf->tensors];
	/* tools that re-save a file passing its metadata on (safetensors'
	 * save_file(..., metadata=f.metadata())) keep checksums of other bytes */
	ST_CHECK(got == want,
		 "the file is damaged (a changed byte): use an earlier checkpoint or re-export it; or "
		 "another tool rewrote it and kept strata's \"strata_xxh3\" metadata: remove that key",
		 "%s: tensor '%s' fails its checksum (XXH3 %016" PRIx64 ", the file says %016" PRIx64 ")",
		 sf->path, t->name, got, want);
	return ST_OK;
}

/* Tensor t into dst, converted to fp32 (f32) or as it is (dst NULL: only
 * checked), a slice at a time with each slice's pages dropped once copied,
 * and its checksum (if any) taken over the same pass: a tensor larger than
 * the memory budgets (a 7B model's 500 MiB embedding) is never mapped in
 * whole beside them. On a checksum failure dst holds the damaged bytes and
 * the caller fails. */
#define LOAD_SLICE ((size_t)8 << 20) /* a whole number of pages and of elements */
static int load_sliced(const struct st_safetensors *sf, const struct st_tensor_info *t, void *dst,
		       int f32)
{
	const unsigned char *p = safetensors_data(sf, t);
	const size_t bytes = (size_t)(t->end - t->begin), es = f32 ? dtype_size(t->dtype) : 1;
	const size_t at = sf->data_start + (size_t)t->begin;
	XXH3_state_t h;
	XXH3_64bits_reset(&h);
	for (size_t off = 0; off < bytes; off += LOAD_SLICE) {
		const size_t n = bytes - off < LOAD_SLICE ? bytes - off : LOAD_SLICE;
		if (sf->sums)
			XXH3_64bits_update(&h, p + off, n);
		if (dst && f32)
			to_f32(t->dtype, p + off, n / es, (float *)dst + off / es);
		else if (dst)
			memcpy((char *)dst + off, p + off, n);
		drop_range(sf, at + off, at + off + n);
	}
	drop_pages(sf, t); /* and any the slices' edges left */
	return sf->sums ? checksum_ok(sf, t, XXH3_64bits_digest(&h)) : ST_OK;
}

int safetensors_check_f32(const struct st_safetensors *sf, const char *name, int ndim,
			  const int64_t *shape)
{
	const struct st_tensor_info *t = safetensors_find(sf, name);
	ST_CHECK(t, "check that the file belongs to this model (config.json, checkpoint step)",
		 "missing tensor %s in %s", name, sf->path);
	ST_CHECK(convertible(t->dtype), "convert the tensor to F32, F16, BF16 or F64",
		 "%s: tensor '%s' has wrong dtype %s (expected a float type: F32, F16, BF16 or F64)",
		 sf->path, name, dtype_name(t->dtype));
	int same = t->ndim == ndim;
	for (int i = 0; same && i < ndim; i++)
		same = t->shape[i] == shape[i];
	char got[256], want[256];
	ST_CHECK(same, "check that config.json matches the weights",
		 "%s: tensor '%s' has shape %s, expected %s", sf->path, name,
		 shape_str(got, sizeof got, t->ndim, t->shape), shape_str(want, sizeof want, ndim, shape));
	return ST_OK;
}

int safetensors_load_f32(const struct st_safetensors *sf, const char *name, int ndim,
			 const int64_t *shape, float *dst)
{
	ST_TRY(safetensors_check_f32(sf, name, ndim, shape));
	return load_sliced(sf, safetensors_find(sf, name), dst, 1);
}

/* The tensor name, if its dtype is exactly dtype and its shape and size
 * are these; NULL after an error naming what was wrong. */
static const struct st_tensor_info *find_raw(const struct st_safetensors *sf, const char *name,
					     enum st_dtype dtype, int ndim, const int64_t *shape,
					     size_t bytes)
{
	const struct st_tensor_info *t = safetensors_find(sf, name);
	if (!t) {
		ST_ERROR("check that the file belongs to this model and optimizer",
			 "missing tensor %s in %s", name, sf->path);
		return NULL;
	}
	if (t->dtype != dtype) {
		ST_ERROR("the file was written with other settings",
			 "%s: tensor '%s' has wrong dtype %s (expected %s)", sf->path, name,
			 dtype_name(t->dtype), dtype_name(dtype));
		return NULL;
	}
	int same = t->ndim == ndim;
	for (int i = 0; same && i < ndim; i++)
		same = t->shape[i] == shape[i];
	char got[256], want[256];
	if (!same || (size_t)(t->end - t->begin) != bytes) {
		ST_ERROR("the file was written with other settings",
			 "%s: tensor '%s' has shape %s, expected %s", sf->path, name,
			 shape_str(got, sizeof got, t->ndim, t->shape),
			 shape_str(want, sizeof want, ndim, shape));
		return NULL;
	}
	return t;
}

const void *safetensors_view_raw(const struct st_safetensors *sf, const char *name,
				 enum st_dtype dtype, int ndim, const int64_t *shape, size_t bytes)
{
	const struct st_tensor_info *t = find_raw(sf, name, dtype, ndim, shape, bytes);
	/* checked a slice at a time, its pages dropped again: the reader maps
	 * them back as it goes */
	return t && load_sliced(sf, t, NULL, 0) == ST_OK ? safetensors_data(sf, t) : NULL;
}

void safetensors_view_drop(const struct st_safetensors *sf, const void *p, size_t n)
{
	/* as integers: comparing pointers into different objects is undefined */
	const uintptr_t map = (uintptr_t)sf->map, b = (uintptr_t)p;
	if (!n || b < map || b - map > sf->file_size || n > sf->file_size - (b - map))
		return; /* not the mapping's (an aligned copy) */
	fs_map_drop(sf->map, sf->file_size, (size_t)(b - map), (size_t)(b - map) + n);
}

void safetensors_view_done(const struct st_safetensors *sf, const void *view)
{
	for (int i = 0; view && i < sf->n; i++)
		if (safetensors_data(sf, &sf->tensors[i]) == view) {
			drop_pages(sf, &sf->tensors[i]);
			return;
		}
}

int safetensors_load_raw(const struct st_safetensors *sf, const char *name, enum st_dtype dtype,
			 int ndim, const int64_t *shape, void *dst, size_t bytes)
{
	const struct st_tensor_info *t = find_raw(sf, name, dtype, ndim, shape, bytes);
	return t ? load_sliced(sf, t, dst, 0) : ST_FAIL;
}
