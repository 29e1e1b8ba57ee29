/* strata init: a randomly initialized model as a Hugging Face LLaMA directory. */
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/place.h"
#include "engine/session.h"
#include "io/fsutil.h"
#include "io/tokenizer.h"
#include "model/hf.h"
#include "store/store.h"
#include "util/check.h"

static void help(void)
{
	printf("usage: strata init [--config FILE|PRESET] --out DIR [options]\n\n"
	       "  --config S     a config.json (HF LLaMA) or a preset: %s [tiny]\n"
	       "  --out DIR      model directory to write (config.json, model.safetensors)\n"
	       "  --seed N       initialization seed [1]\n"
	       "  --vocab N      override the vocabulary size [the config's: 258 in every preset]\n"
	       "  --max-seq N    override max_position_embeddings [the config's]\n"
	       "  --tied         tie the output projection to the embedding (false: untie)\n"
	       "                 [the config's: false in every preset]\n"
	       "  --stable-embedding  LayerNorm after the embedding, Xavier init (for 8-bit\n"
	       "                 optimizers; false: none) [the config's: false in every preset]\n"
	       "  --shard-size S write the weights as shards of at most S (e.g. 2G) with an index [5 GB]\n"
	       "  --force        overwrite an existing model in DIR [false]\n",
	       config_preset_names());
}

/* The weights, made a unit at a time as the writer asks for them: a model
 * larger than memory is written in one unit's memory (it built the whole
 * model first, and a 7B one was killed for memory with no word on a 24 GiB
 * machine). Each parameter's values depend on the seed and the parameter
 * alone (model_init_unit), so they are the ones a whole-model init makes. */
struct init_source {
	const struct st_model *m;
	uint64_t seed;
	float *w;  /* the largest unit's floats */
	int unit;  /* the unit w holds; -1: none */
};

static const float *init_get(void *ctx, int unit)
{
	struct init_source *s = ctx;
	if (s->unit != unit) /* a file's tensors come a unit at a time, mostly */
		model_init_unit(s->m, unit, s->w, s->seed);
	s->unit = unit;
	return s->w;
}

static void init_put(void *ctx, int unit)
{
	(void)ctx, (void)unit;
}

int cmd_init(int argc, char **argv)
{
	struct cli_args a;
	ST_TRY(cli_parse(&a, argc, argv));
	if (cli_has(&a, "help")) {
		help();
		return ST_OK;
	}
	const char *conf, *out, *shard_size;
	ST_TRY(cli_get_str(&a, "config", "tiny", &conf));
	ST_TRY(cli_get_str(&a, "out", NULL, &out));
	ST_TRY(cli_get_str(&a, "shard-size", "auto", &shard_size));
	long seed, vocab, max_seq;
	ST_TRY(cli_get_long(&a, "seed", 1, LONG_MIN, LONG_MAX, &seed));
	/* 0 (absent): the preset's own */
	ST_TRY(cli_get_long(&a, "vocab", 0, 1, INT_MAX, &vocab));
	ST_TRY(cli_get_long(&a, "max-seq", 0, 2, INT_MAX, &max_seq));
	int tied, force, stable;
	ST_TRY(cli_get_bool(&a, "tied", &tied));
	ST_TRY(cli_get_bool(&a, "force", &force));
	ST_TRY(cli_get_bool(&a, "stable-embedding", &stable));
	size_t shard = 0;
	ST_TRY(parse_bytes(shard_size, &shard, "--shard-size"));
	ST_TRY(cli_check_unused(&a, "strata init"));
	ST_CHECK_USAGE(out, "pass --out DIR", "strata init: no output directory (--out)");
	ST_CHECK(force || !model_dir_holds_model(out),
		 "pass --force to overwrite it, or choose another --out", "%s already holds a model", out);

	struct st_config cfg;
	ST_TRY(config_resolve(&cfg, conf));
	if (vocab > 0 && vocab != cfg.vocab_size && cfg.bos_id == ST_BYTE_BOS &&
	    cfg.eos_id == ST_BYTE_EOS) {
		/* the presets' ids are the byte tokenizer's: for another vocabulary
		 * they would name ordinary tokens of its tokenizer.json, so none
		 * are written, and that tokenizer's own <bos> and <eos> count */
		cfg.bos_id = -1;
		cfg.eos_id = -1;
		st_log_info("config.json names no bos_token_id or eos_token_id: the byte "
			    "tokenizer's 256 and 257 would be %s of a %ld-token vocabulary (add your "
			    "tokenizer's ids if transformers' generate is to stop at its end token)",
			    vocab > 257 ? "ordinary tokens" : "past the ids", vocab);
	}
	if (vocab > 0)
		cfg.vocab_size = (int)vocab;
	if (max_seq > 0)
		cfg.max_seq = (int)max_seq;
	/* given, either way, they set the config's value: `--tied false` on a
	 * tied config.json unties it (it was taken as "not given") */
	if (cli_has(&a, "tied"))
		cfg.tied = tied;
	if (cli_has(&a, "stable-embedding"))
		cfg.stable_embedding = stable;
	ST_TRY(config_validate(&cfg));
	/* The output projection is then the Xavier-initialized embedding (std
	 * sqrt(2 / (vocab + dim)), not 0.02), and the stream it scores is
	 * about LayerNorm(wte[token]): each token's own logit starts near
	 * |wte[token]|^2 / std = dim x std (16 for the tiny preset, where the
	 * first loss is 15.5 against 5.6 untied) */
	if (cfg.stable_embedding && cfg.tied) {
		const double sd = sqrt(2.0 / (cfg.vocab_size + cfg.dim));
		st_log_warn("--stable-embedding with a tied output: the output projection is the "
			    "Xavier-initialized embedding (std %.3g), so each input token's own logit "
			    "starts near %.0f and the first losses are that high; untie it (--tied "
			    "false) unless the model must be tied",
			    sd, cfg.dim * sd);
	}

	struct st_model m;
	ST_TRY(model_build(&m, &cfg));
	size_t largest = 0;
	for (int u = 0; u < m.n_units; u++)
		largest = m.units[u].numel > largest ? m.units[u].numel : largest;
	struct init_source src = {&m, (uint64_t)seed, st_malloc(largest * sizeof(float)), -1};
	if (!src.w) {
		model_free(&m);
		return ST_FAIL;
	}
	/* written whole beside a model already there, which goes only then */
	struct model_stage st;
	int rc = model_dir_stage(out, force, &st);
	if (rc == ST_OK) {
		char path[sizeof st.tmp + 16];
		snprintf(path, sizeof path, "%s/config.json", st.tmp);
		/* config.json last (hf.h: model_dir_clear) */
		rc = model_save_weights_dir(&m, st.tmp, shard ? shard : ST_DEFAULT_SHARD_BYTES,
					    init_get, init_put, &src, NULL);
		if (rc == ST_OK)
			rc = config_save(&cfg, path);
		if (rc == ST_OK)
			rc = model_dir_commit(out, &st);
		else
			model_dir_unstage(&st);
	}
	if (rc == ST_OK) {
		char b[32];
		printf("wrote %s: %zu parameters (%s fp32), dim %d, %d layers, %d heads (%d kv), ffn %d, vocab %d\n",
		       out, m.numel, fmt_bytes(b, sizeof b, (double)m.numel * 4), cfg.dim,
		       cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.ffn_dim, cfg.vocab_size);
	}
	free(src.w);
	model_free(&m);
	return rc;
}
