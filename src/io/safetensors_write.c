/* Writing safetensors files (layout in safetensors.h; reading:
 * safetensors.c).
 *
 * The JSON header is built with cJSON and padded with spaces to a multiple of
 * 8 bytes (so the data is 8-byte aligned); the tensors are laid out in the
 * given order with contiguous offsets, and the file goes through fs_atomic
 * (temp file, fsync, rename), so a crash never leaves a torn file under the
 * final name. Every file carries "strata_xxh3", each tensor's XXH3-64 in the
 * order of the tensor names: the header goes first, so it is written with
 * zeros there and the digits are put in place (pwrite) once the data is out. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>
#include <xxhash.h>

#include "io/fsutil.h"
#include "io/safetensors.h"
#include "util/check.h"

static int cmp_out_name(const void *a, const void *b)
{
	return strcmp((*(const struct st_tensor_out *const *)a)->name,
		      (*(const struct st_tensor_out *const *)b)->name);
}

/* Validate the inputs and compute each tensor's byte size into bytes[]. */
static int check_outputs(const char *path, const struct st_tensor_out *t, int n,
			 const char *const *meta, int n_meta, int have_source, uint64_t *bytes)
{
	ST_CHECK(n >= 0 && n_meta >= 0 && (n == 0 || t) && (n_meta == 0 || meta),
		 "this is a bug in the caller", "cannot write %s: bad tensor or metadata list", path);
	for (int i = 0; i < n; i++) {
		const struct st_tensor_out *o = &t[i];
		ST_CHECK(o->name && strcmp(o->name, "__metadata__"), "this is a bug in the caller",
			 "cannot write %s: tensor %d has no name or a reserved one", path, i);
		ST_CHECK((unsigned)o->dtype < ST_DT__COUNT && o->ndim >= 0 && o->ndim <= ST_MAX_DIMS,
			 "this is a bug in the caller",
			 "cannot write %s: tensor '%s' has an invalid dtype or rank", path, o->name);
		uint64_t b = dtype_size(o->dtype);
		for (int d = 0; d < o->ndim; d++) {
			ST_CHECK(o->shape[d] >= 0 && o->shape[d] < (int64_t)ST_SF_JSON_INT_MAX,
				 "this is a bug in the caller",
				 "cannot write %s: tensor '%s' has dimension %d = %lld", path, o->name,
				 d, (long long)o->shape[d]);
			uint64_t v = (uint64_t)o->shape[d];
			ST_CHECK(!v || b <= (uint64_t)ST_SF_JSON_INT_MAX / v, "this is a bug in the caller",
				 "cannot write %s: tensor '%s' is too large", path, o->name);
			b *= v;
		}
		ST_CHECK(b == 0 || o->data || have_source, "this is a bug in the caller",
			 "cannot write %s: tensor '%s' has no data", path, o->name);
		bytes[i] = b;
	}
	for (int i = 0; i < 2 * n_meta; i++)
		ST_CHECK(meta[i], "this is a bug in the caller",
			 "cannot write %s: metadata entry %d is NULL", path, i);

	const char **names = st_malloc(((size_t)n + (size_t)n_meta) * sizeof *names);
	if (!names)
		return ST_FAIL;
	for (int i = 0; i < n; i++)
		names[i] = t[i].name;
	const char *dup = fs_first_duplicate(names, (size_t)n);
	for (int i = 0; !dup && i < n_meta; i++)
		names[i] = meta[2 * i];
	if (!dup)
		dup = fs_first_duplicate(names, (size_t)n_meta);
	if (dup)
		ST_ERROR("this is a bug in the caller", "cannot write %s: duplicate name '%s'", path,
			 dup);
	free(names);
	return dup ? ST_FAIL : ST_OK;
}

static cJSON *json_u64_pair(uint64_t a, uint64_t b)
{
	cJSON *arr = cJSON_CreateArray();
	if (!arr || !cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)a)) ||
	    !cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)b))) {
		cJSON_Delete(arr);
		return NULL;
	}
	return arr;
}

/* The header JSON; NULL when out of memory. cJSON_AddItemTo* refuses a NULL
 * item, so one check per add catches every failed allocation. */
static cJSON *build_header(const struct st_tensor_out *t, int n, const char *const *meta,
			   int n_meta, const uint64_t *bytes, const char *zeros)
{
	cJSON *root = cJSON_CreateObject();
	if (!root)
		return NULL;
	if (n_meta > 0 || n > 0) {
		cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
		for (int i = 0; m && i < n_meta; i++) /* a checksum copied from a read file is stale */
			if (strcmp(meta[2 * i], ST_SF_SUM_KEY) != 0 &&
			    !cJSON_AddStringToObject(m, meta[2 * i], meta[2 * i + 1]))
				m = NULL;
		if (!m || (n > 0 && !cJSON_AddStringToObject(m, ST_SF_SUM_KEY, zeros)))
			goto fail;
	}
	uint64_t off = 0;
	for (int i = 0; i < n; i++) {
		cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
		cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
		if (!shape || !cJSON_AddStringToObject(e, "dtype", dtype_name(t[i].dtype)))
			goto fail;
		for (int d = 0; d < t[i].ndim; d++)
			if (!cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d])))
				goto fail;
		cJSON *offs = json_u64_pair(off, off + bytes[i]);
		if (!offs || !cJSON_AddItemToObject(e, "data_offsets", offs)) {
			cJSON_Delete(offs);
			goto fail;
		}
		off += bytes[i];
	}
	return root;
fail:
	cJSON_Delete(root);
	return NULL;
}

int safetensors_write(const char *path, const struct st_tensor_out *t, int n,
		      const char *const *meta, int n_meta)
{
	return safetensors_write_from(path, t, n, meta, n_meta, NULL);
}

int safetensors_write_from(const char *path, const struct st_tensor_out *t, int n,
			   const char *const *meta, int n_meta, const struct st_tensor_source *src)
{
	uint64_t *bytes = st_calloc((size_t)(n > 0 ? n : 1), sizeof *bytes);
	char *zeros = st_malloc((size_t)(n > 0 ? n : 0) * ST_SF_SUM_HEX + 1);
	const struct st_tensor_out **by = st_malloc((size_t)(n > 0 ? n : 1) * sizeof *by);
	int *rank = st_malloc((size_t)(n > 0 ? n : 1) * sizeof *rank); /* tensor i's digits */
	if (!bytes || !zeros || !by || !rank) {
		free(bytes);
		free(zeros);
		free(by);
		free(rank);
		return ST_FAIL;
	}
	for (int i = 0; i < n; i++)
		by[i] = &t[i];
	qsort(by, (size_t)(n > 0 ? n : 0), sizeof *by, cmp_out_name);
	for (int k = 0; k < n; k++)
		rank[by[k] - t] = k;
	memset(zeros, '0', (size_t)(n > 0 ? n : 0) * ST_SF_SUM_HEX);
	zeros[(size_t)(n > 0 ? n : 0) * ST_SF_SUM_HEX] = '\0';
	char *json = NULL, *head = NULL;
	cJSON *root = NULL;
	int rc = check_outputs(path, t, n, meta, n_meta, src != NULL, bytes);
	if (rc == ST_OK) {
		root = build_header(t, n, meta, n_meta, bytes, zeros);
		json = root ? cJSON_PrintUnformatted(root) : NULL;
		if (!json) {
			ST_ERROR("add memory", "cannot write %s: out of memory building the header",
				 path);
			rc = ST_FAIL;
		}
	}
	size_t hlen = 0;
	if (rc == ST_OK) {
		/* Pad with spaces so the data section starts 8-byte aligned. */
		hlen = (strlen(json) + 7) & ~(size_t)7;
		if (hlen > ST_SF_HEADER_MAX) {
			ST_ERROR("write fewer tensors per file",
				 "cannot write %s: header of %zu bytes exceeds the 100 MB limit", path,
				 hlen);
			rc = ST_FAIL;
		}
	}
	if (rc == ST_OK && !(head = st_malloc(8 + hlen)))
		rc = ST_FAIL;
	struct fs_atomic a;
	if (rc == ST_OK) {
		for (int i = 0; i < 8; i++)
			head[i] = (char)(unsigned char)((uint64_t)hlen >> (8 * i));
		size_t jl = strlen(json);
		memcpy(head + 8, json, jl);
		memset(head + 8 + jl, ' ', hlen - jl);
		rc = fs_atomic_begin(&a, path);
	}
	if (rc == ST_OK)
		rc = fs_atomic_write(&a, head, 8 + hlen); /* every fs_atomic failure aborts */
	/* where the checksum digits go: the value of ST_SF_SUM_KEY in the header */
	const char *at = rc == ST_OK ? strstr(json, "\"" ST_SF_SUM_KEY "\":\"") : NULL;
	const off_t sums_off = at ? (off_t)(8 + (size_t)(at - json) + strlen(ST_SF_SUM_KEY) + 4) : 0;
	for (int i = 0; i < n && rc == ST_OK; i++) {
		const void *d = t[i].data || !bytes[i] ? t[i].data : src->get(src->ctx, i);
		char digits[ST_SF_SUM_HEX + 1];
		snprintf(digits, sizeof digits, "%016" PRIx64, XXH3_64bits(d, (size_t)bytes[i]));
		memcpy(zeros + (size_t)rank[i] * ST_SF_SUM_HEX, digits, ST_SF_SUM_HEX);
		rc = fs_atomic_write(&a, d, (size_t)bytes[i]);
		if (d != t[i].data)
			src->put(src->ctx, i);
	}
	if (rc == ST_OK && n > 0) {
		const size_t len = (size_t)n * ST_SF_SUM_HEX;
		const ssize_t w = at ? pwrite(a.fd, zeros, len, sums_off) : -1;
		if (w != (ssize_t)len) {
			ST_ERROR("check the disk", "cannot write the checksums of %s: %s", path,
				 w < 0 && at ? strerror(errno) : "short write");
			fs_atomic_abort(&a);
			rc = ST_FAIL;
		}
	}
	if (rc == ST_OK)
		rc = fs_atomic_commit(&a);
	free(head);
	cJSON_free(json);
	cJSON_Delete(root);
	free(bytes);
	free(zeros);
	free(by);
	free(rank);
	return rc;
}
