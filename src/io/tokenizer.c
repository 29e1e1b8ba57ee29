/* The byte-level tokenizer: every byte of the UTF-8 input is one token, so
 * encoding is lossless for any text (multi-byte characters become several
 * tokens) and decoding concatenates bytes. Two specials sit above the bytes:
 * <bos> = 256 and <eos> = 257, which decode to nothing. */
#include <string.h>

#include "io/tokenizer.h"

void tokenizer_byte(struct st_tokenizer *tk)
{
	memset(tk, 0, sizeof *tk);
	strcpy(tk->name, "byte");
	tk->vocab_size = ST_BYTE_VOCAB;
	tk->bos_id = ST_BYTE_BOS;
	tk->eos_id = ST_BYTE_EOS;
}

size_t tokenizer_encode(const struct st_tokenizer *tk, uint32_t *out, const char *text,
			size_t len)
{
	(void)tk; /* the byte tokenizer has no table */
	const unsigned char *b = (const unsigned char *)text;
	for (size_t i = 0; i < len; i++)
		out[i] = b[i];
	return len;
}

int tokenizer_decode_one(const struct st_tokenizer *tk, char *buf, uint32_t id)
{
	/* Specials and ids outside the vocabulary (a model with a larger vocab
	 * than the tokenizer can still sample them) produce no text. */
	(void)tk;
	if (id >= 256)
		return 0;
	buf[0] = (char)(unsigned char)id;
	return 1;
}
