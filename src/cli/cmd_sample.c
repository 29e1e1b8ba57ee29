/* strata sample: generate text from a model. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/generate.h"
#include "io/fsutil.h"
#include "io/tokenizer.h"
#include "trainer/forward.h"
#include "trainer/trainer.h"
#include "util/check.h"
#include "util/trace.h"
#include "util/utf8.h"


static void help(void)
{
	printf("usage: strata sample --model DIR [options]\n\n"
	       "  --model DIR        model directory, checkpoint, or run directory (its latest)\n"
	       "  --prompt TEXT      text to continue; \"\" starts from the tokenizer's <bos>\n"
	       "                     where it has one [\"\\n\"]\n"
	       "  --prompt-file F    the prompt from a file, as it is (- for standard input)\n"
	       "  --bos              put the tokenizer's <bos> before the prompt, as JSONL\n"
	       "                     fine-tuning data has it (<bos> prompt completion <eos>) [false]\n"
	       "  --tokens N         tokens to generate [200]\n"
	       "  --temperature X    0 is greedy [0.8]\n"
	       "  --top-p X          nucleus sampling mass [0.95]\n"
	       "  --top-k N          only the N most likely tokens (0: no limit); --top-p\n"
	       "                     then cuts within them, as transformers does [0]\n"
	       "  --seed N           sampling seed [1]\n"
	       "  --context N        the most tokens the model sees, its key/value cache\n"
	       "                     [the model's max_position_embeddings]\n"
	       "  --threads N        CPU threads (0: all cores) [0]\n"
	       "  --device S         cpu | cuda | auto [auto]\n"
	       "  --matmul-precision S  taken as train and eval take it, but sample multiplies\n"
	       "                     in fp32 either way (see README) [fp32]\n"
	       CLI_FORWARD_MEM_HELP
	       "  --tokenizer T      byte, a tokenizer.json, or a model, checkpoint or run\n"
	       "                     directory [the model's, else byte]\n"
	       "\nGeneration stops at the <eos>, which is not printed: the --model directory's\n"
	       "config.json eos_token_id where it names one of the tokenizer's added tokens\n"
	       "(whatever --tokenizer is; any of them, where it lists several), else the\n"
	       "tokenizer's own. It also stops when the output cannot be written (a closed\n"
	       "pipe, a full disk), an error. A pipe or a file gets the prompt and the text\n"
	       "exactly; at a terminal a newline ends them.\n"
	       "\nEach layer keeps the keys and values of the text so far (a key/value cache\n"
	       "of --context tokens), so a new token costs one token's pass. When the text\n"
	       "outgrows the cache, the cache is refilled with the last half of it and\n"
	       "generation goes on, every token from then on seeing at least half of\n"
	       "--context. With the weights streamed from the host or disk, every token\n"
	       "reads them all once (and the prompt and each refill, once each).\n");
}

struct out_ctx {
	const struct st_tokenizer *tk;
	char *buf; /* 3 + tokenizer_max_token_len bytes: a long token is printed whole */
	size_t cap;
	long emitted;
	size_t n_held; /* bytes of a character the tokens so far have begun, not ended */
};

/* One token's text, at once (a reader sees the text as it comes), but for
 * a character it begins and a later token ends, held until then (a stop
 * or --tokens inside one printed its first bytes alone: invalid UTF-8
 * where the tokenizers library decodes U+FFFD); nonzero, which stops
 * generate(), once standard output takes no more: a closed pipe or a full
 * disk, reported at exit (main.c) */
static int emit(int32_t tok, void *arg)
{
	struct out_ctx *o = arg;
	o->emitted++;
	const size_t n = o->n_held + tokenizer_decode_one(o->tk, o->buf + o->n_held, o->cap - 3,
							   (uint32_t)tok);
	const size_t tail = st_utf8_incomplete_tail((const unsigned char *)o->buf, n);
	if (fwrite(o->buf, 1, n - tail, stdout) == n - tail && fflush(stdout) == 0) {
		memmove(o->buf, o->buf + n - tail, tail);
		o->n_held = tail;
		return 0;
	}
	cli_stdout_errno = errno;
	o->n_held = 0; /* nothing more goes out (emit_end) */
	return 1;
}

/* The end of the text: a character begun and never ended is printed as
 * U+FFFD, as the tokenizers library decodes it. */
static int emit_end(struct out_ctx *o)
{
	if (!o->n_held)
		return ST_OK;
	o->n_held = 0;
	if (fwrite("\xef\xbf\xbd", 1, 3, stdout) == 3 && fflush(stdout) == 0)
		return ST_OK;
	cli_stdout_errno = errno;
	return ST_FAIL;
}

int cmd_sample(int argc, char **argv)
{
	struct cli_args a;
	ST_TRY(cli_parse(&a, argc, argv));
	if (cli_has(&a, "help")) {
		help();
		return ST_OK;
	}
	const char *model, *prompt, *device, *tok_name, *prompt_file, *precision;
	ST_TRY(cli_get_str(&a, "model", NULL, &model));
	ST_TRY(cli_get_str(&a, "prompt", "\n", &prompt));
	ST_TRY(cli_get_str(&a, "prompt-file", NULL, &prompt_file));
	ST_TRY(cli_get_str(&a, "device", "auto", &device));
	ST_TRY(cli_get_str(&a, "tokenizer", NULL, &tok_name));
	ST_TRY(cli_get_str(&a, "matmul-precision", "fp32", &precision));
	int bos;
	ST_TRY(cli_get_bool(&a, "bos", &bos));
	long n_tok, seed, ctx_len, threads, top_k;
	double temp, top_p;
	ST_TRY(cli_get_long(&a, "tokens", 200, 0, 1 << 30, &n_tok));
	ST_TRY(cli_get_long(&a, "seed", 1, LONG_MIN, LONG_MAX, &seed));
	/* 0: the model's max_position_embeddings (read below) */
	ST_TRY(cli_get_long(&a, "context", 0, 2, 1 << 24, &ctx_len));
	ST_TRY(cli_get_long(&a, "threads", 0, 0, ST_MAX_THREADS, &threads));
	ST_TRY(cli_get_double(&a, "temperature", 0.8, &temp));
	ST_TRY(cli_get_double(&a, "top-p", 0.95, &top_p));
	ST_TRY(cli_get_long(&a, "top-k", 0, 0, INT_MAX, &top_k));
	struct st_forward_mem mem;
	ST_TRY(cli_get_forward_mem(&a, &mem));
	ST_TRY(cli_check_unused(&a, "strata sample"));
	ST_CHECK_USAGE(!prompt_file || !cli_get(&a, "prompt", NULL), "give one of them",
		 "strata sample: both --prompt and --prompt-file");
	ST_CHECK_USAGE(model, "pass --model DIR", "strata sample: no model (--model)");
	/* usage errors before any work, as eval says them (an empty --model
	 * exited 1, an empty --tokenizer and --prompt-file were named as "no
	 * tokenizer at " and "cannot open : ...") */
	ST_CHECK_USAGE(*model, "pass --model DIR", "strata sample: an empty path was given for --model");
	ST_CHECK_USAGE(!tok_name || *tok_name, "give byte, a tokenizer.json, or a model, checkpoint or run",
		 "strata sample: an empty value was given for --tokenizer");
	ST_CHECK_USAGE(!prompt_file || *prompt_file, "give a file, or - for standard input",
		 "strata sample: an empty path was given for --prompt-file");
	ST_TRY(session_check_device(device));
	/* taken, so that one set of flags serves train, eval and sample */
	ST_TRY(session_check_matmul_precision(precision, "--matmul-precision"));
	if (!strcmp(precision, "bf16"))
		st_log_info("--matmul-precision bf16: sample multiplies in fp32 (its one-row passes "
			    "would round a whole weight matrix for every token, costing more than "
			    "the product saves)");
	ST_CHECK_USAGE(temp >= 0, "give 0 (greedy) or more", "--temperature must be >= 0 (got %g)", temp);
	ST_CHECK_USAGE(top_p > 0 && top_p <= 1, "give a share such as 0.95 (1: no cut)",
		 "--top-p must be in (0, 1] (got %g)", top_p);
	char dir[4096];
	ST_TRY(resolve_model_pinned(dir, sizeof dir, model));
	const struct st_ops *ops;
	ST_TRY(session_backend(&ops, device, (int)threads));
	/* the file's text as it is, its last newline included: a prompt ends
	 * where the model is to go on. Read once the model is found: a prompt
	 * typed at a terminal went in before a wrong --model was said. */
	char *file_text = NULL;
	if (prompt_file) {
		size_t len;
		/* named as such ("cannot open /dev/stdin" named a file nobody gave) */
		ST_CHECK(strcmp(prompt_file, "-") || !cli_stdin_closed,
			 "give the prompt on standard input, or a file",
			 "--prompt-file -: standard input is closed");
		/* at most 1 GiB, as a JSON file: /dev/zero (a slip for the prompt
		 * file) was read until memory ran out */
		ST_TRY(fs_read_file_max(strcmp(prompt_file, "-") ? prompt_file : "/dev/stdin",
					(size_t)1 << 30, &file_text, &len));
		if (memchr(file_text, 0, len)) {
			ST_ERROR("give a text file", "--prompt-file %s holds a NUL byte, which a prompt "
				 "cannot hold", prompt_file);
			free(file_text);
			return ST_FAIL;
		}
		prompt = file_text;
	}

	/* the model first; its weights are placed and loaded for the window
	 * the prompt needs, once the prompt is read (forward_place) */
	struct st_session s;
	if (forward_build(&s, ops, dir) != ST_OK) {
		free(file_text);
		session_close(&s);
		return ST_FAIL;
	}
	const struct st_config cfg = s.model.cfg;
	/* the model directory's own tokenizer.json when it has one */
	char tk_path[4200];
	snprintf(tk_path, sizeof tk_path, "%s/tokenizer.json", dir);
	/* --tokenizer RUN (a run or a checkpoint, as --model takes them): the
	 * tokenizer its checkpoint carries */
	char tk_dir[4096];
	if (tok_name && strcmp(tok_name, "byte") != 0 && fs_is_dir(tok_name)) {
		char probe[4200];
		snprintf(probe, sizeof probe, "%s/tokenizer.json", tok_name);
		const int old = st_log_mute(1);
		if (!fs_exists(probe) && resolve_model_dir(tk_dir, sizeof tk_dir, tok_name) == ST_OK)
			tok_name = tk_dir;
		st_log_mute(old);
	}
	const int fallback = !tok_name && !fs_exists(tk_path);
	if (!tok_name) /* the directory, not its tokenizer.json: config.json names the
			* model's <bos> and <eos> (tokenizer_load) */
		tok_name = fallback ? "byte" : dir;
	struct st_tokenizer tk;
	/* the model's <bos> and <eos> (its config.json), whichever tokenizer
	 * reads its text: an instruct model ends its turns at its own token
	 * (tokenizer_load read them already when given the model directory) */
	char real_tk[PATH_MAX], real_dir[PATH_MAX];
	int same_dir = tok_name == dir || (realpath(tok_name, real_tk) && realpath(dir, real_dir) &&
					   !strcmp(real_tk, real_dir));
	/* the model directory's own tokenizer.json named as a file: its
	 * config.json is read by tokenizer_load already (its warnings said
	 * twice otherwise) */
	if (!same_dir && realpath(tok_name, real_tk) && realpath(tk_path, real_dir))
		same_dir = !strcmp(real_tk, real_dir);
	if (tokenizer_load(&tk, tok_name) != ST_OK ||
	    (!same_dir && tokenizer_model_ids(&tk, dir) != ST_OK)) {
		tokenizer_free(&tk);
		session_close(&s);
		free(file_text);
		return ST_FAIL;
	}
	int rc = ST_OK;
	if (cfg.vocab_size < tk.vocab_size) {
		ST_ERROR("sample with the tokenizer the model was trained with (--tokenizer)",
			 "the model's vocabulary (%d) is smaller than the tokenizer's (%d)",
			 cfg.vocab_size, tk.vocab_size);
		rc = ST_FAIL;
	}
	if (rc == ST_OK && fallback && cfg.vocab_size > tk.vocab_size)
		st_log_warn("%s has no tokenizer.json: sampling with the byte tokenizer, whose %d ids "
			    "are not this model's %d (the prompt's ids may mean other tokens to it, and "
			    "ids past %d print nothing); give --tokenizer",
			    dir, tk.vocab_size, cfg.vocab_size, tk.vocab_size - 1);
	/* a --tokenizer other than the model's own: its ids stand for other
	 * text to the model (eval refuses byte data for such a model and warns
	 * of another BPE; here the user chose it, so it is said, not refused) */
	char own[25];
	if (rc == ST_OK && !same_dir && fs_exists(tk_path) &&
	    tokenizer_file_name(tk_path, own) == ST_OK && strcmp(own, tk.name) != 0) {
		if (tk.bpe)
			st_log_warn("--tokenizer %s ('%s') is not the model's own tokenizer.json "
				    "('%s'): unless the two are one tokenizer saved twice, the prompt's "
				    "ids mean other tokens to the model; leave out --tokenizer to use its "
				    "own",
				    tok_name, tk.name, own);
		else
			st_log_warn("--tokenizer byte: the model's ids are the tokens of its "
				    "tokenizer.json ('%s'), not bytes, so the prompt's ids mean other "
				    "tokens to it; leave out --tokenizer to use its own",
				    own);
	}
	if (rc == ST_OK && bos && tk.bos_id < 0) {
		ST_USAGE_ERROR("leave out --bos", "--bos: the tokenizer %s has no <bos>", tok_name);
		rc = ST_FAIL;
	}
	if (rc == ST_OK && !*prompt && tk.bos_id < 0) {
		if (prompt_file)
			ST_ERROR("give a prompt in the file",
				 "--prompt-file %s is empty: an empty prompt starts from <bos>, and the "
				 "tokenizer %s has none",
				 prompt_file, tok_name);
		else
			ST_USAGE_ERROR("give a prompt",
				       "an empty --prompt starts from <bos>, and the tokenizer %s has none",
				       tok_name);
		rc = ST_FAIL;
	}
	if (!cli_get(&a, "context", NULL))
		ctx_len = cfg.max_seq; /* the cache holds what the text needs, up to it */
	if (ctx_len > cfg.max_seq) {
		if (cli_get(&a, "context", NULL))
			st_log_warn("--context %ld exceeds the model's max_position_embeddings %d: "
				    "using %d",
				    ctx_len, cfg.max_seq, cfg.max_seq);
		ctx_len = cfg.max_seq;
	}
	size_t plen = strlen(prompt);
	uint32_t *ids = st_malloc(tokenizer_max_ids(plen) * sizeof *ids);
	int32_t *ctx = st_malloc((tokenizer_max_ids(plen) + 1) * sizeof *ctx);
	size_t n = rc == ST_OK && ids && ctx ? tokenizer_encode(&tk, ids, prompt, plen) : 0;
	if (n == ST_ENCODE_FAILED) {
		rc = ST_FAIL;
	} else if (rc == ST_OK && ids && ctx) {
		size_t c = 0;
		/* --bos, or an empty prompt: from the start of a text */
		if ((bos || n == 0) && tk.bos_id >= 0)
			ctx[c++] = tk.bos_id;
		for (size_t i = 0; i < n; i++)
			ctx[c++] = (int32_t)ids[i];
		n = c;
		if (n > (size_t)ctx_len)
			st_log_info("the prompt's %zu tokens are more than --context %ld: the model sees "
				    "its last %ld",
				    n, ctx_len, ctx_len);
		else if (n + (size_t)n_tok > (size_t)ctx_len)
			st_log_info("the text may outgrow --context %ld (%zu + %ld tokens): each time it "
				    "fills, generation goes on from its last %ld token%s",
				    ctx_len, n, n_tok, ctx_len - ctx_len / 2,
				    ctx_len - ctx_len / 2 == 1 ? "" : "s");
		/* no longer a window than the text will be: padding past it costs
		 * as much as text */
		const size_t need = n + (size_t)n_tok;
		const int t = need < (size_t)ctx_len ? (int)(need < 2 ? 2 : need) : (int)ctx_len;
		/* test and benchmark hook: the windowed recompute the decoder replaced */
		const char *win = getenv("STRATA_SAMPLE_WINDOW");
		rc = win && *win && strcmp(win, "0") ? forward_place(&s, dir, &mem, 1, t)
						     : forward_place_decoder(&s, dir, &mem, t);
		ckpt_unpin(); /* its weights are loaded: the run may remove it */
	}
	struct out_ctx oc = {&tk, NULL, 3 + tokenizer_max_token_len(&tk), 0, 0};
	if (rc == ST_OK && !(oc.buf = st_malloc(oc.cap)))
		rc = ST_FAIL;
	if (rc == ST_OK && ids && ctx) {
		fwrite(prompt, 1, plen, stdout);
		/* <eos>, and every other end token the model lists */
		int ends[ST_MAX_END_IDS + 1], n_ends = 0;
		if (tk.eos_id >= 0)
			ends[n_ends++] = tk.eos_id;
		for (int e = 0; e < tk.n_end; e++)
			if (tk.end_ids[e] != tk.eos_id)
				ends[n_ends++] = tk.end_ids[e];
		struct st_gen_opts g = {.max_new = (int)n_tok, .temperature = temp, .top_p = top_p,
					.top_k = (int)top_k,
					.seed = (uint64_t)seed, .stop_at_eos = n_ends > 0,
					.eos_ids = ends, .n_eos = n_ends};
		const double t0 = trace_now();
		rc = generate(&s, ctx, (int)n, &g, emit, &oc);
		if (rc == ST_OK)
			rc = emit_end(&oc);
		const double secs = trace_now() - t0;
		/* at a terminal the text ends its line; a pipe or a file gets the
		 * prompt and the text exactly (a newline the model wrote is its
		 * own, not one added) */
		if (rc == ST_OK && isatty(STDOUT_FILENO))
			printf("\n");
		/* the rate, for a reader at a terminal (a pipe or a file gets the
		 * text alone) */
		if (rc == ST_OK && isatty(STDERR_FILENO) && oc.emitted > 0)
			st_log_info("%ld token%s in %.2f s, %.1f tokens/s (reading the %zu-token prompt "
				    "included)",
				    oc.emitted, oc.emitted == 1 ? "" : "s", secs, oc.emitted / secs, n);
	} else if (rc == ST_OK) {
		rc = ST_FAIL;
	}
	free(ids);
	free(ctx);
	free(oc.buf);
	free(file_text);
	tokenizer_free(&tk);
	session_close(&s);
	return rc;
}
