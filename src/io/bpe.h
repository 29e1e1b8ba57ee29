/* Byte-level BPE from a Hugging Face tokenizer.json: the GPT-2, LLaMA-3
 * and SmolLM family of tokenizers (Qwen2's pre-tokenizes as LLaMA-3's, but
 * its NFC normalizer is refused). Encoding gives exactly the ids the
 * Hugging Face tokenizers library gives (tests/test_io.c against its output):
 *   1. added tokens (special or not) are cut out of the text first, longest
 *      match at the leftmost position;
 *   2. the pieces between them are pre-tokenized: the ByteLevel regex of GPT-2
 *      (with add_prefix_space), or a Split on the file's own regex (LLaMA-3,
 *      behavior Isolated) followed by ByteLevel without a regex; regexes run
 *      on PCRE2 with Unicode properties;
 *   3. each piece's bytes map to GPT-2's printable byte alphabet and are
 *      merged pair by pair, the lowest merge rank first (leftmost on ties);
 *      with ignore_merges a piece that is itself in the vocabulary is one id.
 * Decoding maps the byte alphabet back, so decode(encode(x)) == x.
 * Anything else in the file (another model type, a normalizer other than
 * an empty Sequence of them, byte
 * fallback, another pre-tokenizer) is refused with a message naming it. */
#ifndef ST_BPE_H
#define ST_BPE_H

#include <stddef.h>
#include <stdint.h>

struct st_bpe;

int bpe_load(struct st_bpe **out, const char *path);
void bpe_free(struct st_bpe *b);
int bpe_vocab_size(const struct st_bpe *b);
/* The id of a token by its content (added tokens included), or -1. */
int bpe_token_id(const struct st_bpe *b, const char *content);
/* Encode len bytes; out holds tokenizer_max_ids(len) = 2 len + 1 ids (a
 * prefix space can add one per piece); returns the count, or
 * ST_ENCODE_FAILED (said) when memory runs out. */
size_t bpe_encode(const struct st_bpe *b, uint32_t *out, const char *text, size_t len);
/* tokenizer_encode_part for a BPE tokenizer */
size_t bpe_encode_part(const struct st_bpe *b, uint32_t *out, const char *text, size_t len,
		       int last, unsigned *fresh, size_t *used);
/* Whether id is one of the added tokens (the special ones among them). */
int bpe_is_added(const struct st_bpe *b, int id);
/* The bytes of one token (its text for added tokens); NULL for an unknown id. */
const char *bpe_token_bytes(const struct st_bpe *b, uint32_t id, size_t *len);
/* The length of the longest token's bytes (at least 1). */
size_t bpe_max_token_len(const struct st_bpe *b);

#endif
