/* strata prepare's inputs into tokens (prepare_text.h): a text file is
 * encoded whole and its ids cut into chunks of about --chunk bytes at line
 * ends, every period-th chunk to validation; a JSONL file gives one example
 * a line, [bos] + prompt + completion + [eos], every period-th example to
 * validation, with a loss mask (0 on the prompt and bos). Runs of tokens go
 * straight to the split's shard writer, so no more than one file's ids are
 * held at a time. */
#include <cJSON.h>
#include <string.h>
#include <strings.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "cli/prepare_text.h"
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

/* The length of the well-formed UTF-8 sequence at s (at most n bytes), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	const unsigned char c = s[0];
	size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
	if (!k || k > n || (k == 2 && c < 0xc2) || (k == 4 && c > 0xf4))
		return 0;
	for (size_t i = 1; i < k; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if (k == 3) { /* no overlong forms, no surrogates */
		const unsigned cp = (c & 0x0fu) << 12 | (s[1] & 0x3fu) << 6 | (s[2] & 0x3fu);
		if (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
	}
	if (k == 4) {
		const unsigned cp = (c & 0x07u) << 18 | (s[1] & 0x3fu) << 12;
		if (cp < 0x10000 || cp > 0x10ffff)
			return 0;
	}
	return k;
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

void prep_warn_text(const char *path, const char *text, size_t len)
{
	const int jsonl = prep_ends_with(path, ".jsonl");
	size_t i = strspn(text, " \t\r\n\xef\xbb\xbf");
	if (!jsonl && (prep_ends_with(path, ".json") || prep_ends_with(path, ".ndjson")) &&
	    i < len && text[i] == '{')
		st_log_warn("%s is read as plain text; if it holds one example per line, name it "
			    ".jsonl to train on its prompts and completions",
			    path);
	else if (!jsonl && prep_ends_with(path, ".json") && i < len && text[i] == '[')
		st_log_warn("%s is read as plain text; if it is a JSON array of examples, write them "
			    "one object per line into a .jsonl file to train on them as examples",
			    path);
	size_t bad = 0, at = 0;
	for (size_t p = 0; p < len;) {
		const size_t n = utf8_len((const unsigned char *)text + p, len - p);
		if (!n || !text[p]) {
			if (!bad++)
				at = p;
			p++;
		} else {
			p += n;
		}
	}
	if (bad && jsonl) /* a raw NUL is refused by the example reader */
		st_log_warn("%s is not UTF-8 text: %zu byte%s invalid UTF-8, the first at byte %zu "
			    "(their bytes are kept in the examples as they are)",
			    path, bad, bad == 1 ? " is" : "s are", at);
	else if (bad)
		st_log_warn("%s is not UTF-8 text: %zu byte%s NUL or invalid UTF-8, the first at "
			    "byte %zu (their bytes are kept as they are)",
			    path, bad, bad == 1 ? " is" : "s are", at);
}

int prep_jsonl(const struct st_tokenizer *tk, const char *path, const char *text, size_t len,
	       struct prep_split *sp, struct prep_sink *s)
{
	const long period = sp->period;
	uint32_t *ids = NULL;
	size_t cap = 0;
	int line = 0, rc = ST_OK;
	long empty = 0; /* examples with nothing to learn but <eos> */
	static const char nul_msg[] = "a NUL character (\\u0000 or a raw 0 byte), which strata's "
				      "text cannot hold (the example would end there)";
	for (size_t pos = 0; pos < len && rc == ST_OK;) {
		size_t end = pos;
		while (end < len && text[end] != '\n')
			end++;
		line++;
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
		const char *dup = fs_json_duplicate_key(o);
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
				  : cJSON_IsString(tx) && (pr || co)
					  ? "both text and prompt/completion: which is the example?"
				  : nul ? nul_msg
					  : NULL;
		if (bad) {
			ST_ERROR(bad == nul_msg ? "remove the NUL characters from the line"
				 : bad == dup_msg ? "keep one of them"
				 : bad == half_msg ? "write the character whole (both halves of the pair, or the character itself)"
				     : "each line must be {\"prompt\": \"...\", \"completion\": \"...\"} or "
				       "{\"text\": \"...\"}",
				 "%s:%d: %s", path, line, bad);
			cJSON_Delete(o);
			rc = ST_FAIL;
			break;
		}
		empty += !*(cJSON_IsString(tx) ? tx->valuestring : co->valuestring);
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
			if (need > cap) {
				uint32_t *v = realloc(ids, need * sizeof *v);
				if (!v) {
					ST_ERROR(NULL, "out of memory");
					rc = ST_FAIL;
					break;
				}
				ids = v;
				cap = need;
			}
			size_t c = tokenizer_encode(tk, ids, parts[k], pl);
			rc = c == ST_ENCODE_FAILED ? ST_FAIL
						    : prep_emit(s, split, ids, c, k == 1); /* the prompt is context only */
		}
		if (rc == ST_OK && tk->eos_id >= 0) {
			uint32_t eos = (uint32_t)tk->eos_id;
			rc = prep_emit(s, split, &eos, 1, 1); /* learn to stop */
		}
		cJSON_Delete(o);
		sp->example++;
		pos = end + 1;
	}
	free(ids);
	if (rc == ST_OK && empty)
		st_log_warn("%s: %ld example%s an empty completion or text: only <eos> is learned "
			    "from %s",
			    path, empty, empty == 1 ? " has" : "s have", empty == 1 ? "it" : "them");
	return rc;
}

int prep_text(const struct st_tokenizer *tk, const char *path, const char *text, size_t len,
	      uint32_t *ids, char *piece, size_t piece_cap, struct prep_split *sp,
	      struct prep_sink *s)
{
	/* chunks of about --chunk bytes, each ending after a token that
	 * ends a line where one comes within another --chunk (at most
	 * 64 KiB) bytes: a text with long or no lines is still cut near
	 * --chunk, so that it can hold out its validation share */
	const size_t chunk = (size_t)sp->chunk;
	const long period = sp->period;
	const size_t reach = chunk + (chunk < 65536 ? chunk : 65536);
	const size_t n = tokenizer_encode(tk, ids, text, len);
	if (n == ST_ENCODE_FAILED) {
		ST_ERROR(NULL, "strata prepare: %s could not be encoded; nothing was written", path);
		return ST_FAIL;
	}
	int rc = ST_OK;
	size_t start = 0, bytes = 0;
	int split = 0; /* of the chunk last cut */
	for (size_t i = 0; i < n && rc == ST_OK; i++) {
		const size_t b = tokenizer_decode_one(tk, piece, piece_cap, ids[i]);
		bytes += b;
		/* GPT-2's tokens join a line break to the next line's indent */
		const int line_end = b > 0 && memchr(piece, '\n', b);
		if (i + 1 < n && (bytes < chunk || (!line_end && bytes < reach)))
			continue;
		split = period > 1 && sp->chunk_idx % period == period - 1;
		if (start == 0 && sp->text_bos && tk->bos_id >= 0) { /* the file's start */
			const uint32_t bos = (uint32_t)tk->bos_id;
			rc = prep_emit(s, split, &bos, 1, 0); /* context, as in an example */
		}
		if (rc == ST_OK)
			rc = prep_emit(s, split, ids + start, i + 1 - start, 1);
		sp->chunk_idx++;
		sp->text_val += split;
		start = i + 1;
		bytes = 0;
	}
	/* the file's ids are written out: give their pages back */
	madvise(ids, tokenizer_max_ids(len) * sizeof *ids, MADV_DONTNEED);
	/* the file's end: in the split of its last chunk, which it ends */
	uint32_t eos = (uint32_t)tk->eos_id;
	if (rc == ST_OK && n > 0 && tk->eos_id >= 0)
		rc = prep_emit(s, split, &eos, 1, 1);
	return rc;
}
