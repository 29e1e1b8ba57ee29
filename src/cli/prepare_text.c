/* strata prepare's inputs into tokens (prepare_text.h): a text file is
 * encoded and its ids cut into chunks of about --chunk bytes at line ends,
 * every period-th chunk to validation; a JSONL file gives one example a
 * line, [bos] + prompt + completion + [eos], every period-th example to
 * validation, with a loss mask (0 on the prompt and bos). Files are read a
 * part at a time (16 MiB), so a corpus file larger than memory is prepared
 * as well as a small one: a text file's parts are encoded with
 * tokenizer_encode_part, which gives the ids of the whole file, and a JSONL
 * file's parts end at line ends. Runs of tokens go straight to the split's
 * shard writer. */
#include <cJSON.h>
#include <string.h>
#include <strings.h>
#include <stdlib.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/prepare_text.h"
#include "util/utf8.h"
#include "io/fsutil.h"
#include "util/check.h"

int prep_ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && !strcasecmp(s + a - b, suffix);
}

int prep_emit(struct prep_sink *s, int split, const uint32_t *ids, size_t n, uint32_t m)
{
	ST_TRY(shard_writer_put(&s->tok[split], ids, n));
	if (!s->masked)
		return ST_OK;
	if (split == 0 && m)
		s->targets += n;
	return shard_writer_fill(&s->mask[split], m, n);
}

/* Whether a JSON text holds the escape \u0000: a C string ends there, and
 * the rest of that value would be lost without a word. */
static int has_nul_escape(const char *s, size_t n)
{
	for (size_t i = 0; i + 1 < n; i++)
		if (s[i] == '\\') {
			if (s[i + 1] == 'u' && i + 5 < n && !strncmp(s + i + 2, "0000", 4))
				return 1;
			i++; /* the escaped character */
		}
	return 0;
}

/* Where a JSON text holds half of a UTF-16 surrogate pair (\ud800 to
 * \udfff without its other half), which cJSON refuses as a whole: the
 * escape's 6 characters into out, else "". Python's json reads it (and a
 * text cut inside an emoji's pair can hold one). */
static void lone_surrogate(const char *s, size_t n, char out[7])
{
	out[0] = '\0';
	for (size_t i = 0; i + 5 < n; i++) {
		if (s[i] != '\\')
			continue;
		const int hi = s[i + 1] == 'u' && (s[i + 2] == 'd' || s[i + 2] == 'D') &&
			       strchr("89abAB", s[i + 3]) && s[i + 3];
		const int lo = s[i + 1] == 'u' && (s[i + 2] == 'd' || s[i + 2] == 'D') &&
			       strchr("cdefCDEF", s[i + 3]) && s[i + 3];
		const int paired = hi && i + 11 < n && s[i + 6] == '\\' && s[i + 7] == 'u' &&
				   (s[i + 8] == 'd' || s[i + 8] == 'D') && strchr("cdefCDEF", s[i + 9]) &&
				   s[i + 9];
		if ((hi && !paired) || lo) {
			memcpy(out, s + i, 6);
			out[6] = '\0';
			return;
		}
		i += paired ? 11 : 1; /* the escaped character, or the whole pair */
	}
}

/* ---- reading a file a part at a time --------------------------------------------- */

/* Bytes per part: STRATA_PREP_PART (tests cut files into parts of a few
 * bytes), else 16 MiB. A part that cannot be used (one line of JSONL, or a
 * text the tokenizer cannot cut, longer than it) is read longer. */
static size_t part_bytes(void)
{
	const char *env = getenv("STRATA_PREP_PART");
	const long v = env ? atol(env) : 0;
	return v > 0 ? (size_t)v : (size_t)16 << 20;
}

/* Reads fd into buf until *len reaches cap or the end (*eof); 0 or errno */
static int read_into(int fd, char *buf, size_t cap, size_t *len, int *eof)
{
	while (*len < cap && !*eof) {
		const ssize_t got = read(fd, buf + *len, cap - *len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return errno;
		*eof = got == 0;
		*len += (size_t)got;
	}
	return 0;
}

const char *prep_shown(const char *path)
{
	return strcmp(path, "/dev/stdin") ? path : "- (standard input)";
}

int prep_source_open(struct prep_source *src, const char *path, size_t min)
{
	*src = (struct prep_source){.fd = open(path, O_RDONLY | O_CLOEXEC)};
	ST_CHECK(src->fd >= 0, "check the path and its permissions", "cannot open %s: %s",
		 prep_shown(path), strerror(errno));
	struct stat st, null;
	int err = fstat(src->fd, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : 0;
	/* a device like /dev/zero or /dev/urandom never ends: it ran until the
	 * disk was full (a terminal ends at ^D, and /dev/null at once) */
	if (!err && S_ISCHR(st.st_mode) && !isatty(src->fd) &&
	    !(stat("/dev/null", &null) == 0 && null.st_rdev == st.st_rdev)) {
		close(src->fd);
		*src = (struct prep_source){.fd = -1};
		ST_USAGE_ERROR("give a file, or pipe a finite text to --input -",
			       "--input %s is a character device: its reads have no end",
			       prep_shown(path));
		return ST_FAIL;
	}
	const size_t want = min > part_bytes() ? min : part_bytes();
	size_t cap = 0;
	while (!err && !src->eof && src->len < want) {
		cap = cap ? 2 * cap : 65536;
		char *b = realloc(src->text, cap);
		if (!b) {
			err = ENOMEM;
			break;
		}
		src->text = b;
		err = read_into(src->fd, src->text, cap < want ? cap : want, &src->len, &src->eof);
	}
	if (src->eof || err) {
		close(src->fd);
		src->fd = -1;
	}
	if (err) {
		free(src->text);
		*src = (struct prep_source){.fd = -1};
		ST_ERROR(err == EISDIR ? "give the path of a file" : "check the file and the device it is on",
			 "cannot read %s: %s", prep_shown(path), strerror(err));
		return ST_FAIL;
	}
	return ST_OK;
}

void prep_source_close(struct prep_source *src)
{
	if (src->fd >= 0)
		close(src->fd);
	free(src->text);
	*src = (struct prep_source){.fd = -1};
}

/* A file's bytes text[0..len), from byte off of the file, read into buf:
 * from a source the survey began (its first bytes, then its fd), or from
 * the file opened at its turn. eof: text runs to the file's end. */
struct reader {
	const char *path;
	int fd;
	char *buf;
	size_t cap, buf_cap, len, off;
	const char *text;
	int eof;
};

/* src: taken over (closed with the reader) where the survey began it; else
 * the file is opened here */
static int reader_open(struct reader *r, const char *path, struct prep_source *src)
{
	*r = (struct reader){.path = prep_shown(path), .fd = -1, .cap = part_bytes()};
	if (src && (src->text || src->fd >= 0 || src->eof)) { /* begun by the survey */
		r->fd = src->fd;
		r->buf = src->text;
		r->len = r->buf_cap = src->len;
		r->eof = src->eof;
		r->cap = r->len > r->cap ? r->len : r->cap;
		*src = (struct prep_source){.fd = -1};
		return ST_OK;
	}
	r->fd = open(path, O_RDONLY | O_CLOEXEC);
	ST_CHECK(r->fd >= 0, "check the path and its permissions", "cannot open %s: %s", r->path,
		 strerror(errno));
	return ST_OK;
}

static void reader_close(struct reader *r)
{
	if (r->fd >= 0)
		close(r->fd);
	free(r->buf);
}

/* text as long as the part allows (cap), or to the end */
static int reader_fill(struct reader *r)
{
	if (r->buf_cap < r->cap && !r->eof) {
		char *b = realloc(r->buf, r->cap);
		ST_CHECK(b, "free some memory", "out of memory reading %s (%zu bytes at a time)",
			 r->path, r->cap);
		r->buf = b;
		r->buf_cap = r->cap;
	}
	r->text = r->buf;
	const int err = r->eof ? 0 : read_into(r->fd, r->buf, r->cap, &r->len, &r->eof);
	ST_CHECK(!err, "check the file and the device it is on", "cannot read %s: %s", r->path,
		 strerror(err));
	return ST_OK;
}

/* The first used bytes are done with; none: the next part is twice as long */
static void reader_next(struct reader *r, size_t used)
{
	if (!used)
		r->cap *= 2;
	r->off += used;
	memmove(r->buf, r->buf + used, r->len - used);
	r->len -= used;
}

/* ---- what is said about an input's text ------------------------------------------ */

/* A file that looks like JSONL under another name, said from its first part. */
static void warn_json_name(const char *path, const char *text, size_t len)
{
	const int jsonl = prep_ends_with(path, ".jsonl");
	size_t i = 0; /* past white space and a byte order mark */
	while (i < len && text[i] && strchr(" \t\r\n\xef\xbb\xbf", text[i]))
		i++;
	if (!jsonl && (prep_ends_with(path, ".json") || prep_ends_with(path, ".ndjson")) &&
	    i < len && text[i] == '{')
		st_log_warn("%s is read as plain text; if it holds one example per line, name it "
			    ".jsonl to train on its prompts and completions",
			    path);
	else if (!jsonl && prep_ends_with(path, ".json") && i < len && text[i] == '[')
		st_log_warn("%s is read as plain text; if it is a JSON array of examples, write them "
			    "one object per line into a .jsonl file to train on them as examples",
			    path);
}

/* Bytes that are NUL or not UTF-8, counted over the parts of a file. */
struct utf8_count {
	size_t bad, at; /* how many; the file offset of the first */
	size_t done;    /* the file's bytes counted so far */
};

/* The reader's bytes up to file offset upto, each once (a character that
 * runs past upto is counted whole, its bytes read from the part) */
static void count_bad(struct utf8_count *c, const struct reader *r, size_t upto)
{
	size_t p = c->done > r->off ? c->done - r->off : 0;
	for (; r->off + p < upto;) {
		const size_t n = st_utf8_len((const unsigned char *)r->text + p, r->len - p);
		if (!n || !r->text[p]) {
			if (!c->bad++)
				c->at = r->off + p;
			p++;
		} else {
			p += n;
		}
	}
	c->done = r->off + p;
}

static void warn_bad(const struct utf8_count *c, const char *path)
{
	const int jsonl = prep_ends_with(path, ".jsonl");
	if (c->bad && jsonl) /* a raw NUL is refused by the example reader */
		st_log_warn("%s is not UTF-8 text: %zu byte%s invalid UTF-8, the first at byte %zu "
			    "(their bytes are kept in the examples as they are)",
			    path, c->bad, c->bad == 1 ? " is" : "s are", c->at);
	else if (c->bad)
		st_log_warn("%s is not UTF-8 text: %zu byte%s NUL or invalid UTF-8, the first at "
			    "byte %zu (their bytes are kept as they are)",
			    path, c->bad, c->bad == 1 ? " is" : "s are", c->at);
}

/* A JSONL file's state between its parts */
struct jsonl {
	long line;
	long empty; /* examples with nothing to learn but <eos> */
	uint32_t *ids;
	size_t cap;
};

/* The examples of text[0..len), whole lines (the last one may end at the
 * file's end) */
static int jsonl_lines(const struct st_tokenizer *tk, const char *path, const char *text,
		       size_t len, struct prep_split *sp, struct prep_sink *s, struct jsonl *js)
{
	const long period = sp->period;
	int rc = ST_OK;
	static const char nul_msg[] = "a NUL character (\\u0000 or a raw 0 byte), which strata's "
				      "text cannot hold (the example would end there)";
	for (size_t pos = 0; pos < len && rc == ST_OK;) {
		size_t end = pos;
		while (end < len && text[end] != '\n')
			end++;
		js->line++;
		const size_t n = end - pos;
		int blank = 1;
		for (size_t i = pos; i < end && blank; i++)
			blank = text[i] == ' ' || text[i] == '\t' || text[i] == '\r';
		if (blank) {
			pos = end + 1;
			continue;
		}
		const char *stop = NULL;
		cJSON *o = cJSON_ParseWithLengthOpts(text + pos, n, &stop, 0);
		for (const char *q = stop; o && q && q < text + end; q++)
			if (*q != ' ' && *q != '\t' && *q != '\r') { /* two objects on a line */
				cJSON_Delete(o);
				o = NULL;
			}
		const cJSON *pr = cJSON_GetObjectItemCaseSensitive(o, "prompt");
		const cJSON *co = cJSON_GetObjectItemCaseSensitive(o, "completion");
		const cJSON *tx = cJSON_GetObjectItemCaseSensitive(o, "text");
		const int nul = has_nul_escape(text + pos, n) || memchr(text + pos, 0, n);
		/* the example's own keys: a repeated key in an object beside
		 * them (metadata strata does not read) leaves nothing open */
		const char *dup = fs_json_duplicate_member(o);
		char dup_msg[160];
		snprintf(dup_msg, sizeof dup_msg, "the key \"%.64s\" appears twice: which one is the example's?",
			 dup ? dup : "");
		char half[7] = "", half_msg[160];
		if (!o)
			lone_surrogate(text + pos, n, half);
		snprintf(half_msg, sizeof half_msg,
			 "not valid JSON: %s is half of a UTF-16 surrogate pair, not a character", half);
		const char *bad = !o && *half ? half_msg
				  : !o ? "not valid JSON"
				  : dup ? dup_msg
				  : !cJSON_IsObject(o) || !((cJSON_IsString(pr) && cJSON_IsString(co)) ||
							    cJSON_IsString(tx))
					  ? "an object without string prompt and completion, or text"
				  /* any "text" key (a null or a number too: it was left
				   * out without a word, where a non-string prompt beside a
				   * text is refused) */
				  : tx && (pr || co)
					  ? "both text and prompt/completion: which is the example?"
				  : nul ? nul_msg
					  : NULL;
		if (bad) {
			ST_ERROR(bad == nul_msg ? "remove the NUL characters from the line"
				 : bad == dup_msg ? "keep one of them"
				 : bad == half_msg ? "write the character whole (both halves of the pair, or the character itself)"
				     : "each line must be {\"prompt\": \"...\", \"completion\": \"...\"} or "
				       "{\"text\": \"...\"}",
				 "%s:%ld: %s", path, js->line, bad);
			cJSON_Delete(o);
			rc = ST_FAIL;
			break;
		}
		js->empty += !*(cJSON_IsString(tx) ? tx->valuestring : co->valuestring);
		const int split = period > 1 && sp->example % period == period - 1;
		const char *parts[2] = {cJSON_IsString(tx) ? NULL : pr->valuestring,
					cJSON_IsString(tx) ? tx->valuestring : co->valuestring};
		if (tk->bos_id >= 0) {
			uint32_t bos = (uint32_t)tk->bos_id;
			rc = prep_emit(s, split, &bos, 1, 0);
		}
		for (int k = 0; k < 2 && rc == ST_OK; k++) {
			if (!parts[k])
				continue;
			size_t pl = strlen(parts[k]), need = tokenizer_max_ids(pl);
			if (need > js->cap) {
				uint32_t *v = realloc(js->ids, need * sizeof *v);
				if (!v) {
					ST_ERROR(NULL, "out of memory");
					rc = ST_FAIL;
					break;
				}
				js->ids = v;
				js->cap = need;
			}
			size_t c = tokenizer_encode(tk, js->ids, parts[k], pl);
			rc = c == ST_ENCODE_FAILED ? ST_FAIL /* the prompt is context only */
						    : prep_emit(s, split, js->ids, c, k == 1);
		}
		if (rc == ST_OK && tk->eos_id >= 0) {
			uint32_t eos = (uint32_t)tk->eos_id;
			rc = prep_emit(s, split, &eos, 1, 1); /* learn to stop */
		}
		cJSON_Delete(o);
		sp->example++;
		pos = end + 1;
	}
	return rc;
}

int prep_jsonl(const struct st_tokenizer *tk, const char *path, struct prep_source *src,
	       struct prep_split *sp, struct prep_sink *s, size_t *bytes)
{
	struct reader r;
	ST_TRY(reader_open(&r, path, src));
	path = r.path; /* for the messages */
	struct jsonl js = {0};
	struct utf8_count bad = {0};
	int rc;
	while ((rc = reader_fill(&r)) == ST_OK) {
		size_t used = r.len; /* to the last line end, or the end */
		while (!r.eof && used > 0 && r.text[used - 1] != '\n')
			used--;
		count_bad(&bad, &r, r.off + used);
		if ((rc = jsonl_lines(tk, path, r.text, used, sp, s, &js)) != ST_OK || r.eof)
			break;
		reader_next(&r, used);
	}
	*bytes = r.off + r.len;
	reader_close(&r);
	free(js.ids);
	if (rc == ST_OK)
		warn_bad(&bad, path);
	if (rc == ST_OK && js.empty)
		st_log_warn("%s: %ld example%s an empty completion or text: only <eos> is learned "
			    "from %s",
			    path, js.empty, js.empty == 1 ? " has" : "s have",
			    js.empty == 1 ? "it" : "them");
	return rc;
}

/* A text file's chunks being cut: the ids of the chunk not yet written
 * (from earlier parts) and its bytes of text. */
struct chunker {
	uint32_t *ids;
	size_t n, cap;
	size_t bytes;
	int split; /* of the chunk last cut */
	int cut;   /* chunks of this file cut */
	int need;  /* continuation bytes the last UTF-8 character still lacks */
};

/* c->need after the bytes of one more token: a cut where no line ends
 * waits for a character's end (byte tokens, or byte-level pieces of one
 * character, cut CJK text mid-character, and train.bin, whose chunks run
 * together, held byte sequences that the text never had). Bytes that are
 * no UTF-8 start over. */
static void utf8_track(struct chunker *c, const char *piece, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const unsigned char b = (unsigned char)piece[i];
		if (c->need && (b & 0xc0) == 0x80)
			c->need--;
		else
			c->need = b >= 0xf0 ? 3 : b >= 0xe0 ? 2 : b >= 0xc0 ? 1 : 0;
	}
}

/* A chunk ends with ids[0..n) (after what c holds) */
static int chunk_cut(const struct st_tokenizer *tk, struct chunker *c, const uint32_t *ids,
		     size_t n, struct prep_split *sp, struct prep_sink *s)
{
	const long period = sp->period;
	c->split = period > 1 && sp->chunk_idx % period == period - 1;
	int rc = ST_OK;
	if (!c->cut++ && sp->text_bos && tk->bos_id >= 0) { /* the file's start */
		const uint32_t bos = (uint32_t)tk->bos_id;
		rc = prep_emit(s, c->split, &bos, 1, 0); /* context, as in an example */
	}
	if (rc == ST_OK && c->n)
		rc = prep_emit(s, c->split, c->ids, c->n, 1);
	if (rc == ST_OK && n)
		rc = prep_emit(s, c->split, ids, n, 1);
	sp->chunk_idx++;
	sp->text_val += c->split;
	c->n = 0;
	c->bytes = 0;
	return rc;
}

/* ids[0..n) held until their chunk is cut */
static int chunk_hold(struct chunker *c, const uint32_t *ids, size_t n)
{
	if (c->n + n > c->cap) {
		const size_t cap = 2 * (c->n + n);
		uint32_t *v = realloc(c->ids, cap * sizeof *v);
		ST_CHECK(v, "free some memory", "out of memory holding a chunk of %zu tokens", c->n + n);
		c->ids = v;
		c->cap = cap;
	}
	memcpy(c->ids + c->n, ids, n * sizeof *ids);
	c->n += n;
	return ST_OK;
}

int prep_text(const struct st_tokenizer *tk, const char *path, struct prep_source *src,
	      char *piece, size_t piece_cap, struct prep_split *sp, struct prep_sink *s,
	      size_t *bytes)
{
	/* chunks of about --chunk bytes, each ending after a token that
	 * ends a line where one comes within another --chunk (at most
	 * 64 KiB) bytes: a text with long or no lines is still cut near
	 * --chunk, so that it can hold out its validation share */
	const size_t chunk = (size_t)sp->chunk;
	const size_t reach = chunk + (chunk < 65536 ? chunk : 65536);
	struct reader r;
	ST_TRY(reader_open(&r, path, src));
	path = r.path; /* for the messages */
	struct chunker c = {0};
	struct utf8_count bad = {0};
	uint32_t *ids = NULL;
	size_t ids_cap = 0, n_ids = 0;
	unsigned fresh = ~0u;
	int rc, looked = 0;
	while ((rc = reader_fill(&r)) == ST_OK) {
		if (!looked++) /* once: a first part that encodes nothing is read again */
			warn_json_name(path, r.text, r.len);
		if (tokenizer_max_ids(r.len) > ids_cap) {
			uint32_t *v = realloc(ids, tokenizer_max_ids(r.len) * sizeof *v);
			if (!v) {
				ST_ERROR("free some memory", "out of memory encoding %s (%zu bytes at a time)",
					 path, r.len);
				rc = ST_FAIL;
				break;
			}
			ids = v;
			ids_cap = tokenizer_max_ids(r.len);
		}
		size_t used;
		const size_t n = tokenizer_encode_part(tk, ids, r.text, r.len, r.eof, &fresh, &used);
		if (n == ST_ENCODE_FAILED) {
			ST_ERROR(NULL, "strata prepare: %s could not be encoded; nothing was written", path);
			rc = ST_FAIL;
			break;
		}
		count_bad(&bad, &r, r.off + used);
		n_ids += n;
		size_t start = 0;
		for (size_t i = 0; i < n && rc == ST_OK; i++) {
			const size_t b = tokenizer_decode_one(tk, piece, piece_cap, ids[i]);
			c.bytes += b;
			utf8_track(&c, piece, b);
			/* GPT-2's tokens join a line break to the next line's indent */
			const int line_end = b > 0 && memchr(piece, '\n', b);
			/* past reach, at a character's end (64 bytes more at most:
			 * pieces that each end inside a character) */
			if (c.bytes < chunk || (!line_end && (c.bytes < reach || (c.need && c.bytes < reach + 64))))
				continue;
			rc = chunk_cut(tk, &c, ids + start, i + 1 - start, sp, s);
			start = i + 1;
		}
		if (rc == ST_OK)
			rc = chunk_hold(&c, ids + start, n - start);
		if (rc != ST_OK || r.eof)
			break;
		reader_next(&r, used);
	}
	*bytes = r.off + r.len;
	reader_close(&r);
	free(ids);
	/* the file's last chunk, then its end: in the split of that chunk */
	if (rc == ST_OK && c.n)
		rc = chunk_cut(tk, &c, NULL, 0, sp, s);
	free(c.ids);
	uint32_t eos = (uint32_t)tk->eos_id;
	if (rc == ST_OK && n_ids > 0 && tk->eos_id >= 0)
		rc = prep_emit(s, c.split, &eos, 1, 1);
	if (rc == ST_OK)
		warn_bad(&bad, path);
	return rc;
}
