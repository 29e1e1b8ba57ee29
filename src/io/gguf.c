/* GGUF reader; see gguf.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/fsutil.h"
#include "io/gguf.h"
#include "util/check.h"

#define GGUF_MAX_COUNT 10000000u /* tensors, keys, array elements: far above any model */

static const size_t vsize[GGUF__NTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

struct cursor {
	const uint8_t *p, *end;
	const char *path;
	int ok;
};

static int need(struct cursor *c, size_t n, const char *what)
{
	if (c->ok && (size_t)(c->end - c->p) >= n)
		return 1;
	if (c->ok)
		ST_ERROR("the file is truncated or not a GGUF file; download it again",
			 "%s: %s runs past the end of the file", c->path, what);
	c->ok = 0;
	return 0;
}

static uint64_t rd(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t take(struct cursor *c, int n, const char *what)
{
	if (!need(c, (size_t)n, what))
		return 0;
	uint64_t v = rd(c->p, n);
	c->p += n;
	return v;
}

/* A string: u64 length, bytes. */
static const char *take_str(struct cursor *c, size_t *len, const char *what)
{
	uint64_t n = take(c, 8, what);
	if (!c->ok || !need(c, n, what))
		return NULL;
	const char *s = (const char *)c->p;
	c->p += n;
	*len = (size_t)n;
	return s;
}

/* Step over one value of type t (recursing into arrays). */
static void skip_value(struct cursor *c, uint32_t t, int depth)
{
	if (t >= GGUF__NTYPES || depth > 4) {
		if (c->ok)
			ST_ERROR("the file is damaged or from a newer GGUF version",
				 "%s: unknown metadata value type %u", c->path, t);
		c->ok = 0;
		return;
	}
	if (t == GGUF_STRING) {
		size_t n;
		take_str(c, &n, "a metadata string");
	} else if (t == GGUF_ARRAY) {
		uint32_t et = (uint32_t)take(c, 4, "an array type");
		uint64_t n = take(c, 8, "an array length");
		if (c->ok && n > GGUF_MAX_COUNT) {
			ST_ERROR("the file is damaged", "%s: an array of %llu elements", c->path,
				 (unsigned long long)n);
			c->ok = 0;
		}
		for (uint64_t i = 0; c->ok && i < n; i++)
			skip_value(c, et, depth + 1);
	} else {
		if (need(c, vsize[t], "a metadata value"))
			c->p += vsize[t];
	}
}

static int cmp_offset(const void *a, const void *b)
{
	const struct st_gguf_tensor *x = *(const struct st_gguf_tensor *const *)a;
	const struct st_gguf_tensor *y = *(const struct st_gguf_tensor *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int parse(struct st_gguf *g)
{
	struct cursor c = {g->map, g->map + g->size, g->path, 1};
	ST_CHECK(g->size >= 24 && !memcmp(g->map, "GGUF", 4), "give a .gguf file",
		 "%s is not a GGUF file (no GGUF magic)", g->path);
	c.p += 4;
	g->version = (uint32_t)take(&c, 4, "the version");
	/* version 2 or 3 with its bytes the other way round: a big-endian file
	 * (llama.cpp's --bigendian, for s390x), whose every number reads so */
	const uint32_t swapped = __builtin_bswap32(g->version);
	ST_CHECK(swapped != 2 && swapped != 3,
		 "convert the model again without --bigendian (strata reads little-endian files)",
		 "%s is a big-endian GGUF file (version %u, its bytes swapped)", g->path, swapped);
	ST_CHECK(g->version == 2 || g->version == 3, "convert it with a current llama.cpp",
		 "%s: GGUF version %u (strata reads versions 2 and 3)", g->path, g->version);
	uint64_t nt = take(&c, 8, "the tensor count"), nk = take(&c, 8, "the key count");
	/* each key takes at least 13 bytes, each tensor info 32: counts beyond
	 * what the file can hold are damage, found before any allocation */
	const size_t rem = (size_t)(c.end - c.p);
	ST_CHECK(nt <= GGUF_MAX_COUNT && nk <= GGUF_MAX_COUNT && nk <= rem / 13 && nt <= rem / 32,
		 "the file is truncated or damaged; download it again",
		 "%s: the header's %llu tensors and %llu keys run past the end of the file (%zu bytes)",
		 g->path, (unsigned long long)nt, (unsigned long long)nk, g->size);
	g->kv = st_calloc(nk + 1, sizeof *g->kv);
	g->t = st_calloc(nt + 1, sizeof *g->t);
	if (!g->kv || !g->t)
		return ST_FAIL;
	uint64_t alignment = 32;
	uint32_t align_type = GGUF_UINT32; /* of general.alignment, where given */
	for (uint64_t i = 0; i < nk && c.ok; i++) {
		struct st_gguf_kv *kv = &g->kv[g->n_kv];
		kv->key = take_str(&c, &kv->key_len, "a metadata key");
		kv->type = (uint32_t)take(&c, 4, "a metadata type");
		kv->value = c.p;
		if (c.ok && kv->type == GGUF_ARRAY) {
			const uint8_t *start = c.p;
			kv->arr_type = (uint32_t)take(&c, 4, "an array type");
			kv->arr_n = take(&c, 8, "an array length");
			c.p = start;
			if (c.ok && kv->arr_type == GGUF_STRING && kv->arr_n <= GGUF_MAX_COUNT &&
			    kv->arr_n <= (uint64_t)(c.end - c.p) / 8) {
				kv->strs = st_calloc(kv->arr_n + 1, sizeof *kv->strs);
				if (!kv->strs)
					return ST_FAIL;
				struct cursor e = c;
				e.p += 12;
				for (uint64_t k = 0; k < kv->arr_n && e.ok; k++) {
					kv->strs[k] = e.p;
					size_t n;
					take_str(&e, &n, "a string array element");
				}
			}
		}
		skip_value(&c, kv->type, 0);
		if (!c.ok) {
			free(kv->strs); /* not counted in n_kv, so gguf_close would not */
			kv->strs = NULL;
			break;
		}
		g->n_kv++;
		/* any other type is the file's damage: read as 32 (as it was), every
		 * tensor came out shifted, and llama.cpp refuses it */
		if (kv->key_len == 17 && !memcmp(kv->key, "general.alignment", 17)) {
			align_type = kv->type;
			if (kv->type == GGUF_UINT32)
				alignment = rd(kv->value, 4);
		}
	}
	ST_CHECK(c.ok, NULL, "%s: cannot read the metadata", g->path);
	ST_CHECK(align_type == GGUF_UINT32, "the file is damaged",
		 "%s: general.alignment is of GGUF type %u, not UINT32 (%d): where the tensors start "
		 "is unknown",
		 g->path, align_type, GGUF_UINT32);
	/* any power of two, as llama.cpp takes (131072 was refused here) */
	ST_CHECK(alignment && !(alignment & (alignment - 1)), "the file is damaged",
		 "%s: general.alignment %llu is not a power of two", g->path,
		 (unsigned long long)alignment);
	for (uint64_t i = 0; i < nt && c.ok; i++) {
		struct st_gguf_tensor *t = &g->t[i];
		size_t n;
		const char *name = take_str(&c, &n, "a tensor name");
		t->n_dims = (int)take(&c, 4, "a tensor's dimension count");
		if (!c.ok)
			break;
		t->name = strndup(name, n);
		ST_CHECK(t->name, NULL, "out of memory");
		ST_CHECK(!memchr(name, 0, n), "the file is damaged",
			 "%s: tensor name '%s...' holds a NUL", g->path, t->name);
		ST_CHECK(t->n_dims >= 1 && t->n_dims <= 4, "the file is damaged",
			 "%s: tensor '%s' has %d dimensions", g->path, t->name, t->n_dims);
		t->numel = 1;
		for (int d = 0; d < t->n_dims; d++) {
			t->ne[d] = take(&c, 8, "a tensor's dimensions");
			ST_CHECK(c.ok && t->ne[d] > 0 && t->ne[d] < (1ull << 40) &&
					 t->numel <= (1ull << 40) / t->ne[d],
				 "the file is damaged", "%s: tensor '%s' has a bad dimension", g->path,
				 t->name);
			t->numel *= t->ne[d];
		}
		t->type = (uint32_t)take(&c, 4, "a tensor type");
		t->offset = take(&c, 8, "a tensor offset");
		if (!c.ok)
			break;
		const struct ggml_type_info *ti = ggml_type_info(t->type);
		ST_CHECK(ti,
			 "use a file of one of these types (llama-quantize makes one from the model's F16 "
			 "or BF16 GGUF)",
			 "%s: tensor '%s' has ggml type %u (%s); strata reads %s", g->path, t->name,
			 t->type, ggml_type_name(t->type), ggml_readable_types());
		/* llama-quantize writes whole blocks per row (a row that is not a
		 * multiple of 256 gets Q5_0 / Q5_1 / Q8_0 instead of a K-quant) */
		ST_CHECK(t->ne[0] % (uint64_t)ti->block == 0, "the file is damaged",
			 "%s: %s tensor '%s' has rows of %llu (not whole blocks of %d)", g->path, ti->name,
			 t->name, (unsigned long long)t->ne[0], ti->block);
		t->bytes = t->numel / (uint64_t)ti->block * (uint64_t)ti->bytes;
		ST_CHECK(t->offset % alignment == 0, "the file is damaged",
			 "%s: tensor '%s' is not aligned to %llu bytes", g->path, t->name,
			 (unsigned long long)alignment);
		g->n_tensors++;
	}
	ST_CHECK(c.ok, NULL, "%s: cannot read the tensor infos", g->path);
	g->data_start = (size_t)((c.p - g->map + alignment - 1) / alignment * alignment);
	/* every tensor inside the file, none overlapping */
	struct st_gguf_tensor **by_off = st_calloc((size_t)g->n_tensors + 1, sizeof *by_off);
	if (!by_off)
		return ST_FAIL;
	for (int i = 0; i < g->n_tensors; i++)
		by_off[i] = &g->t[i];
	qsort(by_off, (size_t)g->n_tensors, sizeof *by_off, cmp_offset);
	int rc = ST_OK;
	for (int i = 0; i < g->n_tensors && rc == ST_OK; i++) {
		const struct st_gguf_tensor *t = by_off[i];
		if (t->offset > g->size || g->data_start + t->offset + t->bytes > g->size) {
			ST_ERROR("the file is truncated; download it again",
				 "%s: tensor '%s' runs past the end of the file", g->path, t->name);
			rc = ST_FAIL;
		} else if (i && by_off[i - 1]->offset + by_off[i - 1]->bytes > t->offset) {
			ST_ERROR("the file is damaged", "%s: tensors '%s' and '%s' overlap", g->path,
				 by_off[i - 1]->name, t->name);
			rc = ST_FAIL;
		}
	}
	free(by_off);
	return rc;
}

/* Each key and tensor name once, and none holding a NUL: a repeat, or a
 * name cut short at a NUL, would be read as another (the first of two
 * "general.architecture"s, "output_norm.weight\0x" as the norm). */
static int check_names(const struct st_gguf *g)
{
	const int n = g->n_kv > g->n_tensors ? g->n_kv : g->n_tensors;
	const char **names = st_calloc((size_t)n + 1, sizeof *names);
	char **keys = st_calloc((size_t)g->n_kv + 1, sizeof *keys);
	int rc = names && keys ? ST_OK : ST_FAIL;
	for (int i = 0; rc == ST_OK && i < g->n_kv; i++) {
		const struct st_gguf_kv *kv = &g->kv[i];
		keys[i] = strndup(kv->key, kv->key_len);
		if (!keys[i]) {
			rc = ST_FAIL;
		} else if (memchr(kv->key, 0, kv->key_len)) {
			ST_ERROR("the file is damaged", "%s: metadata key '%s...' holds a NUL", g->path,
				 keys[i]);
			rc = ST_FAIL;
		}
		names[i] = keys[i];
	}
	const char *dup = rc == ST_OK ? fs_first_duplicate(names, (size_t)g->n_kv) : NULL;
	if (dup) {
		ST_ERROR("the file is damaged (llama.cpp refuses it too)",
			 "%s: metadata key '%s' is given twice", g->path, dup);
		rc = ST_FAIL;
	}
	for (int i = 0; rc == ST_OK && i < g->n_tensors; i++)
		names[i] = g->t[i].name;
	dup = rc == ST_OK ? fs_first_duplicate(names, (size_t)g->n_tensors) : NULL;
	if (dup) {
		ST_ERROR("the file is damaged (llama.cpp refuses it too)",
			 "%s: tensor '%s' is given twice", g->path, dup);
		rc = ST_FAIL;
	}
	for (int i = 0; keys && i < g->n_kv; i++)
		free(keys[i]);
	free(keys);
	free(names);
	return rc;
}

int gguf_open(struct st_gguf *g, const char *path)
{
	memset(g, 0, sizeof *g);
	void *map = NULL;
	ST_TRY(fs_map_file(path, "GGUF file", &map, &g->size));
	g->map = map;
	g->path = strdup(path);
	if (!g->path || parse(g) != ST_OK || check_names(g) != ST_OK) {
		gguf_close(g);
		return ST_FAIL;
	}
	return ST_OK;
}

void gguf_close(struct st_gguf *g)
{
	/* every name set, also that of a tensor whose checks failed (g->t is
	 * calloc'd one past the file's count, so the names end at a NULL) */
	for (int i = 0; g->t && g->t[i].name; i++)
		free(g->t[i].name);
	for (int i = 0; g->kv && i < g->n_kv; i++)
		free(g->kv[i].strs);
	free(g->t);
	free(g->kv);
	fs_unmap_file((void *)g->map, g->size);
	free(g->path);
	memset(g, 0, sizeof *g);
}

const struct st_gguf_kv *gguf_kv(const struct st_gguf *g, const char *key)
{
	const size_t n = strlen(key);
	for (int i = 0; i < g->n_kv; i++)
		if (g->kv[i].key_len == n && !memcmp(g->kv[i].key, key, n))
			return &g->kv[i];
	return NULL;
}

const struct st_gguf_tensor *gguf_tensor(const struct st_gguf *g, const char *name)
{
	for (int i = 0; i < g->n_tensors; i++)
		if (!strcmp(g->t[i].name, name))
			return &g->t[i];
	return NULL;
}

/* kv's number as *f and, where it is a count, *u; u_needed: a value that is
 * no count (negative, fractional, past 2^64, NaN) fails. */
static int scalar(const struct st_gguf_kv *kv, double *f, uint64_t *u, int u_needed)
{
	if (!kv)
		return ST_FAIL;
	const uint8_t *p = kv->value;
	switch (kv->type) {
	case GGUF_UINT8: case GGUF_BOOL: *u = p[0]; *f = (double)*u; return ST_OK;
	case GGUF_UINT16: *u = rd(p, 2); *f = (double)*u; return ST_OK;
	case GGUF_UINT32: *u = rd(p, 4); *f = (double)*u; return ST_OK;
	case GGUF_UINT64: *u = rd(p, 8); *f = (double)*u; return ST_OK;
	case GGUF_INT8: *f = (double)(int8_t)p[0]; break;
	case GGUF_INT16: *f = (double)(int16_t)rd(p, 2); break;
	case GGUF_INT32: *f = (double)(int32_t)rd(p, 4); break;
	case GGUF_INT64: *f = (double)(int64_t)rd(p, 8); break;
	case GGUF_FLOAT32: {
		uint32_t b = (uint32_t)rd(p, 4);
		float x;
		memcpy(&x, &b, 4);
		*f = x;
		break;
	}
	case GGUF_FLOAT64: {
		uint64_t b = rd(p, 8);
		memcpy(f, &b, 8);
		break;
	}
	default: return ST_FAIL;
	}
	if (!(*f >= 0 && *f < 1.8e19 && *f == floor(*f))) /* NaN, negative, fractional or
							      too large: no count */
		return u_needed ? ST_FAIL : ST_OK;
	*u = (uint64_t)*f;
	return ST_OK;
}

int gguf_get_u64(const struct st_gguf *g, const char *key, uint64_t *out)
{
	double f;
	return scalar(gguf_kv(g, key), &f, out, 1);
}

int gguf_get_f64(const struct st_gguf *g, const char *key, double *out)
{
	uint64_t u = 0;
	return scalar(gguf_kv(g, key), out, &u, 0);
}

const char *gguf_get_str(const struct st_gguf *g, const char *key, size_t *len)
{
	const struct st_gguf_kv *kv = gguf_kv(g, key);
	if (!kv || kv->type != GGUF_STRING)
		return NULL;
	*len = (size_t)rd(kv->value, 8);
	return (const char *)kv->value + 8;
}

const char *gguf_arr_str(const struct st_gguf_kv *kv, uint64_t i, size_t *len)
{
	if (!kv || !kv->strs || i >= kv->arr_n)
		return NULL;
	*len = (size_t)rd(kv->strs[i], 8);
	return (const char *)kv->strs[i] + 8;
}

int64_t gguf_arr_int(const struct st_gguf_kv *kv, uint64_t i)
{
	if (!kv || kv->type != GGUF_ARRAY || i >= kv->arr_n || kv->arr_type >= GGUF__NTYPES ||
	    !vsize[kv->arr_type] || kv->arr_type == GGUF_FLOAT32 || kv->arr_type == GGUF_FLOAT64)
		return 0;
	const size_t w = vsize[kv->arr_type];
	uint64_t v = rd(kv->value + 12 + i * w, (int)w);
	int signed_type = kv->arr_type == GGUF_INT8 || kv->arr_type == GGUF_INT16 ||
			  kv->arr_type == GGUF_INT32 || kv->arr_type == GGUF_INT64;
	if (signed_type && w < 8 && (v >> (8 * w - 1)))
		v |= ~0ull << (8 * w); /* sign-extend */
	return (int64_t)v;
}

int gguf_read_f32(const struct st_gguf *g, const struct st_gguf_tensor *t, float *dst)
{
	/* gguf_open took only readable types with whole blocks per row */
	ST_CHECK(ggml_type_info(t->type), NULL, "%s: tensor '%s' has an unreadable type %u", g->path,
		 t->name, t->type);
	/* whole rows about 8 MiB of the file at a time, each slice's mapped
	 * pages dropped once read (fs_map_drop), so that an import does not
	 * end with the whole file resident */
	const uint64_t rows = t->numel / t->ne[0], row_bytes = t->bytes / rows;
	const uint64_t per = row_bytes >= ((uint64_t)8 << 20) ? 1 : ((uint64_t)8 << 20) / row_bytes;
	for (uint64_t r = 0; r < rows; r += per) {
		const uint64_t n = rows - r < per ? rows - r : per;
		const size_t at = g->data_start + (size_t)(t->offset + r * row_bytes);
		ggml_to_f32(dst + r * t->ne[0], g->map + at, t->type, n * t->ne[0]);
		fs_map_drop(g->map, g->size, at, at + (size_t)(n * row_bytes));
	}
	return ST_OK;
}
