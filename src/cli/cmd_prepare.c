/* strata prepare: text files -> token shards with a train/validation split.
 *
 * The text is cut into chunks of about --chunk bytes at line ends; every
 * k-th chunk (k = 1/val_fraction) goes to val.bin, the rest to train.bin, so
 * the held-out text is spread over the whole corpus instead of being its
 * last pages. Files are separated by the tokenizer's end-of-text token.
 *
 * Fine-tuning data: a .jsonl input holds one example per line,
 * {"prompt": ..., "completion": ...} (loss on the completion only) or
 * {"text": ...} (loss on all of it). Each example is [bos] + prompt +
 * completion + [eos], prompt and completion tokenized separately; every k-th
 * example goes to validation. Which tokens count in the loss is written to
 * train.mask.bin / val.mask.bin beside the shards (1 = a target, 0 = context
 * only), which the trainer and `strata eval` read with them. */
#include <cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "io/fsutil.h"
#include "io/shard.h"
#include "io/tokenizer.h"
#include "util/check.h"

static void help(void)
{
	printf("usage: strata prepare --input FILE [--input FILE ...] --out DIR [options]\n\n"
	       "  --input FILE        UTF-8 text, or .jsonl with {\"prompt\",\"completion\"} or {\"text\"}\n"
	       "                      per line (repeat for several files; - reads plain text\n"
	       "                      from standard input)\n"
	       "  --out DIR           writes DIR/train.bin and DIR/val.bin\n"
	       "  --val-fraction X    share of chunks held out for validation [0.05]\n"
	       "  --chunk N           split granularity in bytes [16384]\n"
	       "  --tokenizer T       byte, a Hugging Face tokenizer.json, or a model directory with one [byte]\n"
	       "  --force             replace the shards already in DIR\n");
}

struct buf {
	uint32_t *v;
	size_t n, cap;
};

static int push(struct buf *b, const uint32_t *x, size_t n)
{
	if (b->n + n > b->cap) {
		size_t cap = (b->n + n) * 2;
		uint32_t *v = realloc(b->v, cap * sizeof *v);
		ST_CHECK(v, NULL, "out of memory holding %zu tokens", cap);
		b->v = v;
		b->cap = cap;
	}
	memcpy(b->v + b->n, x, n * sizeof *x);
	b->n += n;
	return ST_OK;
}

/* One token run with its loss mask value; a NULL mask when no input is
 * JSONL (plain text alone writes no mask: every token is a target). */
static int push_masked(struct buf *tok, struct buf *mask, const uint32_t *x, size_t n, uint32_t m)
{
	ST_TRY(push(tok, x, n));
	if (!mask)
		return ST_OK;
	ST_TRY(push(mask, x, n)); /* room for n, overwritten below */
	for (size_t i = mask->n - n; i < mask->n; i++)
		mask->v[i] = m;
	return ST_OK;
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

/* Whether s ends with suffix, in either case (.jsonl, .JSONL). */
static int ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && !strcasecmp(s + a - b, suffix);
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

/* A JSONL file of examples into the train / val token and mask buffers. */
static int prepare_jsonl(const struct st_tokenizer *tk, const char *path, char *text, size_t len,
			 long period, long *example, struct buf *tok[2], struct buf *mask[2])
{
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
		const char *bad = !o ? "not valid JSON"
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
				     : "each line must be {\"prompt\": \"...\", \"completion\": \"...\"} or "
				       "{\"text\": \"...\"}",
				 "%s:%d: %s", path, line, bad);
			cJSON_Delete(o);
			rc = ST_FAIL;
			break;
		}
		empty += !*(cJSON_IsString(tx) ? tx->valuestring : co->valuestring);
		const int split = period > 1 && *example % period == period - 1;
		struct buf *t = tok[split], *m = mask[split];
		const char *parts[2] = {cJSON_IsString(tx) ? NULL : pr->valuestring,
					cJSON_IsString(tx) ? tx->valuestring : co->valuestring};
		if (tk->bos_id >= 0) {
			uint32_t bos = (uint32_t)tk->bos_id;
			rc = push_masked(t, m, &bos, 1, 0);
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
						    : push_masked(t, m, ids, c, k == 1); /* the prompt is context only */
		}
		if (rc == ST_OK && tk->eos_id >= 0) {
			uint32_t eos = (uint32_t)tk->eos_id;
			rc = push_masked(t, m, &eos, 1, 1); /* learn to stop */
		}
		cJSON_Delete(o);
		(*example)++;
		pos = end + 1;
	}
	free(ids);
	if (rc == ST_OK && empty)
		st_log_warn("%s: %ld example%s an empty completion or text: only <eos> is learned "
			    "from %s",
			    path, empty, empty == 1 ? " has" : "s have", empty == 1 ? "it" : "them");
	return rc;
}

/* Input f, read: the same file as an earlier input is refused (its text
 * would be in both splits, and validation loss would read low); text that
 * looks like JSONL under another name, and text that is not UTF-8, are
 * said, since both are taken as plain text. */
static int check_input(const char *const *inputs, int f, struct stat *seen, const char *text,
		       size_t len)
{
	/* seen[g]: the earlier inputs' device and inode (st_ino 0 when not a
	 * regular file: a FIFO or /dev/stdin is read once anyway) */
	struct stat *st = &seen[f];
	if (stat(inputs[f], st) != 0 || !S_ISREG(st->st_mode))
		st->st_ino = 0;
	for (int g = 0; g < f && st->st_ino; g++)
		ST_CHECK(seen[g].st_dev != st->st_dev || seen[g].st_ino != st->st_ino,
			 "give each file once: text in both splits makes the validation loss read low",
			 "--input %s is the same file as --input %s", inputs[f], inputs[g]);
	ST_CHECK(!shard_has_magic(text, len),
		 "give the text the shards were made from, or train on this directory's shards",
		 "--input %s is a strata token shard, not text", inputs[f]);
	const int jsonl = ends_with(inputs[f], ".jsonl");
	size_t i = strspn(text, " \t\r\n\xef\xbb\xbf");
	if (!jsonl && (ends_with(inputs[f], ".json") || ends_with(inputs[f], ".ndjson")) &&
	    i < len && text[i] == '{')
		st_log_warn("%s is read as plain text; if it holds one example per line, name it "
			    ".jsonl to train on its prompts and completions",
			    inputs[f]);
	else if (!jsonl && ends_with(inputs[f], ".json") && i < len && text[i] == '[')
		st_log_warn("%s is read as plain text; if it is a JSON array of examples, write them "
			    "one object per line into a .jsonl file to train on them as examples",
			    inputs[f]);
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
		st_log_warn("%s is not UTF-8 text: %zu bytes are invalid UTF-8, the first at byte %zu "
			    "(their bytes are kept in the examples as they are)",
			    inputs[f], bad, at);
	else if (bad)
		st_log_warn("%s is not UTF-8 text: %zu bytes are NUL or invalid UTF-8, the first at byte "
			    "%zu (their bytes are kept as they are)",
			    inputs[f], bad, at);
	return ST_OK;
}

/* Staging directories (.strata-prep.PID) of prepares that did not finish:
 * removed. Called under the lock, so none is a live prepare's, whatever
 * its PID (PIDs are reused, in containers soon). */
static void clear_stale_stages(const char *out)
{
	DIR *d = opendir(out);
	if (!d)
		return;
	struct dirent *e;
	char p[4400];
	while ((e = readdir(d))) {
		char *end;
		if (strncmp(e->d_name, ".strata-prep.", 13) != 0)
			continue;
		const long pid = strtol(e->d_name + 13, &end, 10);
		if (*end || pid <= 0)
			continue; /* not a stage's name */
		snprintf(p, sizeof p, "%s/%s", out, e->d_name);
		fs_rmtree(p);
	}
	closedir(d);
}

/* The names a prepare writes into --out, in the order they are moved into
 * place (train.bin last: see the swap in cmd_prepare). */
static const char *const shard_names[4] = {"val.bin", "train.mask.bin", "val.mask.bin",
					   "train.bin"};

/* One prepare per --out at a time: an exclusive flock on OUT/.strata-prepare.lock,
 * held until the process exits. Without it two prepares into one directory
 * both passed the check for an earlier train.bin, and their swaps could
 * interleave into one run's train.bin beside the other's val.bin. Then, under
 * the lock: the earlier shards (refused without --force), and anything not a
 * file where a shard goes, refused before any old shard is removed. */
static int prepare_lock(const char *out, int force, int *held)
{
	*held = 0;
	char path[4300];
	snprintf(path, sizeof path, "%s/.strata-prepare.lock", out);
	/* read-only: flock needs no more, and another user who may write the
	 * directory may then lock a file the first one made */
	const int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
	ST_CHECK(fd >= 0, "check the permissions of --out", "cannot open %s: %s", path,
		 strerror(errno));
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		const int err = errno;
		ST_CHECK(err != EWOULDBLOCK, "wait for it to finish, or choose another --out",
			 "%s is being written by another strata prepare", out);
		st_log_warn("%s: cannot lock (%s): a second prepare into it at the same time would "
			    "not be refused",
			    out, strerror(err));
	}
	*held = 1; /* fd stays open: the lock lasts as long as this process */
	snprintf(path, sizeof path, "%s/train.bin", out);
	ST_CHECK(force || !fs_exists(path), "pass --force to replace them, or choose another --out",
		 "%s already holds token shards (train.bin)", out);
	for (int k = 0; k < 4; k++) {
		struct stat st;
		snprintf(path, sizeof path, "%s/%s", out, shard_names[k]);
		ST_CHECK(lstat(path, &st) != 0 || S_ISREG(st.st_mode) || S_ISLNK(st.st_mode),
			 "move it out of the way", "%s is in the way: it is not a file, and strata "
			 "prepare writes a shard there", path);
	}
	return ST_OK;
}

/* A failed prepare into directories it made removes them again, with its
 * lock file when it holds the lock (not another prepare's: that one may
 * have come into the new directory first). */
static void prepare_unmake(const char *out, const size_t *made, int n_made, int held)
{
	if (!n_made)
		return;
	char lock[4300];
	snprintf(lock, sizeof lock, "%s/.strata-prepare.lock", out);
	if (held)
		unlink(lock);
	fs_rmdir_made(out, made, n_made);
}

int cmd_prepare(int argc, char **argv)
{
	struct cli_args a;
	ST_TRY(cli_parse(&a, argc, argv));
	if (cli_has(&a, "help")) {
		help();
		return ST_OK;
	}
	const char *out, *tok_name;
	ST_TRY(cli_get_str(&a, "out", NULL, &out));
	ST_TRY(cli_get_str(&a, "tokenizer", "byte", &tok_name));
	double val_frac;
	long chunk;
	ST_TRY(cli_get_double(&a, "val-fraction", 0.05, &val_frac));
	ST_TRY(cli_get_long(&a, "chunk", 16384, 1, 1L << 30, &chunk));
	int force;
	ST_TRY(cli_get_bool(&a, "force", &force));
	const char *inputs[CLI_MAX_ARGS];
	int n_in = 0, stdin_given = 0;
	cli_get(&a, "input", NULL); /* looked for: a slip of it is named */
	for (int i = 0; i < a.n; i++)
		if (!strcmp(a.key[i], "input")) {
			ST_CHECK(a.val[i] != cli_bare, "give the file after it", "--input needs a value");
			/* - is standard input, as sample's --prompt-file - (plain text) */
			const int is_stdin = !strcmp(a.val[i], "-");
			ST_CHECK(!(is_stdin && stdin_given++), "give - once",
				 "--input - is given twice: standard input is read once");
			inputs[n_in++] = is_stdin ? "/dev/stdin" : a.val[i];
			a.used[i] = 1;
		}
	ST_TRY(cli_check_unused(&a, "strata prepare"));
	/* --tokenizer RUN (a run or a checkpoint, as sample takes them): the
	 * tokenizer its checkpoint carries */
	char tk_dir[4096], probe[4200];
	snprintf(probe, sizeof probe, "%s/tokenizer.json", tok_name);
	if (strcmp(tok_name, "byte") != 0 && fs_is_dir(tok_name) && !fs_exists(probe)) {
		const int old = st_log_mute(1);
		if (resolve_model_dir(tk_dir, sizeof tk_dir, tok_name) == ST_OK)
			tok_name = tk_dir;
		st_log_mute(old);
	}
	ST_CHECK(out, "pass --out DIR", "strata prepare: no output directory (--out)");
	ST_CHECK(n_in > 0, "pass --input FILE", "strata prepare: no input text (--input)");
	char path[4096];
	snprintf(path, sizeof path, "%s/train.bin", out);
	ST_CHECK(force || !fs_exists(path), "pass --force to replace them, or choose another --out",
		 "%s already holds token shards (train.bin)", out);
	/* every k-th chunk or example is held out, k = round(1 / fraction) >= 2 */
	ST_CHECK(val_frac >= 0 && val_frac <= 0.5, "use a fraction like 0.05",
		 "--val-fraction must be in [0, 0.5] (got %g)", val_frac);
	/* --out and its lock first, so that a second prepare into it is refused
	 * before either spends its time encoding */
	size_t made[ST_MADE_MAX];
	int n_made = 0;
	ST_TRY(fs_mkdir_p_made(out, made, ST_MADE_MAX, &n_made));
	struct st_tokenizer tk;
	int held;
	if (prepare_lock(out, force, &held) != ST_OK || tokenizer_load(&tk, tok_name) != ST_OK) {
		prepare_unmake(out, made, n_made, held);
		return ST_FAIL;
	}

	/* read every input first: small corpora get smaller chunks, so that the
	 * validation split still has about 20 chunks to draw from */
	char **texts = st_calloc((size_t)n_in, sizeof *texts);
	size_t *lens = st_calloc((size_t)n_in, sizeof *lens);
	size_t total_bytes = 0;
	struct stat *in_stat = st_calloc((size_t)n_in, sizeof *in_stat);
	int rc = texts && lens && in_stat ? ST_OK : ST_FAIL;
	for (int f = 0; f < n_in && rc == ST_OK; f++) {
		rc = fs_read_file(inputs[f], &texts[f], &lens[f]);
		total_bytes += lens[f];
		if (rc == ST_OK)
			rc = check_input(inputs, f, in_stat, texts[f], lens[f]);
	}
	free(in_stat);
	long period = val_frac > 0 ? (long)lround(1.0 / val_frac) : 0;
	if (period > 1 && (long)(total_bytes / (size_t)chunk) < 20 * period) {
		chunk = (long)(total_bytes / (size_t)(20 * period));
		if (chunk < 256)
			chunk = 256;
	}

	/* loss masks only where there are examples: with plain text alone
	 * every token is a target, and a mask would cost 4 bytes a token */
	int masked = 0, n_text = 0;
	for (int f = 0; f < n_in; f++) {
		masked |= ends_with(inputs[f], ".jsonl");
		n_text += !ends_with(inputs[f], ".jsonl");
	}
	struct buf train = {0}, val = {0}, train_m = {0}, val_m = {0};
	struct buf *toks[2] = {&train, &val};
	struct buf *masks[2] = {masked ? &train_m : NULL, masked ? &val_m : NULL};
	long chunk_idx = 0, example = 0, text_val = 0;
	/* Each text file is encoded whole, then its ids are cut into chunks:
	 * encoding chunk by chunk gave other ids than the tokenizer does where a
	 * cut fell inside what it would merge ("\n\n" is one Llama 3 token) and
	 * added a prefix space at every chunk with add_prefix_space. The id
	 * buffer is reserved, not committed: pages are used as ids are written. */
	size_t text_max = 0;
	for (int f = 0; f < n_in; f++)
		if (!ends_with(inputs[f], ".jsonl") && lens[f] > text_max)
			text_max = lens[f];
	const size_t ids_bytes = tokenizer_max_ids(text_max) * sizeof(uint32_t);
	uint32_t *ids = NULL;
	/* one token's text, whole: a line break past a fixed buffer's end
	 * would not count as one */
	const size_t piece_cap = tokenizer_max_token_len(&tk);
	char *piece = rc == ST_OK ? st_malloc(piece_cap) : NULL;
	if (!piece)
		rc = ST_FAIL;
	if (rc == ST_OK) {
		void *map = mmap(NULL, ids_bytes, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (map == MAP_FAILED) {
			ST_ERROR("prepare the corpus in several smaller files",
				 "cannot reserve %zu bytes of address space for the ids of a %zu-byte file: %s",
				 ids_bytes, text_max, strerror(errno));
			rc = ST_FAIL;
		} else {
			ids = map;
		}
	}
	for (int f = 0; f < n_in && rc == ST_OK; f++) {
		const char *text = texts[f];
		size_t len = lens[f];
		if (ends_with(inputs[f], ".jsonl")) {
			rc = prepare_jsonl(&tk, inputs[f], texts[f], len, period, &example, toks, masks);
			continue;
		}
		/* chunks of about --chunk bytes, each ending after a token that
		 * ends a line where one comes within another --chunk (at most
		 * 64 KiB) bytes: a text with long or no lines is still cut near
		 * --chunk, so that it can hold out its validation share */
		const size_t reach = (size_t)chunk + ((size_t)chunk < 65536 ? (size_t)chunk : 65536);
		const size_t n = tokenizer_encode(&tk, ids, text, len);
		if (n == ST_ENCODE_FAILED) {
			ST_ERROR(NULL, "strata prepare: %s could not be encoded; nothing was written",
				 inputs[f]);
			rc = ST_FAIL;
			break;
		}
		size_t start = 0, bytes = 0;
		int split = 0; /* of the chunk last cut */
		for (size_t i = 0; i < n && rc == ST_OK; i++) {
			const size_t b = tokenizer_decode_one(&tk, piece, piece_cap, ids[i]);
			bytes += b;
			/* GPT-2's tokens join a line break to the next line's indent */
			const int line_end = b > 0 && memchr(piece, '\n', b);
			if (i + 1 < n && (bytes < (size_t)chunk || (!line_end && bytes < reach)))
				continue;
			split = period > 1 && chunk_idx % period == period - 1;
			rc = push_masked(toks[split], masks[split], ids + start, i + 1 - start, 1);
			chunk_idx++;
			text_val += split;
			start = i + 1;
			bytes = 0;
		}
		/* the file's ids are copied out: give their pages back */
		madvise(ids, tokenizer_max_ids(len) * sizeof *ids, MADV_DONTNEED);
		/* the file's end: in the split of its last chunk, which it ends */
		uint32_t eos = (uint32_t)tk.eos_id;
		if (rc == ST_OK && n > 0 && tk.eos_id >= 0)
			rc = push_masked(toks[split], masks[split], &eos, 1, 1);
	}
	if (ids)
		munmap(ids, ids_bytes);
	free(piece);
	for (int f = 0; texts && f < n_in; f++)
		free(texts[f]);
	free(texts);
	free(lens);
	if (rc == ST_OK && total_bytes == 0) {
		ST_ERROR("give a non-empty text file", "strata prepare: the input text is empty");
		rc = ST_FAIL;
	} else if (rc == ST_OK && train.n == 0 && val.n == 0) { /* JSONL of blank lines */
		ST_ERROR("give examples, one JSON object per line", "strata prepare: the input "
			 "(%zu bytes) holds no example and no text", total_bytes);
		rc = ST_FAIL;
	}
	if (rc == ST_OK && tk.eos_id < 0 && (n_text > 1 || masked))
		st_log_warn("the tokenizer %s names no end-of-text token (<eos>): %s; give a model "
			    "directory whose config.json names its eos_token_id as --tokenizer",
			    tk.name,
			    masked ? "the examples have no <eos>, so a model trained on them is not "
				     "taught to stop"
				   : "the files are joined with nothing between them");
	if (rc == ST_OK && period > 1 && fabs(1.0 / (double)period - val_frac) > 0.01 * val_frac)
		st_log_info("--val-fraction %g holds out one chunk or example in %ld, %.3g%%", val_frac,
			    period, 100.0 / (double)period);
	if (rc == ST_OK && val_frac > 0 && val.n > 0 && masked && chunk_idx > 0 && !text_val)
		/* beside examples, which fill val.bin on their own */
		st_log_warn("the text inputs (%ld chunk%s) gave no chunk to validation (one in %ld is "
			    "held out): the held-out loss scores the examples alone; a smaller --chunk "
			    "splits the text finer",
			    chunk_idx, chunk_idx == 1 ? "" : "s", period);
	if (rc == ST_OK && val_frac > 0 && val.n == 0 && masked) {
		ST_ERROR("give more examples, a larger --val-fraction, or --val-fraction 0",
			 "strata prepare: %ld example%s too few to hold out %g%% for validation "
			 "(one example in %ld is held out)",
			 example, example == 1 ? " is" : "s are", 100 * val_frac, period);
		rc = ST_FAIL;
	} else if (rc == ST_OK && val_frac > 0 && val.n == 0) {
		ST_ERROR("give more text, a smaller --chunk, or --val-fraction 0",
			 "strata prepare: the input (%zu bytes) is too short to hold out %g%% for validation",
			 total_bytes, 100 * val_frac);
		rc = ST_FAIL;
	}
	/* The new set is written whole into a staging directory inside out,
	 * then renamed into place, so a write that fails (a full disk) leaves
	 * the old set as it was. At the swap train.bin goes last and the old one
	 * first: until the whole set is in, out holds no train.bin, so a kill
	 * part-way cannot leave new training tokens beside an old val.bin or
	 * loss mask, which train and eval would read as a set. */
	char stage[4200], from[4400];
	snprintf(stage, sizeof stage, "%s/.strata-prep.%d", out, (int)getpid());
	if (rc == ST_OK)
		clear_stale_stages(out);
	if (rc == ST_OK)
		rc = fs_mkdir_p(stage);
	const char *const *names = shard_names;
	const struct buf *data[4] = {&val, &train_m, &val_m, &train};
	const int has[4] = {val.n > 0, masked && train.n > 0, masked && val.n > 0, 1};
	for (int k = 0; k < 4 && rc == ST_OK; k++) {
		const int mask = k == 1 || k == 2; /* a mask shard: values 0 and 1 */
		snprintf(from, sizeof from, "%s/%s", stage, names[k]);
		if (has[k])
			rc = shard_write(from, data[k]->v, data[k]->n, mask ? 2 : (uint32_t)tk.vocab_size,
					 mask ? "mask" : tk.name);
	}
	int swapping = 0;
	if (rc == ST_OK) {
		swapping = 1;
		snprintf(path, sizeof path, "%s/train.bin", out);
		rc = fs_unlink(path);
	}
	for (int k = 0; k < 4 && rc == ST_OK; k++) {
		snprintf(from, sizeof from, "%s/%s", stage, names[k]);
		snprintf(path, sizeof path, "%s/%s", out, names[k]);
		if (!has[k])
			unlink(path); /* an old split or mask must not pass for this data's */
		else if (rename(from, path) != 0) {
			const int err = errno;
			ST_ERROR(err == EACCES || err == EPERM || err == EROFS
					 ? "check the permissions of --out"
					 : NULL,
				 "cannot move %s into place: %s", path, strerror(err));
			rc = ST_FAIL;
		}
	}
	if (rc == ST_OK)
		rc = fs_fsync_dir(out);
	if (fs_exists(stage))
		fs_rmtree(stage);
	if (rc != ST_OK && swapping)
		ST_ERROR("re-run strata prepare once the cause above is fixed",
			 "strata prepare: %s holds no train.bin now (the old one was removed first)",
			 out);
	snprintf(path, sizeof path, "%s/train.bin", out);
	if (rc != ST_OK && !swapping && n_made)
		prepare_unmake(out, made, n_made, held); /* the directories this run made */
	else if (rc != ST_OK && !swapping && fs_exists(path))
		st_log_info("%s keeps its earlier shards: nothing there was changed", out);
	if (rc == ST_OK && masked) {
		size_t on = 0;
		for (size_t i = 0; i < train_m.n; i++)
			on += train_m.v[i];
		printf("%ld example%s; %zu of %zu training tokens are loss targets\n", example,
		       example == 1 ? "" : "s", on, train.n);
	}
	if (rc == ST_OK)
		printf("wrote %s: %zu train tokens, %zu val tokens (tokenizer %s, vocab %d) from %zu bytes\n",
		       out, train.n, val.n, tk.name, tk.vocab_size, total_bytes);
	if (rc == ST_OK && val.n)
		printf("held out %.1f%% of the tokens: one %s in %ld\n",
		       100.0 * (double)val.n / (double)(train.n + val.n), masked ? "example or chunk" : "chunk",
		       period);
	free(train.v);
	free(val.v);
	free(train_m.v);
	free(val_m.v);
	tokenizer_free(&tk);
	return rc;
}
