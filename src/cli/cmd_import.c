/* strata import: a llama.cpp GGUF file -> a Hugging Face LLaMA directory. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/place.h"
#include "io/fsutil.h"
#include "model/hf.h"
#include "trainer/trainer.h"
#include "util/check.h"

static void help(void)
{
	printf("usage: strata import --gguf FILE --out DIR [--shard-size S] [--force]\n\n"
	       "Writes config.json, model.safetensors (or shards) and, for byte-level BPE\n"
	       "tokenizers with the llama-bpe, gpt-2 or smollm pre-tokenizer,\n"
	       "tokenizer.json (for others: copy the original model's into DIR): a\n"
	       "Hugging Face LLaMA directory that train, eval and sample read. Tensors\n"
	       "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K (so\n"
	       "Q4_K_M and Q5_K_M files too) are dequantized to fp32; llama.cpp's q/k\n"
	       "row permutation is undone.\n\n"
	       "  --gguf FILE    a llama-architecture GGUF file\n"
	       "  --out DIR      the model directory to write\n"
	       "  --shard-size S shard the weights above S (e.g. 2G) [5 GB]\n"
	       "  --force        overwrite a model already in DIR [false]\n");
}

int cmd_import(int argc, char **argv)
{
	struct cli_args a;
	ST_TRY(cli_parse(&a, argc, argv));
	if (cli_has(&a, "help")) {
		help();
		return ST_OK;
	}
	const char *in, *out, *shard_size;
	ST_TRY(cli_get_str(&a, "gguf", NULL, &in));
	ST_TRY(cli_get_str(&a, "out", NULL, &out));
	ST_TRY(cli_get_str(&a, "shard-size", "auto", &shard_size));
	int force;
	ST_TRY(cli_get_bool(&a, "force", &force));
	size_t shard = 0;
	ST_TRY(parse_bytes(shard_size, &shard, "--shard-size"));
	ST_TRY(cli_check_unused(&a, "strata import"));
	ST_CHECK_USAGE(in, "pass --gguf FILE", "strata import: no input (--gguf)");
	ST_CHECK_USAGE(out, "pass --out DIR", "strata import: no output directory (--out)");
	ST_CHECK(force || !model_dir_holds_model(out),
		 "pass --force to overwrite it, or choose another --out", "%s already holds a model", out);
	/* the input before the output directory is made */
	ST_CHECK(fs_exists(in), "check the path", "%s does not exist", in);
	ST_CHECK(!fs_is_dir(in),
		 "give a .gguf file (a Hugging Face model directory needs no import: give it as "
		 "--model to train, eval and sample)",
		 "%s is a directory, not a GGUF file", in);
	/* written whole beside a model already there, which goes only then */
	struct model_stage st;
	char path[4300];
	ST_TRY(model_dir_stage(out, force, &st));
	struct st_config cfg;
	int rc = gguf_import(in, st.tmp, shard ? shard : ST_DEFAULT_SHARD_BYTES, &cfg);
	/* the tokenizer files a model directory may hold (checkpoints carry the
	 * same set): those this import did not write, but a model replaced
	 * with --force left, belong to that model */
	int own[ST_TOK_FILES];
	for (int i = 0; i < ST_TOK_FILES; i++) {
		snprintf(path, sizeof path, "%s/%s", st.tmp, st_tok_files[i]);
		own[i] = fs_exists(path);
	}
	if (rc != ST_OK) {
		model_dir_unstage(&st);
		return rc;
	}
	ST_TRY(model_dir_commit(out, &st));
	for (int i = 0; i < ST_TOK_FILES; i++) {
		snprintf(path, sizeof path, "%s/%s", out, st_tok_files[i]);
		if (!own[i] && fs_exists(path))
			st_log_warn("%s was there before this import and is kept: remove it if it is "
				    "not this model's (%s)",
				    path,
				    i == 0 ? "prepare and sample would use it"
					   : "transformers would read it");
	}
	printf("imported %s into %s: dim %d, %d layers, %d heads (%d kv), ffn %d, vocab %d%s, rope "
	       "theta %g\n",
	       in, out, cfg.dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.ffn_dim, cfg.vocab_size,
	       cfg.tied ? ", tied head" : "", cfg.rope_theta);
	return ST_OK;
}
