/* Token shards: the 64-byte header + packed little-endian tokens that
 * `strata prepare` writes and the trainer memory-maps (layout in shard.h).
 *
 * shard_open trusts nothing in the header: the magic, version, token width and
 * the file size implied by n_tokens are checked, and the FNV-1a 64 hash of the
 * token bytes is recomputed, so a truncated copy or a flipped bit is refused
 * with a message saying which file and what to do, rather than trained on. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/fsutil.h"
#include "io/shard.h"
#include "util/check.h"

#define SHARD_MAGIC "STRATOK1"
#define SHARD_VERSION 1u
#define REPREPARE "re-run strata prepare to rebuild the shard"

/* FNV-1a 64 (Fowler/Noll/Vo): offset basis and prime from the reference. */
#define FNV_BASIS 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= FNV_PRIME;
	}
	return h;
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
	return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static void wr32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void wr64(uint8_t *p, uint64_t v)
{
	wr32(p, (uint32_t)v);
	wr32(p + 4, (uint32_t)(v >> 32));
}

/* Check the mapped file against its header and fill s; s->map is set. */
static int shard_validate(struct st_shard *s)
{
	const char *path = s->path;
	const uint8_t *h = s->map;
	ST_CHECK(s->map_size >= ST_SHARD_HEADER, REPREPARE,
		 "%s is %zu bytes, shorter than the %d-byte token shard header (truncated or not a shard)",
		 path, s->map_size, ST_SHARD_HEADER);
	ST_CHECK(!memcmp(h, SHARD_MAGIC, 8),
		 "pass a directory or .bin file written by strata prepare, or " REPREPARE,
		 "%s is not a strata token shard: bad magic (the file does not start with \"%s\")",
		 path, SHARD_MAGIC);
	uint32_t version = rd32(h + 8);
	ST_CHECK(version == SHARD_VERSION, "re-run strata prepare with this build",
		 "%s has token shard format version %u; this build reads version %u", path, version,
		 SHARD_VERSION);
	s->token_bytes = rd32(h + 12);
	ST_CHECK(s->token_bytes == 2 || s->token_bytes == 4, REPREPARE,
		 "%s: token width %u bytes in the header is invalid (must be 2 or 4); the header is corrupt",
		 path, s->token_bytes);
	s->vocab_size = rd32(h + 16);
	s->n_tokens = rd64(h + 24);
	memcpy(s->tokenizer, h + 32, ST_SHARD_NAME);
	s->tokenizer[ST_SHARD_NAME] = '\0';

	uint64_t data = s->map_size - ST_SHARD_HEADER;
	ST_CHECK(s->n_tokens <= data / s->token_bytes, REPREPARE,
		 "%s is truncated: its header declares %llu tokens of %u bytes but only %llu bytes of token data follow",
		 path, (unsigned long long)s->n_tokens, s->token_bytes, (unsigned long long)data);
	ST_CHECK(s->n_tokens * s->token_bytes == data, REPREPARE,
		 "%s is longer than its header says: %llu tokens of %u bytes, but %llu bytes of token data follow",
		 path, (unsigned long long)s->n_tokens, s->token_bytes, (unsigned long long)data);

	s->tokens = h + ST_SHARD_HEADER;
	/* hashed, and its largest token found, a slice at a time, each slice's
	 * pages released after it */
	const uint64_t want = rd64(h + 56), slice = (uint64_t)1 << 22; /* tokens */
	uint64_t got = FNV_BASIS;
	s->max_token = 0;
	for (uint64_t at = 0; at < s->n_tokens; at += slice) {
		const uint64_t n = s->n_tokens - at < slice ? s->n_tokens - at : slice;
		got = fnv1a(got, s->tokens + at * s->token_bytes, (size_t)(n * s->token_bytes));
		for (uint64_t i = at; i < at + n; i++) {
			const uint32_t t = shard_token(s, i);
			s->max_token = t > s->max_token ? t : s->max_token;
		}
		shard_release(s, at, n);
	}
	ST_CHECK(got == want, REPREPARE,
		 "%s is corrupt: token data hash mismatch (FNV-1a 64 of the tokens is %016llx, the header says %016llx)",
		 path, (unsigned long long)got, (unsigned long long)want);
	s->hash = got;
	return ST_OK;
}

void shard_release(const struct st_shard *s, uint64_t first, uint64_t n)
{
	if (!s->map || !n)
		return;
	/* none of its pages is ever written, so any may go (118 MiB stayed
	 * over 32000 random windows while only each window's own page went) */
	const size_t at = (size_t)(s->tokens - (const uint8_t *)s->map) + (size_t)(first * s->token_bytes);
	fs_map_drop(s->map, s->map_size, at, at + (size_t)(n * s->token_bytes));
}

int shard_has_magic(const void *text, size_t len)
{
	return len >= 8 && !memcmp(text, SHARD_MAGIC, 8);
}

int shard_open(struct st_shard *s, const char *path)
{
	memset(s, 0, sizeof *s);
	s->path = st_malloc(strlen(path) + 1);
	if (!s->path)
		return ST_FAIL;
	strcpy(s->path, path);
	int rc = fs_map_file(path, "token shard", &s->map, &s->map_size);
	if (rc == ST_OK)
		rc = shard_validate(s);
	if (rc != ST_OK)
		shard_close(s);
	return rc;
}

void shard_close(struct st_shard *s)
{
	fs_unmap_file(s->map, s->map_size);
	free(s->path);
	memset(s, 0, sizeof *s);
}

/* Token bytes gathered before a write(2): 1 MiB, 64 writes a 32 MiB file;
 * four writers (prepare's two splits and their masks) hold 4 MiB. */
#define WRITER_BUF ((size_t)1 << 20)

int shard_writer_open(struct shard_writer *w, const char *path, uint32_t vocab,
		      const char *tokenizer)
{
	memset(w, 0, sizeof *w);
	w->a.fd = -1;
	ST_CHECK(tokenizer && strlen(tokenizer) <= ST_SHARD_NAME, "use a shorter tokenizer name",
		 "cannot write %s: tokenizer name '%s' is longer than %d bytes", path,
		 tokenizer ? tokenizer : "(null)", ST_SHARD_NAME);
	ST_CHECK(vocab > 0, "this is a bug in the caller", "cannot write %s: vocabulary size 0",
		 path);
	w->vocab = vocab;
	w->token_bytes = vocab <= 65536 ? 2 : 4;
	w->hash = FNV_BASIS;
	strcpy(w->tokenizer, tokenizer);
	w->buf = st_malloc(WRITER_BUF);
	if (!w->buf)
		return ST_FAIL;
	if (fs_atomic_begin(&w->a, path) != ST_OK) {
		free(w->buf);
		w->buf = NULL;
		return ST_FAIL;
	}
	/* the header's place, filled in by finish once n and the hash are known */
	static const uint8_t zero[ST_SHARD_HEADER];
	w->open = 1;
	if (fs_atomic_write(&w->a, zero, sizeof zero) != ST_OK) {
		shard_writer_abort(w);
		return ST_FAIL;
	}
	return ST_OK;
}

void shard_writer_abort(struct shard_writer *w)
{
	if (!w->open)
		return; /* finished, failed (cleaned up then), or never opened */
	fs_atomic_abort(&w->a); /* closes and unlinks the temp file */
	free(w->buf);
	w->buf = NULL;
	w->fill = 0;
	w->open = 0;
}

/* The buffered token bytes out, hashed as they go. */
static int writer_flush(struct shard_writer *w)
{
	w->hash = fnv1a(w->hash, w->buf, w->fill);
	const int rc = fs_atomic_write(&w->a, w->buf, w->fill); /* aborts the file on failure */
	w->fill = 0;
	if (rc != ST_OK)
		shard_writer_abort(w);
	return rc;
}

/* n tokens: tokens[0..n), or n copies of same where tokens is NULL. */
static int writer_put(struct shard_writer *w, const uint32_t *tokens, uint32_t same, size_t n)
{
	if (!w->open)
		return ST_FAIL; /* an earlier call failed, and said why */
	const char *path = w->a.path;
	const uint32_t tb = w->token_bytes;
	if (n > (UINT64_MAX - ST_SHARD_HEADER) / tb - w->n) {
		ST_ERROR("split the text into several shards",
			 "cannot write %s: %llu tokens is too many for one shard", path,
			 (unsigned long long)(w->n + n));
		shard_writer_abort(w);
		return ST_FAIL;
	}
	for (size_t i = 0; i < n; i++) {
		const uint32_t t = tokens ? tokens[i] : same;
		if (t >= w->vocab) {
			ST_ERROR("this is a bug in the tokenizer",
				 "cannot write %s: token %u at position %llu is outside the vocabulary (%u)",
				 path, t, (unsigned long long)(w->n + i), w->vocab);
			shard_writer_abort(w);
			return ST_FAIL;
		}
		if (w->fill + tb > WRITER_BUF && writer_flush(w) != ST_OK)
			return ST_FAIL;
		uint8_t *p = w->buf + w->fill;
		p[0] = (uint8_t)t; /* little-endian, token_bytes of them */
		p[1] = (uint8_t)(t >> 8);
		if (tb == 4) {
			p[2] = (uint8_t)(t >> 16);
			p[3] = (uint8_t)(t >> 24);
		}
		w->fill += tb;
	}
	w->n += n;
	return ST_OK;
}

int shard_writer_put(struct shard_writer *w, const uint32_t *tokens, size_t n)
{
	return writer_put(w, tokens, 0, n);
}

int shard_writer_fill(struct shard_writer *w, uint32_t token, size_t n)
{
	return writer_put(w, NULL, token, n);
}

int shard_writer_finish(struct shard_writer *w)
{
	if (!w->open || writer_flush(w) != ST_OK)
		return ST_FAIL;
	uint8_t hdr[ST_SHARD_HEADER] = {0};
	memcpy(hdr, SHARD_MAGIC, 8);
	wr32(hdr + 8, SHARD_VERSION);
	wr32(hdr + 12, w->token_bytes);
	wr32(hdr + 16, w->vocab);
	wr64(hdr + 24, w->n);
	memcpy(hdr + 32, w->tokenizer, strlen(w->tokenizer)); /* rest stays NUL */
	wr64(hdr + 56, w->hash);
	if (lseek(w->a.fd, 0, SEEK_SET) != 0) {
		ST_ERROR("check the file system", "cannot write %s (seek in temp file %s): %s",
			 w->a.path, w->a.tmp, strerror(errno));
		shard_writer_abort(w);
		return ST_FAIL;
	}
	if (fs_atomic_write(&w->a, hdr, sizeof hdr) != ST_OK) {
		shard_writer_abort(w);
		return ST_FAIL;
	}
	free(w->buf);
	w->buf = NULL;
	w->open = 0;
	return fs_atomic_commit(&w->a); /* fsync, rename over path; aborts on failure */
}

int shard_write(const char *path, const uint32_t *tokens, uint64_t n, uint32_t vocab,
		const char *tokenizer)
{
	struct shard_writer w;
	ST_TRY(shard_writer_open(&w, path, vocab, tokenizer));
	ST_TRY(shard_writer_put(&w, tokens, (size_t)n));
	return shard_writer_finish(&w);
}
