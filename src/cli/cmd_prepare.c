/* strata prepare: text files -> token shards with a train/validation split.
 *
 * The text is cut into chunks of about --chunk bytes at line ends; every
 * k-th chunk (k = 1/val_fraction) goes to val.bin, the rest to train.bin, so
 * the held-out text is spread over the whole corpus instead of being its
 * last pages. Files are separated by the tokenizer's end-of-text token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "io/fsutil.h"
#include "io/shard.h"
#include "io/tokenizer.h"
#include "util/check.h"

static void help(void)
{
	printf("usage: strata prepare --input FILE [--input FILE ...] --out DIR [options]\n\n"
	       "  --input FILE        UTF-8 text (repeat for several files)\n"
	       "  --out DIR           writes DIR/train.bin and DIR/val.bin\n"
	       "  --val-fraction X    share of chunks held out for validation [0.05]\n"
	       "  --chunk N           split granularity in bytes [16384]\n"
	       "  --tokenizer T       byte, a Hugging Face tokenizer.json, or a model directory with one [byte]\n");
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

int cmd_prepare(int argc, char **argv)
{
	struct cli_args a;
	ST_TRY(cli_parse(&a, argc, argv));
	if (cli_has(&a, "help")) {
		help();
		return ST_OK;
	}
	const char *out = cli_get(&a, "out", NULL);
	const char *tok_name = cli_get(&a, "tokenizer", "byte");
	double val_frac;
	long chunk;
	ST_TRY(cli_get_double(&a, "val-fraction", 0.05, &val_frac));
	ST_TRY(cli_get_long(&a, "chunk", 16384, &chunk));
	const char *inputs[CLI_MAX_ARGS];
	int n_in = 0;
	for (int i = 0; i < a.n; i++)
		if (!strcmp(a.key[i], "input")) {
			inputs[n_in++] = a.val[i];
			a.used[i] = 1;
		}
	ST_TRY(cli_check_unused(&a, "prepare"));
	ST_CHECK(out, "pass --out DIR", "strata prepare: no output directory (--out)");
	ST_CHECK(n_in > 0, "pass --input FILE", "strata prepare: no input text (--input)");
	ST_CHECK(val_frac >= 0 && val_frac < 1, "use a fraction like 0.05",
		 "--val-fraction must be in [0,1)");
	ST_CHECK(chunk > 0, "use a positive --chunk", "--chunk must be positive");
	struct st_tokenizer tk;
	ST_TRY(tokenizer_load(&tk, tok_name));

	/* read every input first: small corpora get smaller chunks, so that the
	 * validation split still has about 20 chunks to draw from */
	char **texts = st_calloc((size_t)n_in, sizeof *texts);
	size_t *lens = st_calloc((size_t)n_in, sizeof *lens);
	size_t total_bytes = 0;
	int rc = texts && lens ? ST_OK : ST_FAIL;
	for (int f = 0; f < n_in && rc == ST_OK; f++) {
		rc = fs_read_file(inputs[f], &texts[f], &lens[f]);
		total_bytes += lens[f];
	}
	long period = val_frac > 0 ? (long)lround(1.0 / val_frac) : 0;
	if (period > 1 && (long)(total_bytes / (size_t)chunk) < 20 * period) {
		chunk = (long)(total_bytes / (size_t)(20 * period));
		if (chunk < 256)
			chunk = 256;
	}

	struct buf train = {0}, val = {0};
	long chunk_idx = 0;
	uint32_t *ids = rc == ST_OK ? st_malloc(tokenizer_max_ids((size_t)chunk + 65536 + 4) * sizeof *ids)
				    : NULL;
	if (!ids)
		rc = ST_FAIL;
	for (int f = 0; f < n_in && rc == ST_OK; f++) {
		const char *text = texts[f];
		size_t len = lens[f], pos = 0;
		while (pos < len && rc == ST_OK) {
			size_t end = pos + (size_t)chunk < len ? pos + (size_t)chunk : len;
			/* extend to the end of the line (bounded, for files without newlines) */
			while (end < len && text[end - 1] != '\n' && end - pos < (size_t)chunk + 65536)
				end++;
			size_t n = tokenizer_encode(&tk, ids, text + pos, end - pos);
			struct buf *dst = period > 1 && chunk_idx % period == period - 1 ? &val : &train;
			rc = push(dst, ids, n);
			chunk_idx++;
			pos = end;
		}
		uint32_t eos = (uint32_t)tk.eos_id;
		if (rc == ST_OK && len > 0 && tk.eos_id >= 0)
			rc = push(&train, &eos, 1);
	}
	free(ids);
	for (int f = 0; texts && f < n_in; f++)
		free(texts[f]);
	free(texts);
	free(lens);
	if (rc == ST_OK && total_bytes == 0) {
		ST_ERROR("give a non-empty text file", "strata prepare: the input text is empty");
		rc = ST_FAIL;
	}
	if (rc == ST_OK && val_frac > 0 && val.n == 0) {
		ST_ERROR("give more text, a smaller --chunk, or --val-fraction 0",
			 "strata prepare: the input (%zu bytes) is too short to hold out %.0f%% for validation",
			 total_bytes, 100 * val_frac);
		rc = ST_FAIL;
	}
	char path[4096];
	if (rc == ST_OK)
		rc = fs_mkdir_p(out);
	if (rc == ST_OK) {
		snprintf(path, sizeof path, "%s/train.bin", out);
		rc = shard_write(path, train.v, train.n, (uint32_t)tk.vocab_size, tk.name);
	}
	if (rc == ST_OK && val.n) {
		snprintf(path, sizeof path, "%s/val.bin", out);
		rc = shard_write(path, val.v, val.n, (uint32_t)tk.vocab_size, tk.name);
	}
	if (rc == ST_OK)
		printf("wrote %s: %zu train tokens, %zu val tokens (tokenizer %s, vocab %d) from %zu bytes\n",
		       out, train.n, val.n, tk.name, tk.vocab_size, total_bytes);
	free(train.v);
	free(val.v);
	tokenizer_free(&tk);
	return rc;
}
