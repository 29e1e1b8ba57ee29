/* Tokenizers. For now the byte-level tokenizer: ids 0..255 are the bytes of
 * UTF-8 text, 256 is <bos>, 257 is <eos>; vocab 258. A Hugging Face
 * tokenizer.json (byte-level BPE) arrives with the interop issue behind the
 * same interface. */
#ifndef ST_TOKENIZER_H
#define ST_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define ST_BYTE_VOCAB 258
#define ST_BYTE_BOS 256
#define ST_BYTE_EOS 257

struct st_tokenizer {
	char name[25]; /* recorded in shards: "byte" */
	int vocab_size;
	int bos_id, eos_id;
};

void tokenizer_byte(struct st_tokenizer *tk);
/* Encode len bytes of text; out must hold len ids; returns the count. */
size_t tokenizer_encode(const struct st_tokenizer *tk, uint32_t *out, const char *text,
			size_t len);
/* Decode one id into buf (up to 8 bytes); returns bytes written (0 for specials). */
int tokenizer_decode_one(const struct st_tokenizer *tk, char *buf, uint32_t id);

#endif
