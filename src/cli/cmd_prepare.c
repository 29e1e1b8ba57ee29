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
 * only), which the trainer and `strata eval` read with them.
 *
 * Memory: one part of one input at a time. Every input is looked at first
 * (prep_survey: its size by stat, the checks that refuse it); then each is
 * read a part (16 MiB) at a time, encoded and its tokens written as they
 * come to the shard writers in a staging directory, so that a prepare needs
 * memory for a part's text and ids, not for its largest file. An input
 * whose size stat cannot tell (standard input, a pipe) is read whole in the
 * survey and held until its turn. The chunking lives in prepare_text.c. */
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/prepare_text.h"
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
	       "  --chunk N           split granularity in bytes [16384]; smaller for a small\n"
	       "                      corpus, so that validation has about 20 chunks\n"
	       "  --tokenizer T       byte, a Hugging Face tokenizer.json, or a model directory with one [byte]\n"
	       "  --bos               put the tokenizer's <bos> before each text file, as a\n"
	       "                      document's start (JSONL examples always have it) [false]\n"
	       "  --force             replace the shards already in DIR\n");
}

/* One input as the survey leaves it, before any is encoded. */
struct prep_input {
	struct stat st;         /* st_ino 0 where not a regular file */
	struct prep_source src; /* begun: an input whose size stat cannot tell */
	size_t len;             /* the file's size by stat, or src's bytes read */
};

/* The first bytes (at most 8, *n of them) of a regular file: enough to tell
 * a token shard given as text. Errors said as fs_read_file says them. */
static int peek_head(const char *path, char head[8], size_t *n)
{
	*n = 0;
	const int fd = open(path, O_RDONLY | O_CLOEXEC);
	ST_CHECK(fd >= 0, "check the path and its permissions", "cannot open %s: %s", prep_shown(path),
		 strerror(errno));
	while (*n < 8) {
		const ssize_t r = read(fd, head + *n, 8 - *n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			const int err = errno;
			close(fd);
			ST_ERROR("check the file and the device it is on", "cannot read %s: %s", prep_shown(path),
				 strerror(err));
			return ST_FAIL;
		}
		if (r == 0)
			break;
		*n += (size_t)r;
	}
	close(fd);
	return ST_OK;
}

/* Every input, before any is encoded, so that a bad one is not found hours
 * into a corpus: one that cannot be read, the same file as an earlier input
 * (its text would be in both splits, and validation loss would read low), a
 * token shard given as text. A regular file's size comes from stat, and its
 * text is read at its turn; of an input whose size stat cannot tell
 * (standard input or another pipe, a /proc file: they report 0) the first
 * part is read here, or the first `sure` bytes where more (past those the
 * corpus is too large for the chunk rule to matter), and held until its
 * turn, when the rest is read. *bytes: the inputs' bytes, all told, or as
 * many as those bytes when one goes on. */
static int prep_survey(const char *const *inputs, int n_in, struct prep_input *in, size_t sure,
		       size_t *bytes)
{
	*bytes = 0;
	for (int f = 0; f < n_in; f++)
		in[f].src.fd = -1;
	for (int f = 0; f < n_in; f++) {
		/* st_ino 0 when not a regular file: a FIFO or /dev/stdin is read once anyway */
		struct stat *st = &in[f].st;
		const int found = stat(inputs[f], st) == 0;
		if (!found || !S_ISREG(st->st_mode))
			st->st_ino = 0;
		const int sized = found && S_ISREG(st->st_mode) && st->st_size > 0;
		char head[8];
		size_t n_head = 0;
		if (sized) {
			ST_TRY(peek_head(inputs[f], head, &n_head));
			in[f].len = (size_t)st->st_size;
		} else {
			ST_TRY(prep_source_open(&in[f].src, inputs[f], sure));
			in[f].len = in[f].src.len;
		}
		for (int g = 0; g < f && st->st_ino; g++)
			ST_CHECK(in[g].st.st_dev != st->st_dev || in[g].st.st_ino != st->st_ino,
				 "give each file once: text in both splits makes the validation loss read low",
				 "--input %s is the same file as --input %s", prep_shown(inputs[f]),
				 prep_shown(inputs[g]));
		ST_CHECK(!shard_has_magic(sized ? head : in[f].src.text, sized ? n_head : in[f].len),
			 "give the text the shards were made from, or train on this directory's shards",
			 "--input %s is a strata token shard, not text", prep_shown(inputs[f]));
		if (!in[f].len && (sized || in[f].src.eof))
			st_log_warn("--input %s is empty: nothing from it", prep_shown(inputs[f]));
		*bytes += in[f].len;
	}
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
	int force, text_bos;
	ST_TRY(cli_get_bool(&a, "force", &force));
	ST_TRY(cli_get_bool(&a, "bos", &text_bos));
	const char *inputs[CLI_MAX_ARGS];
	int n_in = 0, stdin_given = 0;
	cli_get(&a, "input", NULL); /* looked for: a slip of it is named */
	for (int i = 0; i < a.n; i++)
		if (!strcmp(a.key[i], "input")) {
			ST_CHECK_USAGE(a.val[i] != cli_bare, "give the file after it", "--input needs a value");
			/* it was "cannot open : No such file or directory" */
			ST_CHECK_USAGE(*a.val[i], "give a file, or - for standard input",
				 "strata prepare: an empty path was given for --input");
			/* - is standard input, as sample's --prompt-file - (plain text) */
			const int is_stdin = !strcmp(a.val[i], "-");
			ST_CHECK_USAGE(!(is_stdin && stdin_given++), "give - once",
				 "--input - is given twice: standard input is read once");
			/* held by /dev/null (main.c): it read as an empty input */
			ST_CHECK(!is_stdin || !cli_stdin_closed, "give the text on standard input, or a file",
				 "--input -: standard input is closed");
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
	ST_CHECK_USAGE(out, "pass --out DIR", "strata prepare: no output directory (--out)");
	ST_CHECK_USAGE(*out, "pass --out DIR", "strata prepare: an empty path was given for --out");
	ST_CHECK_USAGE(*tok_name, "give byte, a tokenizer.json, or a model, checkpoint or run",
		 "strata prepare: an empty value was given for --tokenizer");
	ST_CHECK_USAGE(n_in > 0, "pass --input FILE", "strata prepare: no input text (--input)");
	char path[4096];
	snprintf(path, sizeof path, "%s/train.bin", out);
	ST_CHECK(force || !fs_exists(path), "pass --force to replace them, or choose another --out",
		 "%s already holds token shards (train.bin)", out);
	/* a checkpoint's shards would go with it when --keep-ckpts removes it,
	 * and a run directory's would sit among its checkpoints */
	const char *marker = fs_exists(out) ? fs_run_marker(out) : NULL;
	ST_CHECK(!marker, "give the shards a directory of their own",
		 "%s is a training run or checkpoint (it holds %s): token shards are not written "
		 "into one",
		 out, marker);
	/* every k-th chunk or example is held out, k = round(1 / fraction) >= 2 */
	ST_CHECK_USAGE(val_frac >= 0 && val_frac <= 0.5, "use a fraction like 0.05",
		 "--val-fraction must be in [0, 0.5] (got %g)", val_frac);
	/* one chunk in 1/val_frac held out: a count that must fit a long */
	ST_CHECK_USAGE(val_frac == 0 || val_frac >= 1e-9, "use 0 to hold out nothing",
		 "--val-fraction %g holds out less than one chunk in 10^9", val_frac);
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
	if (text_bos && tk.bos_id < 0) {
		ST_USAGE_ERROR("leave out --bos", "--bos: the tokenizer %s has no <bos>", tok_name);
		tokenizer_free(&tk);
		prepare_unmake(out, made, n_made, held);
		return ST_FAIL;
	}

	/* every input surveyed first: small corpora get smaller chunks, so
	 * that the validation split still has about 20 chunks to draw from */
	struct prep_input *in = st_calloc((size_t)n_in, sizeof *in);
	size_t total_bytes = 0, expect_bytes = 0;
	long period = val_frac > 0 ? (long)lround(1.0 / val_frac) : 0;
	/* chunk 20 period, saturated: past it, the chunk rule below cannot apply */
	const double sure_d = period > 1 ? (double)chunk * 20.0 * (double)period : 0.0;
	const size_t sure = sure_d < 1e18 ? (size_t)sure_d : (size_t)1e18;
	int rc = in ? prep_survey(inputs, n_in, in, sure, &expect_bytes) : ST_FAIL;
	if (period > 1 && (long)(expect_bytes / (size_t)chunk) < 20 * period) {
		const long given = chunk;
		chunk = (long)(expect_bytes / (size_t)(20 * period));
		/* at least 256, but never above the chunk given: a --chunk 100
		 * became 256, and the "too short" hint to lower it could not help */
		if (chunk < 256)
			chunk = given < 256 ? given : 256;
		if (chunk < given && cli_get(&a, "chunk", NULL))
			st_log_info("--chunk %ld: %ld, so that the %zu bytes of text give the "
				    "held-out share about 20 chunks to draw from",
				    given, chunk, expect_bytes);
	}
	struct prep_split sp = {.chunk = chunk, .period = period, .text_bos = text_bos};

	/* loss masks only where there are examples: with plain text alone
	 * every token is a target, and a mask would cost 2 bytes a token */
	int masked = 0, n_text = 0;
	for (int f = 0; f < n_in; f++) {
		masked |= prep_ends_with(inputs[f], ".jsonl");
		n_text += !prep_ends_with(inputs[f], ".jsonl");
	}
	/* The new set is written into a staging directory inside out as the
	 * inputs are encoded, then renamed into place, so a write that fails
	 * (a full disk) leaves the old set as it was. At the swap train.bin goes
	 * last and the old one first: until the whole set is in, out holds no
	 * train.bin, so a kill part-way cannot leave new training tokens beside
	 * an old val.bin or loss mask, which train and eval would read as a set. */
	char stage[4200], from[4400];
	snprintf(stage, sizeof stage, "%s/.strata-prep.%d", out, (int)getpid());
	if (rc == ST_OK)
		clear_stale_stages(out);
	if (rc == ST_OK)
		rc = fs_mkdir_p(stage);
	struct prep_sink sink = {.masked = masked}; /* writers zeroed: abort does nothing */
	/* the writer of each of shard_names */
	struct shard_writer *const wr[4] = {&sink.tok[1], &sink.mask[0], &sink.mask[1], &sink.tok[0]};
	for (int k = 0; k < 4 && rc == ST_OK; k++) {
		const int mask = k == 1 || k == 2; /* a mask shard: values 0 and 1 */
		snprintf(from, sizeof from, "%s/%s", stage, shard_names[k]);
		if (!mask || masked)
			rc = shard_writer_open(wr[k], from, mask ? 2 : (uint32_t)tk.vocab_size,
					       mask ? "mask" : tk.name);
	}
	/* Each file is read a part at a time (prepare_text.c): no more than a
	 * part's text and ids are held, however large the file. One token's
	 * text, whole: a line break past a fixed buffer's end would not count
	 * as one. */
	const size_t piece_cap = tokenizer_max_token_len(&tk);
	char *piece = rc == ST_OK ? st_malloc(piece_cap) : NULL;
	if (!piece)
		rc = ST_FAIL;
	for (int f = 0; f < n_in && rc == ST_OK; f++) {
		size_t read = 0;
		if (prep_ends_with(inputs[f], ".jsonl"))
			rc = prep_jsonl(&tk, inputs[f], &in[f].src, &sp, &sink, &read);
		else
			rc = prep_text(&tk, inputs[f], &in[f].src, piece, piece_cap, &sp, &sink,
				       &read);
		total_bytes += read;
	}
	free(piece);
	for (int f = 0; in && f < n_in; f++)
		prep_source_close(&in[f].src); /* inputs begun and not reached */
	free(in);
	const long example = sp.example, chunk_idx = sp.chunk_idx, text_val = sp.text_val;
	const size_t n_train = sink.tok[0].n, n_val = sink.tok[1].n;
	if (rc == ST_OK && total_bytes == 0) {
		ST_ERROR("give a non-empty text file", "strata prepare: the input text is empty");
		rc = ST_FAIL;
	} else if (rc == ST_OK && n_train == 0 && n_val == 0) { /* JSONL of blank lines */
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
	if (rc == ST_OK && val_frac > 0 && n_val > 0 && masked && chunk_idx > 0 && !text_val)
		/* beside examples, which fill val.bin on their own */
		st_log_warn("the text inputs (%ld chunk%s) gave no chunk to validation (one in %ld is "
			    "held out): the held-out loss scores the examples alone; a smaller --chunk "
			    "splits the text finer",
			    chunk_idx, chunk_idx == 1 ? "" : "s", period);
	if (rc == ST_OK && val_frac > 0 && n_val == 0 && masked) {
		ST_ERROR("give more examples, a larger --val-fraction, or --val-fraction 0",
			 "strata prepare: %ld example%s too few to hold out %g%% for validation "
			 "(one example in %ld is held out)",
			 example, example == 1 ? " is" : "s are", 100 * val_frac, period);
		rc = ST_FAIL;
	} else if (rc == ST_OK && val_frac > 0 && n_val == 0) {
		/* a chunk takes about 2 bytes at the least (--chunk 1 cuts after
		 * twice it where no line ends; prepare_text.c): a text under two
		 * per held-out period gives no chunk to hold out at any --chunk */
		const int finer = chunk > 1 && total_bytes >= 2 * (size_t)period;
		ST_ERROR(finer ? "give more text, a smaller --chunk, or --val-fraction 0"
			       : "give more text, or --val-fraction 0",
			 "strata prepare: the input (%zu bytes) is too short to hold out %g%% for validation",
			 total_bytes, 100 * val_frac);
		rc = ST_FAIL;
	}
	/* the set in the stage: a split or a mask with no tokens is not written */
	const int has[4] = {n_val > 0, masked && n_train > 0, masked && n_val > 0, 1};
	for (int k = 0; k < 4; k++) {
		if (rc == ST_OK && has[k])
			rc = shard_writer_finish(wr[k]);
		else
			shard_writer_abort(wr[k]); /* its temp file gone; nothing if not open */
	}
	const char *const *names = shard_names;
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
	if (rc == ST_OK && masked)
		printf("%ld example%s; %zu of %zu training tokens are loss targets\n", example,
		       example == 1 ? "" : "s", sink.targets, n_train);
	if (rc == ST_OK)
		printf("wrote %s: %zu train tokens, %zu val tokens (tokenizer %s, vocab %d) from %zu bytes\n",
		       out, n_train, n_val, tk.name, tk.vocab_size, total_bytes);
	if (rc == ST_OK && n_val)
		printf("held out %.1f%% of the tokens: one %s in %ld\n",
		       100.0 * (double)n_val / (double)(n_train + n_val), masked ? "example or chunk" : "chunk",
		       period);
	tokenizer_free(&tk);
	return rc;
}
