/* ggml's block formats and their dequantization; see ggml_quant.h.
 *
 * Each value is computed with the float operations of ggml's
 * dequantize_row_* (ggml-quants.c) and the gguf package's numpy twin
 * (gguf/quants.py), in their order: Q6_K is (d*scale)*q, Q4_K / Q5_K
 * (d*sc)*q - (dmin*m), Q4_1 / Q5_1 d*q + m. Every product there is exact in
 * fp32 (an fp16 scale has 11 significant bits and the integers it multiplies
 * at most 7 + 5, within fp32's 24), so the one rounding is the final add and
 * the values equal the package's bit for bit whatever the order of the
 * products, FMA or not (checked by hand on blocks.gguf: reordering Q6_K's
 * products or fusing the K-quants' multiply-subtract changed no bit). fp-contract is
 * off anyway, as in strata's other bit-exact code, so that no rounding
 * depends on the compiler. */
#pragma GCC optimize("fp-contract=off")

#include <string.h>

#include "io/ggml_quant.h"
#include "io/safetensors.h"

static const struct ggml_type_info readable[] = {
	{GGML_F32, "F32", 1, 4},       {GGML_F16, "F16", 1, 2},       {GGML_BF16, "BF16", 1, 2},
	{GGML_Q8_0, "Q8_0", 32, 34},   {GGML_Q4_0, "Q4_0", 32, 18},   {GGML_Q4_1, "Q4_1", 32, 20},
	{GGML_Q5_0, "Q5_0", 32, 22},   {GGML_Q5_1, "Q5_1", 32, 24},   {GGML_Q4_K, "Q4_K", 256, 144},
	{GGML_Q5_K, "Q5_K", 256, 176}, {GGML_Q6_K, "Q6_K", 256, 210},
};

const struct ggml_type_info *ggml_type_info(uint32_t type)
{
	for (size_t i = 0; i < sizeof readable / sizeof *readable; i++)
		if (readable[i].type == type)
			return &readable[i];
	return NULL;
}

const char *ggml_type_name(uint32_t type)
{
	/* ggml.h's enum ggml_type; the gaps are types ggml removed */
	static const char *names[] = {
		"F32", "F16", "Q4_0", "Q4_1", NULL, NULL, "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K",
		"Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
		"IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M",
		"BF16", NULL, NULL, NULL, "TQ1_0", "TQ2_0", NULL, NULL, NULL, "MXFP4"};
	return type < sizeof names / sizeof *names && names[type] ? names[type] : "unknown";
}

const char *ggml_readable_types(void)
{
	return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K";
}

static float f16_at(const uint8_t *p)
{
	return f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* Q4_K and Q5_K pack 8 six-bit scales and 8 six-bit mins into 12 bytes:
 * sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins);
 * sub-blocks 4-7 in the nibbles of bytes 8-11 with their top 2 bits in the
 * high bits of bytes 0-7 (ggml's get_scale_min_k4). */
static void scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0x0f) | (q[j - 4] >> 6) << 4;
		*m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
	}
}

/* Block layouts (d, m, dmin are fp16; byte i of "16 nibble pairs" holds
 * value i in its low nibble and value i + 16 in its high one):
 *   Q8_0  d, 32 int8                               y = d * q
 *   Q4_0  d, 16 nibble pairs                       y = d * (q - 8)
 *   Q4_1  d, m, 16 nibble pairs                    y = d * q + m
 *   Q5_0  d, u32 qh (bit i: value i's fifth bit),  y = d * (q - 16)
 *         16 nibble pairs
 *   Q5_1  d, m, qh, 16 nibble pairs                y = d * q + m
 *   Q4_K  d, dmin, 12 bytes of 6-bit scales and mins for 8 sub-blocks of
 *         32, 128 bytes: sub-blocks 2c and 2c+1 in the low and high nibbles
 *         of bytes 32c..32c+31                     y = (d*sc) * q - (dmin*m)
 *   Q5_K  as Q4_K, with 32 qh bytes before the nibbles: bit j of qh[l] is
 *         the fifth bit of value l of sub-block j
 *   Q6_K  128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales (one
 *         per 16 values), d; each half of 128 values takes 64 low bytes
 *         (values l, 32+l in the low nibbles of bytes l, 32+l; values 64+l,
 *         96+l in their high ones) and 32 high bytes (bits 2s, 2s+1 of
 *         byte l for value 32s+l)                  y = (d*sc) * (q - 32) */
void ggml_to_f32(float *dst, const uint8_t *p, uint32_t type, uint64_t n)
{
	switch (type) {
	case GGML_F32:
		memcpy(dst, p, n * 4);
		return;
	case GGML_F16:
		for (uint64_t i = 0; i < n; i++)
			dst[i] = f16_at(p + 2 * i);
		return;
	case GGML_BF16:
		for (uint64_t i = 0; i < n; i++)
			dst[i] = bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
		return;
	case GGML_Q8_0:
		for (uint64_t b = 0; b < n / 32; b++, p += 34, dst += 32) {
			const float d = f16_at(p);
			for (int i = 0; i < 32; i++)
				dst[i] = d * (float)(int8_t)p[2 + i];
		}
		return;
	case GGML_Q4_0:
		for (uint64_t b = 0; b < n / 32; b++, p += 18, dst += 32) {
			const float d = f16_at(p);
			for (int i = 0; i < 16; i++) {
				dst[i] = d * (float)((p[2 + i] & 0x0f) - 8);
				dst[16 + i] = d * (float)((p[2 + i] >> 4) - 8);
			}
		}
		return;
	case GGML_Q4_1:
		for (uint64_t b = 0; b < n / 32; b++, p += 20, dst += 32) {
			const float d = f16_at(p), m = f16_at(p + 2);
			for (int i = 0; i < 16; i++) {
				dst[i] = d * (float)(p[4 + i] & 0x0f) + m;
				dst[16 + i] = d * (float)(p[4 + i] >> 4) + m;
			}
		}
		return;
	case GGML_Q5_0:
	case GGML_Q5_1: {
		const int has_m = type == GGML_Q5_1, size = has_m ? 24 : 22;
		for (uint64_t b = 0; b < n / 32; b++, p += size, dst += 32) {
			const float d = f16_at(p), m = has_m ? f16_at(p + 2) : 0.0f;
			const uint8_t *h = p + 2 + 2 * has_m, *qs = h + 4;
			const uint32_t qh = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
					    (uint32_t)h[3] << 24;
			for (int i = 0; i < 16; i++) {
				const int lo = (qs[i] & 0x0f) | ((qh >> i) & 1) << 4;
				const int hi = (qs[i] >> 4) | ((qh >> (i + 16)) & 1) << 4;
				if (has_m) {
					dst[i] = d * (float)lo + m;
					dst[16 + i] = d * (float)hi + m;
				} else {
					dst[i] = d * (float)(lo - 16);
					dst[16 + i] = d * (float)(hi - 16);
				}
			}
		}
		return;
	}
	case GGML_Q4_K:
	case GGML_Q5_K: {
		const int q5 = type == GGML_Q5_K, size = q5 ? 176 : 144;
		for (uint64_t b = 0; b < n / 256; b++, p += size, dst += 256) {
			const float d = f16_at(p), dmin = f16_at(p + 2);
			const uint8_t *scales = p + 4, *qh = p + 16, *qs = p + 16 + 32 * q5;
			for (int j = 0; j < 8; j++) {
				int sc, m;
				scale_min_k4(j, scales, &sc, &m);
				const float ds = d * (float)sc, dm = dmin * (float)m;
				const uint8_t *nib = qs + 32 * (j / 2);
				const int shift = 4 * (j % 2);
				for (int l = 0; l < 32; l++) {
					int q = (nib[l] >> shift) & 0x0f;
					if (q5)
						q |= ((qh[l] >> j) & 1) << 4;
					dst[32 * j + l] = ds * (float)q - dm;
				}
			}
		}
		return;
	}
	case GGML_Q6_K:
		for (uint64_t b = 0; b < n / 256; b++, p += 210, dst += 256) {
			const uint8_t *ql = p, *qh = p + 128;
			const int8_t *sc = (const int8_t *)(p + 192);
			const float d = f16_at(p + 208);
			for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8) {
				float *y = dst + 128 * half;
				for (int l = 0; l < 32; l++) {
					const int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
					const int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
					const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
					const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
					const int is = l / 16; /* scales of 16 values each */
					y[l] = (d * (float)sc[is + 0]) * (float)q1;
					y[l + 32] = (d * (float)sc[is + 2]) * (float)q2;
					y[l + 64] = (d * (float)sc[is + 4]) * (float)q3;
					y[l + 96] = (d * (float)sc[is + 6]) * (float)q4;
				}
			}
		}
		return;
	}
}
