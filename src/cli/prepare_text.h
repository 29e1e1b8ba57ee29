/* strata prepare's inputs into tokens: one text file cut into chunks, one
 * JSONL file of examples, each handed run by run to the shard writers of
 * the split it falls in (cmd_prepare.c owns the rest: arguments, the lock,
 * the staging directory and the swap into place). */
#ifndef ST_PREPARE_TEXT_H
#define ST_PREPARE_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "io/shard.h"
#include "io/tokenizer.h"

/* Where the tokens go: the train (0) and validation (1) shards, and their
 * loss masks where any input is JSONL (masked; plain text alone writes no
 * mask: every token is a target). */
struct prep_sink {
	struct shard_writer tok[2], mask[2];
	int masked;
	size_t targets; /* training tokens that are loss targets (mask 1) */
};

/* How the inputs are split, and what has been cut so far. */
struct prep_split {
	long chunk;     /* bytes of text per chunk */
	long period;    /* every period-th chunk or example is held out (none below 2) */
	long chunk_idx; /* text chunks cut */
	long text_val;  /* of them held out */
	long example;   /* JSONL examples read */
	int text_bos;   /* --bos: <bos> before each text file, as a document's start */
};

/* How an input is named in messages: --input - as standard input, not
 * the /dev/stdin it is opened as. */
const char *prep_shown(const char *path);
/* Whether s ends with suffix, in either case (.jsonl, .JSONL). */
int prep_ends_with(const char *s, const char *suffix);
/* n tokens into split's shard, with mask value m where there are masks. */
int prep_emit(struct prep_sink *s, int split, const uint32_t *ids, size_t n, uint32_t m);
/* An input whose size stat cannot tell (standard input, a pipe, a /proc
 * file) as the survey leaves it: its first len bytes in text, the rest to
 * read from fd (-1 once the end was read: eof). */
struct prep_source {
	char *text;
	size_t len;
	int fd;
	int eof;
};
/* Opens path and reads its first bytes: a part's (16 MiB), or min where
 * that is more (the bytes that settle the corpus's size for the chunk
 * rule), or all of it where it is shorter. Errors said. */
int prep_source_open(struct prep_source *src, const char *path, size_t min);
void prep_source_close(struct prep_source *src);
/* A JSONL file of examples into the sink, read a part at a time: from src
 * (taken over and closed) where the survey began it, else opened here.
 * *bytes: the bytes read. Text that is not UTF-8 is said. */
int prep_jsonl(const struct st_tokenizer *tk, const char *path, struct prep_source *src,
	       struct prep_split *sp, struct prep_sink *s, size_t *bytes);
/* A text file, encoded a part at a time (tokenizer_encode_part: the whole
 * file's ids) and cut into chunks into the sink; src, *bytes as for
 * prep_jsonl; piece holds one token's text (piece_cap:
 * tokenizer_max_token_len). Text that looks like JSON examples under
 * another name, or is not UTF-8, is said. */
int prep_text(const struct st_tokenizer *tk, const char *path, struct prep_source *src,
	      char *piece, size_t piece_cap, struct prep_split *sp, struct prep_sink *s,
	      size_t *bytes);

#endif
