/* safetensors: read (validated, memory-mapped) and write (fsynced).
 *
 * Format: u64 little-endian header length N, N bytes of JSON
 * {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {str: str}},
 * then the data; offsets are relative to the first byte after the header.
 * safetensors_open() rejects, with a message naming the file and the problem:
 * a file shorter than 8 bytes, a header length larger than the file or than
 * 100 MB, JSON that does not parse, an unknown dtype, a shape whose byte size
 * disagrees with its offsets, offsets past the end of the file, overlapping
 * tensors, and duplicate names. */
#ifndef ST_SAFETENSORS_H
#define ST_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

enum st_dtype { ST_DT_F32, ST_DT_F16, ST_DT_BF16, ST_DT_F64, ST_DT_I32, ST_DT_I64, ST_DT_U8,
		ST_DT_I8, ST_DT_U16, ST_DT__COUNT };

#define ST_MAX_DIMS 8

/* The format's limits and strata's checksum key, for the reader
 * (safetensors.c) and the writer (safetensors_write.c): the reference
 * implementation's header limit (a bigger one is an attack or junk); the
 * largest integer a JSON number (a double in cJSON) holds exactly, 2^53;
 * "strata_xxh3", each tensor's XXH3-64 as 16 hex digits in the order of the
 * tensor names. */
#define ST_SF_HEADER_MAX (100u * 1000u * 1000u)
#define ST_SF_JSON_INT_MAX 9007199254740992.0
#define ST_SF_SUM_KEY "strata_xxh3"
#define ST_SF_SUM_HEX 16

struct st_tensor_info {
	char *name;
	enum st_dtype dtype;
	int ndim;
	int64_t shape[ST_MAX_DIMS];
	uint64_t begin, end; /* byte offsets relative to the data section */
};

struct st_safetensors {
	char *path;
	void *map;          /* whole file, read-only mapping */
	size_t file_size;
	size_t data_start;  /* 8 + header length */
	int n;
	struct st_tensor_info *tensors;
	int n_meta;
	char **meta_keys, **meta_vals;
	uint64_t *sums;     /* per tensor: XXH3-64 of its bytes, or NULL (no checksums) */
};

/* One tensor to write. data holds numel * dtype_size bytes. */
struct st_tensor_out {
	const char *name;
	enum st_dtype dtype;
	int ndim;
	int64_t shape[ST_MAX_DIMS];
	const void *data;
};

size_t dtype_size(enum st_dtype dt);
/* Exact conversions of IEEE half and bfloat16 (also used by the GGUF reader). */
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t h);
const char *dtype_name(enum st_dtype dt); /* "F32", "BF16", ... as in the format */
int64_t tensor_numel(const struct st_tensor_info *t);

int safetensors_open(struct st_safetensors *sf, const char *path);
void safetensors_close(struct st_safetensors *sf);
/* NULL when absent (no message: callers decide whether that is an error). */
const struct st_tensor_info *safetensors_find(const struct st_safetensors *sf, const char *name);
/* Pointer to the raw bytes of t inside the mapping. */
const void *safetensors_data(const struct st_safetensors *sf, const struct st_tensor_info *t);
/* Convert t (F32, F16, BF16 or F64) to fp32 into dst (numel floats); other dtypes fail. */
int safetensors_read_f32(const struct st_safetensors *sf, const struct st_tensor_info *t,
			 float *dst);
/* Look up a tensor by name, require its dtype to be convertible to fp32 and its
 * shape to equal shape[0..ndim-1], and read it; every mismatch is an error
 * naming the file, the tensor, and what was expected. */
int safetensors_load_f32(const struct st_safetensors *sf, const char *name, int ndim,
			 const int64_t *shape, float *dst);
/* safetensors_load_f32's checks alone, from the header: nothing is read. */
int safetensors_check_f32(const struct st_safetensors *sf, const char *name, int ndim,
			  const int64_t *shape);
/* Like safetensors_load_f32, but the dtype must be exactly `dtype` and the
 * bytes are copied as they are (little-endian hosts): optimizer state. */
int safetensors_load_raw(const struct st_safetensors *sf, const char *name, enum st_dtype dtype,
			 int ndim, const int64_t *shape, void *dst, size_t bytes);
/* The same checks (dtype exactly, shape, size, checksum) on a tensor read
 * where it lies in the mapping, for a reader that goes through it in
 * pieces: its bytes, or NULL after an error naming what was wrong. Give it
 * to safetensors_view_done when finished, to drop its pages. */
const void *safetensors_view_raw(const struct st_safetensors *sf, const char *name,
				 enum st_dtype dtype, int ndim, const int64_t *shape, size_t bytes);
/* Bytes [p, p + n) of a view read: their pages (and the neighbours a read
 * fault mapped with them) leave the resident set, coming back from the file
 * if read again. Nothing for memory that is not the mapping's. */
void safetensors_view_drop(const struct st_safetensors *sf, const void *p, size_t n);
void safetensors_view_done(const struct st_safetensors *sf, const void *view);
const char *safetensors_meta(const struct st_safetensors *sf, const char *key);

/* Write tensors in the given order, 8-byte aligned header padded with spaces,
 * with metadata pairs meta[0..2*n_meta-1] = key, value, ...; the file is
 * written and fsynced before returning. Errors (unwritable path, full disk)
 * are reported with the path. */
int safetensors_write(const char *path, const struct st_tensor_out *t, int n,
		      const char *const *meta, int n_meta);
/* The same for data that is not all in memory at once (offloaded slabs):
 * tensors whose data is NULL get it from get(ctx, i) just before they are
 * written, and put(ctx, i) right after. */
struct st_tensor_source {
	const void *(*get)(void *ctx, int i);
	void (*put)(void *ctx, int i);
	void *ctx;
};
int safetensors_write_from(const char *path, const struct st_tensor_out *t, int n,
			   const char *const *meta, int n_meta, const struct st_tensor_source *src);

#endif
