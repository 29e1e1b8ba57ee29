/* Token shards: what `strata prepare` writes and the trainer reads.
 *
 * Layout (little-endian): a 64-byte header, then n_tokens tokens of
 * token_bytes each (2 when vocab <= 65536, else 4).
 *   0  char[8]  magic "STRATOK1"
 *   8  u32      format version (1)
 *  12  u32      token_bytes (2 or 4)
 *  16  u32      vocab_size of the tokenizer that made the shard
 *  20  u32      reserved (0)
 *  24  u64      n_tokens
 *  32  char[24] tokenizer name, NUL-padded ("byte" for the byte tokenizer)
 *  56  u64      FNV-1a 64 hash of the token bytes (verified on open)
 * The tokenizer name and vocab size let the trainer refuse a shard made for a
 * different model. */
#ifndef ST_SHARD_H
#define ST_SHARD_H

#include <stddef.h>
#include <stdint.h>

#define ST_SHARD_HEADER 64
#define ST_SHARD_NAME 24

struct st_shard {
	char *path;
	void *map;
	size_t map_size;
	uint32_t token_bytes, vocab_size;
	uint64_t n_tokens;
	char tokenizer[ST_SHARD_NAME + 1];
	uint64_t hash;         /* FNV-1a 64 of the token bytes (the header's, verified) */
	const uint8_t *tokens; /* into map */
};

/* Whether len bytes of text begin as a shard does (its magic). */
int shard_has_magic(const void *text, size_t len);
int shard_open(struct st_shard *s, const char *path);
void shard_close(struct st_shard *s);
/* token at index i (i < n_tokens) */
static inline uint32_t shard_token(const struct st_shard *s, uint64_t i)
{
	if (s->token_bytes == 2)
		return ((const uint16_t *)s->tokens)[i];
	return ((const uint32_t *)s->tokens)[i];
}
/* Write a shard atomically (temp file, fsync, rename). tokens are < vocab. */
int shard_write(const char *path, const uint32_t *tokens, uint64_t n, uint32_t vocab,
		const char *tokenizer);

#endif
