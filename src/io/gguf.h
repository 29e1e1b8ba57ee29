/* GGUF (llama.cpp's model file): read, validated, memory-mapped.
 *
 * Layout (little-endian): "GGUF", u32 version (2 or 3), u64 tensor count,
 * u64 key-value count; key-values (u64-length string key, u32 type, value;
 * arrays are u32 element type + u64 count + elements); tensor infos (name,
 * u32 n_dims, u64 ne[n_dims] innermost first, u32 ggml type, u64 offset);
 * then the data, aligned to general.alignment (32 by default), each tensor
 * at data start + offset. gguf_open rejects, naming the file and the
 * problem: a wrong magic or version, counts or strings running past the end,
 * unknown value types, tensors with zero or too many dimensions, unknown or
 * unsupported tensor types, unaligned offsets, and data that runs past the
 * end of the file or overlaps, and quantized rows that are not whole blocks
 * (32 values; 256 for the K-quants). Tensors of the types ggml_quant.h lists
 * (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) can be
 * read as fp32. */
#ifndef ST_GGUF_H
#define ST_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "io/ggml_quant.h"

enum st_gguf_vtype {
	GGUF_UINT8, GGUF_INT8, GGUF_UINT16, GGUF_INT16, GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32,
	GGUF_BOOL, GGUF_STRING, GGUF_ARRAY, GGUF_UINT64, GGUF_INT64, GGUF_FLOAT64, GGUF__NTYPES
};

struct st_gguf_kv {
	const char *key;
	size_t key_len;
	uint32_t type;
	const uint8_t *value;   /* into the mapping */
	uint32_t arr_type;      /* arrays */
	uint64_t arr_n;
	const uint8_t **strs;   /* string arrays: where each element starts */
};

struct st_gguf_tensor {
	char *name;
	int n_dims;
	uint64_t ne[4];         /* ne[0] is the innermost (contiguous) dimension */
	uint32_t type;
	uint64_t offset, bytes, numel;
};

struct st_gguf {
	char *path;
	const uint8_t *map;
	size_t size;
	uint32_t version;
	int n_kv, n_tensors;
	struct st_gguf_kv *kv;
	struct st_gguf_tensor *t;
	size_t data_start;
};

int gguf_open(struct st_gguf *g, const char *path);
void gguf_close(struct st_gguf *g);
const struct st_gguf_kv *gguf_kv(const struct st_gguf *g, const char *key);
const struct st_gguf_tensor *gguf_tensor(const struct st_gguf *g, const char *name);
/* Scalar values: ST_OK and *out when the key exists with a numeric type. */
int gguf_get_u64(const struct st_gguf *g, const char *key, uint64_t *out);
int gguf_get_f64(const struct st_gguf *g, const char *key, double *out);
/* A string value (not NUL-terminated), or NULL. */
const char *gguf_get_str(const struct st_gguf *g, const char *key, size_t *len);
/* Element i of a string array (bounds-checked by gguf_open), or NULL. */
const char *gguf_arr_str(const struct st_gguf_kv *kv, uint64_t i, size_t *len);
/* Element i of an integer array, as int64. */
int64_t gguf_arr_int(const struct st_gguf_kv *kv, uint64_t i);
/* Read a tensor as fp32 (numel floats): F32, F16 and BF16 exactly, the
 * quantized types dequantized as ggml does (ggml_to_f32). */
int gguf_read_f32(const struct st_gguf *g, const struct st_gguf_tensor *t, float *dst);

#endif
