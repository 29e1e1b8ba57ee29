/* ggml's tensor types as stored in GGUF files: which strata reads, their
 * block layout (elements and bytes per block), their names for messages,
 * and their dequantization to fp32.
 *
 * Readable: F32, F16, BF16 (exact), the 32-element block types Q8_0, Q4_0,
 * Q4_1, Q5_0 and Q5_1, and the 256-element K-quant super-blocks Q4_K, Q5_K
 * and Q6_K — what llama-quantize writes for Q4_0 / Q4_1 / Q8_0 files and for
 * the popular Q4_K_M / Q5_K_M / Q6_K ones (Q5_0 / Q5_1 / Q8_0 where a row is
 * not a multiple of 256). Each is dequantized with ggml's float operations
 * in ggml's order, so the values equal ggml's and the `gguf` Python
 * package's bit for bit. */
#ifndef ST_GGML_QUANT_H
#define ST_GGML_QUANT_H

#include <stdint.h>

/* ggml.h's enum ggml_type, for the types strata reads */
enum {
	GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7,
	GGML_Q8_0 = 8, GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14, GGML_BF16 = 30
};

struct ggml_type_info {
	uint32_t type;
	const char *name;
	int block;   /* elements per block: 1 (plain floats), 32, or 256 (K-quants) */
	int bytes;   /* bytes per block */
};

/* The layout of a type strata reads, or NULL. */
const struct ggml_type_info *ggml_type_info(uint32_t type);
/* ggml's name of any type ("Q2_K", "IQ4_XS"), or "unknown": for messages. */
const char *ggml_type_name(uint32_t type);
/* The names of the readable types, for hints: "F32, F16, ..., Q6_K". */
const char *ggml_readable_types(void);
/* n values of a readable type (n a multiple of its block) from src into
 * dst (n floats). */
void ggml_to_f32(float *dst, const uint8_t *src, uint32_t type, uint64_t n);

#endif
