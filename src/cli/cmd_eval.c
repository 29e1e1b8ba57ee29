/* strata eval: mean loss and perplexity of a model on a token shard. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/place.h"
#include "engine/session.h"
#include "io/fsutil.h"
#include "trainer/forward.h"
#include "trainer/trainer.h"
#include "util/check.h"
#include "util/finite.h"

static void help(void)
{
	printf("usage: strata eval --model DIR --data DIR|SHARD [options]\n\n"
	       "  --model DIR        model directory, checkpoint, or run directory (its latest)\n"
	       "  --data PATH        prepared directory (uses val.bin) or a shard file\n"
	       "  --seq-len N        tokens per window [256]\n"
	       "  --micro-batch N    windows per forward pass [8]\n"
	       "  --max-tokens N     evaluate N tokens, rounded up to whole --seq-len windows\n"
	       "                     (0: all) [0]; train's held-out loss scores its --eval-tokens\n"
	       "                     (131072 by default) at its --seq-len: give the same to compare\n"
	       "  --threads N        CPU threads (0: all cores) [0]\n"
	       "  --device S         cpu | cuda | auto [auto]\n"
	       "  --matmul-precision S  the linear layers' matmuls: fp32, or bf16 (inputs\n"
	       "                     rounded to bf16, sums in fp32; for CPUs with AMX) [fp32]\n"
	       CLI_FORWARD_MEM_HELP
	       "  --json             print the result as JSON [false]\n");
}

int cli_get_forward_mem(struct cli_args *a, struct st_forward_mem *mem)
{
	forward_mem_defaults(mem);
	const char *v;
	ST_TRY(cli_get_str(a, "device-mem", "auto", &v));
	ST_CHECK_USAGE(strlen(v) < sizeof mem->device_mem, "give a size such as 2G", "--device-mem '%s' is too long", v);
	snprintf(mem->device_mem, sizeof mem->device_mem, "%s", v);
	ST_TRY(cli_get_str(a, "host-mem", "auto", &v));
	ST_CHECK_USAGE(strlen(v) < sizeof mem->host_mem, "give a size such as 4G", "--host-mem '%s' is too long", v);
	snprintf(mem->host_mem, sizeof mem->host_mem, "%s", v);
	/* sizes checked now, before a model is loaded or a prompt read */
	size_t bytes;
	ST_TRY(parse_bytes(mem->device_mem, &bytes, "--device-mem"));
	ST_TRY(parse_bytes(mem->host_mem, &bytes, "--host-mem"));
	cli_get(a, "offload-dir", NULL); /* looked for: a slip of it is named */
	for (int i = 0; i < a->n; i++) {
		if (!cli_key_is(a->key[i], "offload-dir"))
			continue;
		a->used[i] = 1;
		ST_CHECK_USAGE(a->val[i] != cli_bare, "give the directory after it", "--offload-dir needs a value");
		const size_t len = strlen(mem->offload_dir);
		ST_CHECK_USAGE(len + strlen(a->val[i]) + 2 < sizeof mem->offload_dir, "use shorter paths",
			 "--offload-dir: too many or too long directories");
		if (*a->val[i])
			snprintf(mem->offload_dir + len, sizeof mem->offload_dir - len, "%s%s",
				 len ? "," : "", a->val[i]);
	}
	return ST_OK;
}

int resolve_model_dir(char *out, size_t n, const char *path)
{
	char p[4200];
	snprintf(p, sizeof p, "%s/config.json", path);
	if (fs_exists(p)) {
		snprintf(out, n, "%s", path);
		return ST_OK;
	}
	ST_CHECK(!fs_exists(path) || fs_is_dir(path),
		 "give a model directory (strata init or import writes one), a run directory or "
		 "one of its step-NNNNNN checkpoints",
		 "%s is a file, not a model directory", path);
	/* a run killed before its first checkpoint is one: ckpt_resolve says so */
	ST_CHECK(!fs_exists(path) || fs_run_marker(path),
		 "give a model directory (strata init or import writes one), a run directory or "
		 "one of its step-NNNNNN checkpoints",
		 "%s holds no model: no config.json, and it is not a run or a checkpoint", path);
	return ckpt_resolve(out, n, path);
}

int resolve_model_pinned(char *out, size_t n, const char *path)
{
	ckpt_paths_flag("--model"); /* the checkpoints named instead are --model's */
	/* a run saving there may remove the checkpoint `latest` named between
	 * the resolve and the pin (--keep-ckpts): resolved again, to the newer
	 * one it has saved by then */
	for (int tries = 0;; tries++) {
		ST_TRY(resolve_model_dir(out, n, path));
		if (ckpt_pin(out)) {
			if (getenv("STRATA_FAULT_STOP_AFTER_PIN")) /* test hook: held, as in a load */
				raise(SIGSTOP);
			return ST_OK;
		}
		ST_CHECK(tries < 100 && strcmp(out, path) != 0,
			 "give the run directory, which names its newest checkpoint",
			 "%s was removed while being opened (by the --keep-ckpts of the run saving "
			 "there)",
			 out);
		usleep(10000);
	}
}

int cmd_eval(int argc, char **argv)
{
	struct cli_args a;
	ST_TRY(cli_parse(&a, argc, argv));
	if (cli_has(&a, "help")) {
		help();
		return ST_OK;
	}
	const char *model, *data, *device, *precision;
	ST_TRY(cli_get_str(&a, "model", NULL, &model));
	ST_TRY(cli_get_str(&a, "data", NULL, &data));
	ST_TRY(cli_get_str(&a, "device", "auto", &device));
	ST_TRY(cli_get_str(&a, "matmul-precision", "fp32", &precision));
	long t, b, max_tokens, threads;
	ST_TRY(cli_get_long(&a, "seq-len", 256, 2, 1 << 24, &t));
	ST_TRY(cli_get_long(&a, "micro-batch", 8, 1, 1 << 24, &b));
	ST_TRY(cli_get_long(&a, "max-tokens", 0, 0, LONG_MAX, &max_tokens));
	ST_TRY(cli_get_long(&a, "threads", 0, 0, ST_MAX_THREADS, &threads));
	int json;
	ST_TRY(cli_get_bool(&a, "json", &json));
	struct st_forward_mem mem;
	ST_TRY(cli_get_forward_mem(&a, &mem));
	ST_TRY(cli_check_unused(&a, "strata eval"));
	ST_CHECK_USAGE(model && data, "pass --model DIR and --data PATH", "strata eval: needs --model and --data");
	ST_CHECK_USAGE(*model && *data, "pass --model DIR and --data PATH",
		 "strata eval: an empty path was given for --%s", *model ? "data" : "model");
	ST_TRY(session_check_device(device));
	ST_TRY(session_check_matmul_precision(precision, "--matmul-precision"));

	char dir[4096];
	ST_TRY(resolve_model_pinned(dir, sizeof dir, model));
	const struct st_ops *ops;
	ST_TRY(session_backend(&ops, device, (int)threads));
	struct st_session s;
	if (forward_build(&s, ops, dir) != ST_OK ||
	    session_matmul_precision(&s, precision, "--matmul-precision") != ST_OK) {
		session_close(&s);
		return ST_FAIL;
	}
	if (s.model.matmul_bf16) /* the loss differs from fp32's in its last digits: said */
		st_log_info("matmul %s", session_matmul_name(&s));
	const struct st_config cfg = s.model.cfg;
	if (t > cfg.max_seq) {
		if (cli_get(&a, "seq-len", NULL))
			st_log_warn("--seq-len %ld exceeds the model's max_position_embeddings %d: "
				    "using %d",
				    t, cfg.max_seq, cfg.max_seq);
		else
			st_log_info("--seq-len %d: the model's max_position_embeddings (the default "
				    "%ld is longer)",
				    cfg.max_seq, t);
		t = cfg.max_seq;
	}
	struct st_data d = {0};
	const char *val = fs_is_dir(data) ? NULL : data;
	int rc = data_open(&d, fs_is_dir(data) ? data : NULL, val, cfg.vocab_size, 0);
	char train_bin[4200];
	snprintf(train_bin, sizeof train_bin, "%s/train.bin", data);
	if (rc == ST_OK && !d.has_val && !fs_exists(train_bin)) {
		/* an empty directory, or one a prepare was stopped in before its swap */
		ST_ERROR("prepare the text into it with strata prepare, or give a prepared "
			 "directory or shard file",
			 "%s holds no token shards (no val.bin, no train.bin)", data);
		rc = ST_FAIL;
	} else if (rc == ST_OK && !d.has_val) {
		ST_ERROR("prepare it with a --val-fraction above 0, or give a shard file (such as "
			 "its train.bin)",
			 "no val.bin in %s", data);
		rc = ST_FAIL;
	}
	/* a window past the shard scores nothing more: the shard's targets all
	 * fit one window of its length less one (the same loss, for less memory) */
	if (rc == ST_OK && d.val.n_tokens - 1 < (uint64_t)t) {
		const long fit = d.val.n_tokens - 1 < 2 ? 2 : (long)(d.val.n_tokens - 1);
		if (fit < t) {
			if (cli_get(&a, "seq-len", NULL))
				st_log_info("--seq-len %ld: %ld, the targets %s holds", t, fit,
					    d.val.path);
			t = fit;
		}
	}
	if (rc == ST_OK)
		rc = data_check_tokenizer(&d, dir, &cfg);
	double loss = 0;
	long n = 0;
	if (rc == ST_OK) {
		/* no more rows per batch than there are windows to score */
		const long windows = data_eval_windows(&d, (int)t, max_tokens);
		if (windows > 0 && b > windows)
			b = windows;
		/* after the clamps: a --micro-batch beyond the windows is lowered,
		 * as said, before it is weighed (it was refused first) */
		if (b * t > INT_MAX / 2) {
			ST_USAGE_ERROR("lower --micro-batch or --seq-len",
				 "--micro-batch %ld x --seq-len %ld tokens is more than one batch can hold", b, t);
			rc = ST_FAIL;
		}
	}
	if (rc == ST_OK) {
		rc = forward_place(&s, dir, &mem, (int)b, (int)t);
		ckpt_unpin(); /* its weights are loaded: the run may remove it */
	}
	if (rc == ST_OK)
		rc = evaluate(&s, &d, (int)b, (int)t, max_tokens, &loss, &n);
	if (rc == ST_OK && !n) {
		ST_ERROR(max_tokens ? "give a larger --max-tokens (0: the whole shard)"
				    : "give a shard with completions to score (its mask has no 1)",
			 "the tokens scored hold no loss targets (prompts only, under the loss mask)");
		rc = ST_FAIL;
	}
	if (rc == ST_OK && isfinite(loss) && !isfinite(exp(loss)))
		st_log_warn("the perplexity, e^%.1f, is past a double's range: --json gives it as "
			    "null",
			    loss);
	if (rc == ST_OK) {
		char l[32], p[32];
		if (json)
			printf("{\"loss\": %s, \"perplexity\": %s, \"matmul_precision\": \"%s\", "
			       "\"tokens\": %ld}\n",
			       st_json_num(l, sizeof l, "%.6f", loss),
			       st_json_num(p, sizeof p, "%.4f", exp(loss)), precision, n);
		else
			printf("loss %.4f | perplexity %.3f | %ld token%s | %s\n", loss, exp(loss), n,
			       n == 1 ? "" : "s", dir);
	}
	if (rc == ST_OK && !isfinite(loss)) {
		ST_ERROR("evaluate an earlier checkpoint: this one's weights make the outputs "
			 "overflow",
			 "the loss of %s is not finite", dir);
		rc = ST_FAIL;
	}
	data_close(&d); /* safe after a failed open: data_open zeroes d */
	session_close(&s);
	return rc;
}
