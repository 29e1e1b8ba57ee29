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

#include "io/fsutil.h"

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
	uint32_t max_token;    /* the largest token (0 for none), found with the hash */
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
/* Tokens [first, first + n) read: their pages leave the resident set (the
 * mapping is read-only, so they come back from the file when read again).
 * A shard is read window by window, so a corpus larger than memory never
 * stays resident: the whole of it did, after its hash at open and after a
 * long run's random windows. */
void shard_release(const struct st_shard *s, uint64_t first, uint64_t n);
/* Write a shard atomically (temp file, fsync, rename). tokens are < vocab. */
int shard_write(const char *path, const uint32_t *tokens, uint64_t n, uint32_t vocab,
		const char *tokenizer);

/* The same file written from tokens given in pieces, so that a corpus's ids
 * never need to be held at once (strata prepare): open makes a temp file
 * beside path, put appends tokens at the shard's width (buffered) and hashes
 * them, finish writes the header (n_tokens, hash), fsyncs and renames over
 * path; abort removes the temp file. The result is byte for byte what
 * shard_write makes of the same tokens. A failing call (a full disk, a
 * token outside the vocabulary) says why, naming path, and aborts: the temp
 * file is gone, later puts and finish fail, abort does nothing. So does
 * abort of a finished writer, or of a zeroed one never opened. */
struct shard_writer {
	struct fs_atomic a;
	uint32_t vocab, token_bytes;
	uint64_t n;    /* tokens put so far */
	uint64_t hash; /* FNV-1a 64 of the token bytes written out (not yet buf's) */
	char tokenizer[ST_SHARD_NAME + 1];
	uint8_t *buf; /* token bytes not yet written, fill of them */
	size_t fill;
	int open; /* between a successful open and finish, abort or a failure */
};
int shard_writer_open(struct shard_writer *w, const char *path, uint32_t vocab,
		      const char *tokenizer);
int shard_writer_put(struct shard_writer *w, const uint32_t *tokens, size_t n);
/* n copies of one token (a run of loss-mask values). */
int shard_writer_fill(struct shard_writer *w, uint32_t token, size_t n);
int shard_writer_finish(struct shard_writer *w);
void shard_writer_abort(struct shard_writer *w);

#endif
