/* GGUF import: a llama.cpp model file -> a Hugging Face LLaMA directory
 * (config.json, model.safetensors or shards, tokenizer.json); see hf.h.
 *
 * llama.cpp's converter permutes the rows of q_proj and k_proj so that its
 * RoPE can rotate adjacent pairs: per head, rows (j * hd/2 + i) of the
 * Hugging Face matrix become rows (2i + j). Importing undoes it (k with the
 * kv-head count), so the weights are the Hugging Face ones and strata's
 * rotate_half RoPE applies unchanged. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/bpe.h"
#include "io/fsutil.h"
#include "io/gguf.h"
#include "model/hf.h"
#include "util/check.h"
#include "util/finite.h"
#include "util/utf8.h"

/* Hugging Face name -> GGUF name (out holds 128 bytes); 0 when unknown. */
static int gguf_name(char *out, const char *hf)
{
	static const char *top[][2] = {{"model.embed_tokens.weight", "token_embd.weight"},
				       {"model.norm.weight", "output_norm.weight"},
				       {"lm_head.weight", "output.weight"}};
	static const char *layer[][2] = {
		{"input_layernorm.weight", "attn_norm.weight"}, {"self_attn.q_proj.weight", "attn_q.weight"},
		{"self_attn.k_proj.weight", "attn_k.weight"},   {"self_attn.v_proj.weight", "attn_v.weight"},
		{"self_attn.o_proj.weight", "attn_output.weight"},
		{"post_attention_layernorm.weight", "ffn_norm.weight"},
		{"mlp.gate_proj.weight", "ffn_gate.weight"},    {"mlp.up_proj.weight", "ffn_up.weight"},
		{"mlp.down_proj.weight", "ffn_down.weight"}};
	for (size_t i = 0; i < sizeof top / sizeof *top; i++)
		if (!strcmp(hf, top[i][0])) {
			snprintf(out, 128, "%s", top[i][1]);
			return 1;
		}
	int l, n = 0;
	if (sscanf(hf, "model.layers.%d.%n", &l, &n) == 1 && n > 0)
		for (size_t i = 0; i < sizeof layer / sizeof *layer; i++)
			if (!strcmp(hf + n, layer[i][0])) {
				snprintf(out, 128, "blk.%d.%s", l, layer[i][1]);
				return 1;
			}
	return 0;
}

/* A llama.* size: a whole number in [1, 2^24). Absent, it is dflt, or an
 * error when dflt is 0; present, a value out of range is an error naming the
 * key (a damaged file can hold anything; taking a default for it would
 * import another model than the file's). */
static int meta_size(const struct st_gguf *g, const char *key, int dflt, int *out)
{
	const struct st_gguf_kv *kv = gguf_kv(g, key);
	if (!kv) {
		ST_CHECK(dflt > 0, "the file lacks llama.* metadata; convert it with a current llama.cpp",
			 "%s: no %s", g->path, key);
		*out = dflt;
		return ST_OK;
	}
	uint64_t v;
	double f;
	ST_CHECK(kv->type != GGUF_BOOL && gguf_get_u64(g, key, &v) == ST_OK &&
			 gguf_get_f64(g, key, &f) == ST_OK && f == (double)v && v >= 1 && v < (1u << 24),
		 "the file's metadata is damaged", "%s: %s is not a size from 1 to 2^24", g->path, key);
	*out = (int)v;
	return ST_OK;
}

/* A positive finite real (RoPE base, norm epsilon): absent, dflt; present
 * and NaN, infinite, zero or negative, an error naming the key. */
static int meta_real(const struct st_gguf *g, const char *key, double dflt, double *out)
{
	const struct st_gguf_kv *kv = gguf_kv(g, key);
	if (!kv) {
		*out = dflt;
		return ST_OK;
	}
	ST_CHECK(kv->type != GGUF_BOOL && gguf_get_f64(g, key, out) == ST_OK && isfinite(*out) &&
			 *out > 0,
		 "the file's metadata is damaged", "%s: %s is not a positive finite number", g->path,
		 key);
	return ST_OK;
}

static int cfg_from_gguf(struct st_config *cfg, const struct st_gguf *g)
{
	size_t n;
	uint64_t v;
	/* one part of a model split over several files (gguf-split: the usual
	 * form of a large model's download); its second part has no
	 * architecture, and the first not every tensor */
	if (gguf_kv(g, "split.count") && gguf_get_u64(g, "split.count", &v) == ST_OK && v > 1) {
		uint64_t no = 0;
		gguf_get_u64(g, "split.no", &no);
		ST_ERROR("merge the parts into one file with llama.cpp's `llama-gguf-split --merge "
			 "FIRST-PART MERGED.gguf`, then import that",
			 "%s is part %llu of %llu of a split model", g->path,
			 (unsigned long long)no + 1, (unsigned long long)v);
		return ST_FAIL;
	}
	const char *flags[2] = {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"};
	for (int k = 0; k < 2; k++) {
		const struct st_gguf_kv *kv = gguf_kv(g, flags[k]);
		ST_CHECK(!kv || kv->type == GGUF_BOOL, "the file's metadata is damaged",
			 "%s: %s is not a bool (llama.cpp refuses it too)", g->path, flags[k]);
	}
	/* llama.cpp refuses a pre-tokenizer name of another type; it read as
	 * none ("no tokenizer.ggml.pre") */
	const struct st_gguf_kv *pre = gguf_kv(g, "tokenizer.ggml.pre");
	ST_CHECK(!pre || pre->type == GGUF_STRING, "the file's metadata is damaged",
		 "%s: tokenizer.ggml.pre is not a string (llama.cpp refuses it too)", g->path);
	const char *arch = gguf_get_str(g, "general.architecture", &n);
	char shown[96]; /* a NUL or control byte shown as \xNN ("llama\0" read as 'llama') */
	if (arch)
		st_printable(shown, sizeof shown, arch, n);
	ST_CHECK(arch && n == 5 && !memcmp(arch, "llama", 5),
		 "strata reads llama-architecture GGUF files (LLaMA, Mistral-style, SmolLM, ...)",
		 "%s: unsupported architecture '%s'", g->path,
		 arch ? shown : gguf_kv(g, "general.architecture") ? "not a string" : "missing");
	memset(cfg, 0, sizeof *cfg);
	ST_TRY(meta_size(g, "llama.embedding_length", 0, &cfg->dim));
	ST_TRY(meta_size(g, "llama.block_count", 0, &cfg->n_layers));
	ST_TRY(meta_size(g, "llama.feed_forward_length", 0, &cfg->ffn_dim));
	ST_TRY(meta_size(g, "llama.attention.head_count", 0, &cfg->n_heads));
	ST_TRY(meta_size(g, "llama.attention.head_count_kv", cfg->n_heads, &cfg->n_kv_heads));
	ST_CHECK(gguf_kv(g, "llama.attention.key_length") || cfg->dim % cfg->n_heads == 0,
		 "the file's metadata is damaged",
		 "%s: llama.attention.head_count %d does not divide llama.embedding_length %d, and no "
		 "llama.attention.key_length gives the head size",
		 g->path, cfg->n_heads, cfg->dim);
	ST_TRY(meta_size(g, "llama.attention.key_length", cfg->dim / cfg->n_heads, &cfg->head_dim));
	/* one head size for keys and values: another value size is another
	 * attention than strata's (the import took it, and the shapes of the
	 * v and o projections then disagreed, or worse, agreed) */
	int vlen;
	ST_TRY(meta_size(g, "llama.attention.value_length", cfg->head_dim, &vlen));
	ST_CHECK(vlen == cfg->head_dim, "strata's attention has one head size for keys and values",
		 "%s: llama.attention.value_length %d differs from the key length %d", g->path, vlen,
		 cfg->head_dim);
	if (!gguf_kv(g, "llama.context_length"))
		st_log_warn("%s has no llama.context_length: using 2048 positions (llama.cpp refuses "
			    "such a file; check the model's own value, and set max_position_embeddings "
			    "in the written config.json to it)",
			    g->path);
	ST_TRY(meta_size(g, "llama.context_length", 2048, &cfg->max_seq));
	double f;
	ST_TRY(meta_real(g, "llama.rope.freq_base", 10000.0, &cfg->rope_theta));
	if (!gguf_kv(g, "llama.attention.layer_norm_rms_epsilon"))
		st_log_warn("%s has no llama.attention.layer_norm_rms_epsilon: using 1e-5 (llama.cpp "
			    "refuses such a file; check the model's own value)",
			    g->path);
	ST_TRY(meta_real(g, "llama.attention.layer_norm_rms_epsilon", 1e-5, &f));
	cfg->norm_eps = (float)f;
	/* RoPE over every dimension of a head: another count is partial rotary
	 * embedding, another model than the one strata would train */
	ST_CHECK(!gguf_kv(g, "llama.rope.dimension_count") ||
			 gguf_get_u64(g, "llama.rope.dimension_count", &v) == ST_OK,
		 "the file's metadata is damaged", "%s: llama.rope.dimension_count is not a count",
		 g->path);
	if (gguf_kv(g, "llama.rope.dimension_count"))
		ST_CHECK(v == (uint64_t)cfg->head_dim,
			 "strata implements RoPE over whole heads; this model is not supported",
			 "%s: llama.rope.dimension_count is %llu, not the head size %d (partial rotary "
			 "embedding)",
			 g->path, (unsigned long long)v, cfg->head_dim);
	cfg->init_std = 0.02f;
	const struct st_gguf_tensor *emb = gguf_tensor(g, "token_embd.weight");
	ST_CHECK(emb && emb->n_dims == 2, "the file is not a complete llama model",
		 "%s: no 2-D token_embd.weight tensor", g->path);
	cfg->vocab_size = (int)emb->ne[1];
	cfg->tied = gguf_tensor(g, "output.weight") == NULL;
	/* an id outside the vocabulary (or no count) names no token: dropped, said */
	const char *id_keys[2] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
	int *ids[2] = {&cfg->bos_id, &cfg->eos_id};
	for (int k = 0; k < 2; k++) {
		*ids[k] = -1;
		if (!gguf_kv(g, id_keys[k]))
			continue;
		if (gguf_get_u64(g, id_keys[k], &v) == ST_OK && v < (uint64_t)cfg->vocab_size)
			*ids[k] = (int)v;
		else
			st_log_warn("%s: %s is not an id below the vocabulary size %d: left out", g->path,
				    id_keys[k], cfg->vocab_size);
	}
	const char *scaling = gguf_get_str(g, "llama.rope.scaling.type", &n);
	ST_CHECK(scaling || !gguf_kv(g, "llama.rope.scaling.type"), "the file's metadata is damaged",
		 "%s: llama.rope.scaling.type is not a string", g->path);
	const int no_scaling = scaling && n == 4 && !memcmp(scaling, "none", 4);
	ST_CHECK(!(scaling && !no_scaling) && !gguf_tensor(g, "rope_freqs.weight"),
		 "strata implements plain RoPE only; LLaMA 3.1-style and linear scaling are not yet "
		 "supported",
		 "%s: the model uses RoPE scaling (%s), which strata does not implement", g->path,
		 scaling ? "llama.rope.scaling.type" : "rope_freqs.weight");
	/* llama.cpp takes a factor without a type as linear scaling (its type
	 * defaults to linear; old extended-context LLaMA-2 files carry only
	 * scale_linear, which it reads only when scaling.factor is absent); 0
	 * and 1 mean none */
	const char *factor_keys[2] = {"llama.rope.scaling.factor", "llama.rope.scale_linear"};
	for (int k = 0; k < 2; k++) {
		if (!gguf_kv(g, factor_keys[k]) || (k == 1 && gguf_kv(g, factor_keys[0])))
			continue;
		double fac = 0;
		ST_CHECK(gguf_get_f64(g, factor_keys[k], &fac) == ST_OK && isfinite(fac),
			 "the file's metadata is damaged", "%s: %s is not a number", g->path,
			 factor_keys[k]);
		ST_CHECK(no_scaling || fac == 0 || fac == 1,
			 "strata implements plain RoPE only; linear scaling is not yet supported",
			 "%s: %s is %g with no llama.rope.scaling.type: llama.cpp runs this model with "
			 "linear RoPE scaling, which strata does not implement",
			 g->path, factor_keys[k], fac);
	}
	double experts = 0;
	ST_CHECK(!gguf_kv(g, "llama.expert_count") ||
			 gguf_get_f64(g, "llama.expert_count", &experts) == ST_OK,
		 "the file's metadata is damaged", "%s: llama.expert_count is not a number", g->path);
	ST_CHECK(experts == 0,
		 "strata trains dense LLaMA models, not mixtures of experts",
		 "%s: llama.expert_count is %g: a mixture of experts, or damaged metadata", g->path,
		 experts);
	ST_CHECK(emb->ne[1] < (1u << 24), "the file's metadata is damaged",
		 "%s: a vocabulary of %llu tokens", g->path, (unsigned long long)emb->ne[1]);
	return config_validate(cfg);
}

struct import_ctx {
	const struct st_model *m;
	const struct st_gguf *g;
	float *buf;   /* one unit */
	int unit;     /* the unit buf holds; -1: none */
	float *tmp;   /* one matrix, for the row permutation */
	/* the first tensor holding inf or NaN, for the error after the write */
	const char *bad;
	long bad_at;
	float bad_value;
};

/* Undo llama.cpp's q/k row permutation: HF row h*hd + j*hd/2 + i is GGUF
 * row h*hd + 2i + j. */
static void unpermute(float *dst, const float *src, int n_head, int hd, int cols)
{
	for (int h = 0; h < n_head; h++)
		for (int i = 0; i < hd / 2; i++)
			for (int j = 0; j < 2; j++)
				memcpy(dst + (size_t)(h * hd + j * hd / 2 + i) * cols,
				       src + (size_t)(h * hd + 2 * i + j) * cols, (size_t)cols * sizeof *dst);
}

static const float *unit_get(void *ctx, int unit)
{
	struct import_ctx *c = ctx;
	/* the writer asks for each tensor in turn: the unit is read and
	 * dequantized once (it was rebuilt for every tensor in it, more than
	 * half of an import's time) */
	if (c->unit == unit)
		return c->buf;
	c->unit = unit;
	const struct st_unit *u = &c->m->units[unit];
	for (int i = u->first_param; i < u->first_param + u->n_params; i++) {
		const struct st_param *p = &c->m->params[i];
		char name[128];
		gguf_name(name, p->name); /* checked before saving */
		const struct st_gguf_tensor *t = gguf_tensor(c->g, name);
		float *w = c->buf + p->offset;
		const int is_q = strstr(p->name, ".q_proj.") != NULL, is_k = strstr(p->name, ".k_proj.") != NULL;
		gguf_read_f32(c->g, t, is_q || is_k ? c->tmp : w);
		if (is_q || is_k)
			unpermute(w, c->tmp, is_q ? c->m->cfg.n_heads : c->m->cfg.n_kv_heads,
				  c->m->cfg.head_dim, (int)p->shape[1]);
		const long at = c->bad ? -1 : st_first_nonfinite(w, p->numel);
		if (at >= 0)
			c->bad = p->name, c->bad_at = at, c->bad_value = w[at];
	}
	return c->buf;
}

static void unit_put(void *ctx, int unit) { (void)ctx, (void)unit; }

/* Every parameter present with the shape the config implies (GGUF lists
 * dimensions innermost first: (in, out) for an (out, in) matrix). */
static int check_tensors(const struct st_model *m, const struct st_gguf *g)
{
	for (int i = 0; i < m->n_params; i++) {
		const struct st_param *p = &m->params[i];
		char name[128];
		ST_CHECK(gguf_name(name, p->name), NULL, "internal: no GGUF name for %s", p->name);
		const struct st_gguf_tensor *t = gguf_tensor(g, name);
		ST_CHECK(t, "the file is not a complete llama model", "%s: tensor '%s' (%s) is missing",
			 g->path, name, p->name);
		int ok = t->n_dims == p->ndim;
		for (int d = 0; ok && d < p->ndim; d++)
			ok = t->ne[d] == (uint64_t)p->shape[p->ndim - 1 - d];
		ST_CHECK(ok, "the file's tensors disagree with its metadata",
			 "%s: tensor '%s' has a shape that disagrees with the model's metadata", g->path, name);
	}
	return ST_OK;
}

/* Every tensor of the file is one the model uses: anything else (biases, a
 * different architecture under the llama name) would be dropped silently. */
static int check_extra(const struct st_model *m, const struct st_gguf *g)
{
	for (int i = 0; i < g->n_tensors; i++) {
		int used = 0;
		for (int k = 0; k < m->n_params && !used; k++) {
			char name[128];
			used = gguf_name(name, m->params[k].name) && !strcmp(name, g->t[i].name);
		}
		ST_CHECK(used, "the file holds more than a plain LLaMA model; strata cannot import it",
			 "%s: tensor '%s' has no place in the model", g->path, g->t[i].name);
	}
	return ST_OK;
}

/* root, printed, as dir/name (written whole or not at all); root freed. */
static int write_json(cJSON *root, const char *dir, const char *name)
{
	char *text = cJSON_Print(root);
	cJSON_Delete(root);
	ST_CHECK(text, NULL, "out of memory writing %s", name);
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	const int rc = fs_write_file_atomic(path, text, strlen(text));
	free(text);
	return rc;
}

/* tokenizer.ggml.* (model gpt2: byte-level BPE) -> tokenizer.json */
/* tokenizer_config.json beside tokenizer.json: transformers' AutoTokenizer
 * reads its special tokens from there (from tokenizer.json alone it has no
 * <bos> or <eos>, and generate() no end); config.json's ids are the model's.
 * An instruct model's tokenizer.chat_template goes there too, as
 * chat_template (apply_chat_template refused the import without it). */
static int write_tokenizer_config(const struct st_gguf *g, const struct st_config *cfg,
				  const struct st_bpe *b, const char *dir)
{
	cJSON *root = cJSON_CreateObject();
	size_t tn = 0;
	const char *tmpl = gguf_get_str(g, "tokenizer.chat_template", &tn);
	/* JSON is UTF-8: transformers could not read tokenizer_config.json
	 * at all with a Latin-1 byte in it (the import said nothing) */
	const long bad = tmpl ? st_utf8_bad(tmpl, tn) : -1;
	if (tmpl && (memchr(tmpl, 0, tn) || bad >= 0)) {
		char what[64] = "holds a NUL byte";
		if (bad >= 0)
			snprintf(what, sizeof what, "is not UTF-8 text (byte 0x%02x at %ld)",
				 (unsigned char)tmpl[bad], bad);
		st_log_warn("%s: tokenizer.chat_template %s: not carried into tokenizer_config.json",
			    g->path, what);
		tmpl = NULL;
	}
	char *chat = tmpl ? st_malloc(tn + 1) : NULL;
	if (chat) {
		memcpy(chat, tmpl, tn);
		chat[tn] = '\0';
	}
	cJSON_AddStringToObject(root, "tokenizer_class", "PreTrainedTokenizerFast");
	const char *keys[2] = {"bos_token", "eos_token"};
	const int ids[2] = {cfg->bos_id, cfg->eos_id};
	for (int k = 0; k < 2; k++) {
		size_t len = 0;
		const char *text = ids[k] >= 0 ? bpe_token_bytes(b, (uint32_t)ids[k], &len) : NULL;
		char tok[512];
		if (text && len < sizeof tok) {
			memcpy(tok, text, len);
			tok[len] = '\0';
			cJSON_AddStringToObject(root, keys[k], tok);
		}
	}
	cJSON_AddNumberToObject(root, "model_max_length", cfg->max_seq);
	cJSON_AddBoolToObject(root, "clean_up_tokenization_spaces", 0);
	if (chat)
		cJSON_AddStringToObject(root, "chat_template", chat);
	free(chat);
	return write_json(root, dir, "tokenizer_config.json");
}

/* generation_config.json: the end tokens generation stops at, as llama.cpp
 * ends a generation: <eos>, tokenizer.ggml.eot_token_id and eom_token_id,
 * and where the file names no EOT, a control token llama.cpp takes for one
 * by its text (an early Llama 3 Instruct conversion names <|end_of_text|>
 * as <eos> and nothing else, and its turns end with <|eot_id|>). Written
 * only when there is more than <eos>: transformers' generate stops at any
 * of the list, and so does strata sample (they ran on past <|eot_id|>). */
static int write_generation_config(const struct st_gguf *g, const struct st_config *cfg,
				   const struct st_bpe *b, const char *dir)
{
	int ends[8], n = 0;
	if (cfg->eos_id >= 0)
		ends[n++] = cfg->eos_id;
	const char *keys[2] = {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"};
	int eot_named = 0;
	for (int k = 0; k < 2; k++) {
		uint64_t v;
		if (!gguf_kv(g, keys[k]))
			continue;
		if (gguf_get_u64(g, keys[k], &v) != ST_OK || v >= (uint64_t)cfg->vocab_size ||
		    !bpe_is_added(b, (int)v)) {
			st_log_warn("%s: %s is not the id of a control token: left out", g->path, keys[k]);
			continue;
		}
		eot_named |= k == 0;
		int dup = 0;
		for (int i = 0; i < n; i++)
			dup |= ends[i] == (int)v;
		if (!dup)
			ends[n++] = (int)v;
	}
	/* llama.cpp's texts of an end of turn (llama-vocab.cpp), when no EOT
	 * is named */
	const char *eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"};
	for (int t = 0; t < 4 && !eot_named; t++) {
		const int id = bpe_token_id(b, eot_texts[t]);
		if (id < 0 || !bpe_is_added(b, id))
			continue;
		int dup = 0;
		for (int i = 0; i < n; i++)
			dup |= ends[i] == id;
		if (!dup)
			ends[n++] = id;
		break;
	}
	if (n < 2)
		return ST_OK;
	cJSON *root = cJSON_CreateObject();
	if (cfg->bos_id >= 0)
		cJSON_AddNumberToObject(root, "bos_token_id", cfg->bos_id);
	cJSON_AddItemToObject(root, "eos_token_id", cJSON_CreateIntArray(ends, n));
	return write_json(root, dir, "generation_config.json");
}

/* A tokenizer the import cannot rebuild exactly as llama.cpp runs it: the
 * weights and config are still the model, so they import, and the user is
 * told where the tokenizer has to come from (prepare and sample read the
 * model directory's tokenizer.json). */
static int no_tokenizer(const struct st_gguf *g, const char *why)
{
	st_log_warn("%s: %s: no tokenizer.json written; copy the original model's tokenizer.json "
		    "(and tokenizer_config.json) into the output directory before prepare or sample",
		    g->path, why);
	return ST_OK;
}

/* llama.cpp's pre-tokenizer (llama-vocab.cpp: the regexes it splits text
 * with before BPE) for tokenizer.ggml.pre, as the tokenizer.json
 * pre-tokenizer that splits the same way. */
enum pre_kind { PRE_NONE, PRE_LLAMA3, PRE_GPT2, PRE_SMOLLM };

static enum pre_kind pre_kind(const char *name)
{
	/* LLAMA3: LLaMA 3's regex (llama.cpp spells its case-insensitive
	 * contractions out); a word in the vocabulary is one token, merges
	 * ignored */
	if (!strcmp(name, "llama-bpe") || !strcmp(name, "llama3") || !strcmp(name, "llama-v3"))
		return PRE_LLAMA3;
	/* GPT2: GPT-2's regex (llama.cpp's lacks the final \s+, which matches
	 * only what it leaves as a piece of its own anyway). "gpt2" is none of
	 * llama.cpp's names: it refuses such a file ("unknown pre-tokenizer
	 * type"), so there is no splitting of its to rebuild. */
	if (!strcmp(name, "gpt-2"))
		return PRE_GPT2;
	/* SMOLLM: \p{N} split off one digit at a time, then GPT-2's regex:
	 * SmolLM's own tokenizer.json (Digits, individual_digits, then ByteLevel
	 * with its regex) */
	if (!strcmp(name, "smollm"))
		return PRE_SMOLLM;
	/* "default" (what llama.cpp also runs for a missing name; an unknown
	 * one it refuses) splits off runs of punctuation before GPT-2's regex ("don't" becomes
	 * don ' t, not don 't) and then digits; no tokenizer.json strata writes
	 * is checked to split like it, so none is written. The others (qwen2,
	 * tekken, ...) have regexes of their own. */
	return PRE_NONE;
}

/* A token's text for the post-processor (into buf), or NULL. */
static const char *special_text(const struct st_gguf_kv *tokens, int id, char *buf, size_t n)
{
	size_t len = 0;
	const char *s = id >= 0 ? gguf_arr_str(tokens, (uint64_t)id, &len) : NULL;
	if (!s || !len || len >= n || memchr(s, 0, len))
		return NULL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return buf;
}

static void add_special(cJSON *arr, const char *key, const char *text, int part)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *in = cJSON_AddObjectToObject(o, key);
	cJSON_AddStringToObject(in, "id", text);
	cJSON_AddNumberToObject(in, "type_id", part);
	cJSON_AddItemToArray(arr, o);
}

/* <bos> before and <eos> after every encoding where llama.cpp adds them
 * (tokenizer.ggml.add_bos_token / add_eos_token true; without the key, the
 * defaults: <bos> for LLaMA 3's pre-tokenizers, whose older GGUF files lack
 * the key, none for the other BPE ones, and no <eos>): Hugging Face's
 * tokenizers do that in a post-processor, as Llama 3's own tokenizer.json
 * does; without one, transformers encodes without them. (add_eos_token was
 * ignored until 2026-11-25.) NULL where none is wanted. (strata's own
 * loader reads no post-processor: prepare and sample add <bos> and <eos>
 * where their options say.) */
static cJSON *bos_post_processor(const struct st_gguf *g, const struct st_gguf_kv *tokens,
				 const struct st_config *cfg, int llama3)
{
	const struct st_gguf_kv *kb = gguf_kv(g, "tokenizer.ggml.add_bos_token");
	const struct st_gguf_kv *ke = gguf_kv(g, "tokenizer.ggml.add_eos_token");
	char bb[256], eb[256];
	const char *bos = (kb ? kb->value[0] : llama3) ? special_text(tokens, cfg->bos_id, bb, sizeof bb) : NULL;
	const char *eos = ke && ke->value[0] ? special_text(tokens, cfg->eos_id, eb, sizeof eb) : NULL;
	if (!bos && !eos)
		return NULL;
	cJSON *pp = cJSON_CreateObject();
	cJSON_AddStringToObject(pp, "type", "TemplateProcessing");
	const char *lists[2] = {"single", "pair"};
	for (int l = 0; l < 2; l++) {
		cJSON *arr = cJSON_AddArrayToObject(pp, lists[l]);
		for (int part = 0; part <= l; part++) { /* <bos> A <eos>, then <bos> B <eos> for a pair */
			if (bos)
				add_special(arr, "SpecialToken", bos, part);
			add_special(arr, "Sequence", part ? "B" : "A", part);
			if (eos)
				add_special(arr, "SpecialToken", eos, part);
		}
	}
	cJSON *sp = cJSON_AddObjectToObject(pp, "special_tokens");
	const char *texts[2] = {bos, eos};
	const int ids[2] = {cfg->bos_id, cfg->eos_id};
	for (int k = 0; k < 2; k++) {
		if (!texts[k] || (k == 1 && bos && !strcmp(bos, eos)))
			continue;
		cJSON *st = cJSON_AddObjectToObject(sp, texts[k]);
		cJSON_AddStringToObject(st, "id", texts[k]);
		cJSON_AddItemToObject(st, "ids", cJSON_CreateIntArray(&ids[k], 1));
		cJSON_AddItemToObject(st, "tokens", cJSON_CreateStringArray(&texts[k], 1));
	}
	return pp;
}

static int write_tokenizer(const struct st_gguf *g, const char *dir, const struct st_config *cfg)
{
	size_t n;
	const char *model = gguf_get_str(g, "tokenizer.ggml.model", &n);
	char why[256];
	if (!model || !(n == 4 && !memcmp(model, "gpt2", 4))) {
		snprintf(why, sizeof why, "tokenizer '%.*s' is not byte-level BPE", model ? (int)n : 4,
			 model ? model : "none");
		return no_tokenizer(g, why);
	}
	const struct st_gguf_kv *tokens = gguf_kv(g, "tokenizer.ggml.tokens");
	const struct st_gguf_kv *merges = gguf_kv(g, "tokenizer.ggml.merges");
	const struct st_gguf_kv *types = gguf_kv(g, "tokenizer.ggml.token_type");
	ST_CHECK(tokens && tokens->strs && merges && merges->strs, "the file's tokenizer is incomplete",
		 "%s: tokenizer.ggml.tokens or .merges missing", g->path);
	/* ids past the embedding would be tokens the model has no row for
	 * (fewer tokens than rows is padding, and fine) */
	/* the token kinds decide which become added tokens: a list of another
	 * type, or a short one, made control tokens ordinary vocabulary */
	const int int_types = types && types->type == GGUF_ARRAY &&
			      (types->arr_type == GGUF_INT8 || types->arr_type == GGUF_INT16 ||
			       types->arr_type == GGUF_INT32 || types->arr_type == GGUF_INT64 ||
			       types->arr_type == GGUF_UINT8 || types->arr_type == GGUF_UINT16 ||
			       types->arr_type == GGUF_UINT32 || types->arr_type == GGUF_UINT64);
	ST_CHECK(!types || (int_types && types->arr_n == tokens->arr_n), "the file's tokenizer is damaged",
		 "%s: tokenizer.ggml.token_type is not a list of %llu integers, one per token",
		 g->path, (unsigned long long)tokens->arr_n);
	ST_CHECK(tokens->arr_n <= (uint64_t)cfg->vocab_size, "the file is damaged",
		 "%s: %llu tokens in tokenizer.ggml.tokens, more than the %d rows of token_embd.weight",
		 g->path, (unsigned long long)tokens->arr_n, cfg->vocab_size);
	size_t pn = 0;
	const char *pre = gguf_get_str(g, "tokenizer.ggml.pre", &pn);
	char pre_name[64] = "";
	if (pre)
		snprintf(pre_name, sizeof pre_name, "%.*s", (int)(pn < 63 ? pn : 63), pre);
	const enum pre_kind kind = pre && !memchr(pre, 0, pn) ? pre_kind(pre_name) : PRE_NONE;
	if (kind == PRE_NONE) {
		if (!pre)
			snprintf(why, sizeof why, "no tokenizer.ggml.pre (llama.cpp then splits text with "
				 "its 'default' pre-tokenizer, which strata does not rebuild)");
		else if (!strcmp(pre_name, "default"))
			snprintf(why, sizeof why, "pre-tokenizer 'default' (llama.cpp's own, splitting "
				 "punctuation runs first) is not one strata rebuilds");
		else
			snprintf(why, sizeof why, "pre-tokenizer '%s' is not one strata rebuilds (it "
				 "rebuilds llama-bpe, gpt-2 and smollm)", pre_name);
		return no_tokenizer(g, why);
	}
	const int llama3 = kind == PRE_LLAMA3;
	/* every field the Hugging Face tokenizers library requires when it
	 * deserializes the file, so that transformers and llama.cpp's converter
	 * read it too */
	cJSON *root = cJSON_CreateObject();
	cJSON_AddStringToObject(root, "version", "1.0");
	cJSON_AddNullToObject(root, "truncation");
	cJSON_AddNullToObject(root, "padding");
	cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
	cJSON_AddNullToObject(root, "normalizer");
	cJSON *pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
	if (llama3) {
		cJSON_AddStringToObject(pt, "type", "Sequence");
		cJSON *seq = cJSON_AddArrayToObject(pt, "pretokenizers");
		cJSON *split = cJSON_CreateObject(), *bl = cJSON_CreateObject();
		cJSON_AddStringToObject(split, "type", "Split");
		cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "Regex",
					"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
					" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
		cJSON_AddStringToObject(split, "behavior", "Isolated");
		cJSON_AddBoolToObject(split, "invert", 0);
		cJSON_AddStringToObject(bl, "type", "ByteLevel");
		cJSON_AddBoolToObject(bl, "add_prefix_space", 0);
		cJSON_AddBoolToObject(bl, "trim_offsets", 1);
		cJSON_AddBoolToObject(bl, "use_regex", 0);
		cJSON_AddItemToArray(seq, split);
		cJSON_AddItemToArray(seq, bl);
	} else {
		cJSON *bl = pt;
		if (kind == PRE_SMOLLM) {
			cJSON_AddStringToObject(pt, "type", "Sequence");
			cJSON *seq = cJSON_AddArrayToObject(pt, "pretokenizers");
			cJSON *digits = cJSON_CreateObject();
			cJSON_AddStringToObject(digits, "type", "Digits");
			cJSON_AddBoolToObject(digits, "individual_digits", 1);
			cJSON_AddItemToArray(seq, digits);
			bl = cJSON_CreateObject();
			cJSON_AddItemToArray(seq, bl);
		}
		cJSON_AddStringToObject(bl, "type", "ByteLevel");
		cJSON_AddBoolToObject(bl, "add_prefix_space", 0);
		cJSON_AddBoolToObject(bl, "trim_offsets", 1);
		cJSON_AddBoolToObject(bl, "use_regex", 1);
	}
	cJSON *pp = bos_post_processor(g, tokens, cfg, llama3);
	if (pp)
		cJSON_AddItemToObject(root, "post_processor", pp);
	else
		cJSON_AddNullToObject(root, "post_processor");
	cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
	cJSON_AddStringToObject(dec, "type", "ByteLevel");
	cJSON_AddBoolToObject(dec, "add_prefix_space", 1);
	cJSON_AddBoolToObject(dec, "trim_offsets", 1);
	cJSON_AddBoolToObject(dec, "use_regex", 1);
	cJSON *model_o = cJSON_AddObjectToObject(root, "model");
	cJSON_AddStringToObject(model_o, "type", "BPE");
	cJSON_AddNullToObject(model_o, "dropout");
	cJSON_AddNullToObject(model_o, "unk_token");
	cJSON_AddNullToObject(model_o, "continuing_subword_prefix");
	cJSON_AddNullToObject(model_o, "end_of_word_suffix");
	cJSON_AddBoolToObject(model_o, "fuse_unk", 0);
	cJSON_AddBoolToObject(model_o, "byte_fallback", 0);
	cJSON_AddBoolToObject(model_o, "ignore_merges", llama3);
	cJSON *vocab = cJSON_AddObjectToObject(model_o, "vocab");
	cJSON *mg = cJSON_AddArrayToObject(model_o, "merges");
	char *buf = st_malloc(65536);
	int rc = buf ? ST_OK : ST_FAIL;
	for (uint64_t i = 0; i < tokens->arr_n && rc == ST_OK; i++) {
		size_t len;
		const char *s = gguf_arr_str(tokens, i, &len);
		/* a NUL would cut the token's text short in tokenizer.json, and a
		 * text that is not UTF-8 (GGUF's strings are) made a tokenizer.json
		 * the tokenizers library cannot read, where import said nothing */
		if (!s || len >= 65536 || len == 0 || memchr(s, 0, len) || st_utf8_bad(s, len) >= 0) {
			ST_ERROR("the file's tokenizer is damaged", "%s: token %llu is %s", g->path,
				 (unsigned long long)i,
				 !s ? "unreadable" : len == 0 ? "empty" : len >= 65536 ? "too long"
					 : memchr(s, 0, len) ? "holding a NUL byte" : "not UTF-8 text");
			rc = ST_FAIL;
			break;
		}
		memcpy(buf, s, len);
		buf[len] = '\0';
		cJSON_AddNumberToObject(vocab, buf, (double)i);
		int64_t type = types ? gguf_arr_int(types, i) : 1;
		if (type == 3 || type == 4) { /* control or user-defined: an added token */
			cJSON *a = cJSON_CreateObject();
			cJSON_AddNumberToObject(a, "id", (double)i);
			cJSON_AddStringToObject(a, "content", buf);
			cJSON_AddBoolToObject(a, "single_word", 0);
			cJSON_AddBoolToObject(a, "lstrip", 0);
			cJSON_AddBoolToObject(a, "rstrip", 0);
			cJSON_AddBoolToObject(a, "normalized", 0);
			cJSON_AddBoolToObject(a, "special", type == 3);
			cJSON_AddItemToArray(added, a);
		}
	}
	for (uint64_t i = 0; i < merges->arr_n && rc == ST_OK; i++) {
		size_t len;
		const char *s = gguf_arr_str(merges, i, &len);
		if (!s || len >= 65536) {
			ST_ERROR("the file's tokenizer is damaged", "%s: merge %llu is unreadable", g->path,
				 (unsigned long long)i);
			rc = ST_FAIL;
			break;
		}
		memcpy(buf, s, len);
		buf[len] = '\0';
		cJSON_AddItemToArray(mg, cJSON_CreateString(buf));
	}
	free(buf);
	char *text = rc == ST_OK ? cJSON_PrintUnformatted(root) : NULL;
	cJSON_Delete(root);
	if (rc == ST_OK && !text)
		rc = ST_FAIL;
	char path[4200];
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	if (rc == ST_OK)
		rc = fs_write_file_atomic(path, text, strlen(text));
	free(text);
	/* what strata wrote, strata must read: duplicate or empty tokens and
	 * merges of no two tokens are the file's damage, named here and not at
	 * the first prepare or sample */
	struct st_bpe *b = NULL;
	if (rc == ST_OK && bpe_load(&b, path) != ST_OK) {
		ST_ERROR("the file's tokenizer is damaged: convert the model again with a current "
			 "llama.cpp (convert_hf_to_gguf.py)",
			 "%s: the tokenizer built from its %llu tokenizer.ggml.tokens and %llu merges "
			 "does not load (the error above; the file it names was the import's own copy, "
			 "removed)",
			 g->path, (unsigned long long)tokens->arr_n, (unsigned long long)merges->arr_n);
		unlink(path);
		rc = ST_FAIL;
	}
	if (rc == ST_OK)
		rc = write_tokenizer_config(g, cfg, b, dir);
	if (rc == ST_OK)
		rc = write_generation_config(g, cfg, b, dir);
	bpe_free(b);
	return rc;
}

int gguf_import(const char *gguf_path, const char *dir, size_t shard_bytes, struct st_config *cfg_out)
{
	struct st_gguf g;
	ST_TRY(gguf_open(&g, gguf_path));
	struct st_config cfg;
	struct st_model m;
	memset(&m, 0, sizeof m);
	int rc = cfg_from_gguf(&cfg, &g);
	if (rc == ST_OK)
		rc = model_build(&m, &cfg);
	if (rc == ST_OK)
		rc = check_tensors(&m, &g);
	if (rc == ST_OK)
		rc = check_extra(&m, &g);
	struct import_ctx c = {.m = &m, .g = &g, .unit = -1};
	if (rc == ST_OK) {
		size_t unit_max = 0, param_max = 0;
		for (int u = 0; u < m.n_units; u++)
			unit_max = m.units[u].numel > unit_max ? m.units[u].numel : unit_max;
		for (int i = 0; i < m.n_params; i++)
			param_max = m.params[i].numel > param_max ? m.params[i].numel : param_max;
		c.buf = st_malloc(unit_max * sizeof(float));
		c.tmp = st_malloc(param_max * sizeof(float));
		rc = c.buf && c.tmp ? fs_mkdir_p(dir) : ST_FAIL;
	}
	/* config.json last: a directory an import failed in is not a model, and
	 * the next try needs no --force */
	if (rc == ST_OK)
		rc = model_save_weights_dir(&m, dir, shard_bytes, unit_get, unit_put, &c, NULL);
	if (rc == ST_OK && c.bad) {
		/* strata refuses to load such weights: refuse to write them */
		ST_ERROR("the file is damaged; convert the model again",
			 "%s: tensor %s holds %g at element %ld", gguf_path, c.bad, (double)c.bad_value,
			 c.bad_at);
		rc = ST_FAIL;
	}
	if (rc == ST_OK)
		rc = write_tokenizer(&g, dir, &cfg);
	char path[4200];
	snprintf(path, sizeof path, "%s/config.json", dir);
	if (rc == ST_OK)
		rc = config_save(&cfg, path);
	if (rc == ST_OK && cfg_out)
		*cfg_out = cfg;
	free(c.buf);
	free(c.tmp);
	model_free(&m);
	gguf_close(&g);
	return rc;
}
