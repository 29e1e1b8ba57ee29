/* Model configuration: presets (the GaLore paper's LLaMA sizes and small ones
 * for quick runs and tests), validation, and Hugging Face config.json. */
#include <cJSON.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/fsutil.h"
#include "io/tokenizer.h"
#include "model/config.h"
#include "util/check.h"

struct preset {
	const char *name;
	int dim, n_layers, n_heads, n_kv_heads, ffn_dim, max_seq;
};

/* 60m/130m/350m/1b are the GaLore paper's LLaMA configurations (Zhao et al.
 * 2024, Table 2 / Appendix); "tiny" and "small" are for quick CPU runs. */
static const struct preset presets[] = {
	{"tiny", 256, 4, 4, 4, 688, 256},
	{"small", 384, 6, 6, 6, 1024, 512},
	{"llama-60m", 512, 8, 8, 8, 1376, 1024},
	{"llama-130m", 768, 12, 12, 12, 2048, 1024},
	{"llama-350m", 1024, 24, 16, 16, 2736, 1024},
	{"llama-1b", 2048, 24, 32, 32, 5461, 2048},
	{"llama-7b", 4096, 32, 32, 32, 11008, 2048},
};

const char *config_preset_names(void)
{
	return "tiny, small, llama-60m, llama-130m, llama-350m, llama-1b, llama-7b";
}

static const struct preset *preset_find(const char *name)
{
	for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
		if (strcmp(presets[i].name, name) == 0)
			return &presets[i];
	return NULL;
}

int config_preset(struct st_config *cfg, const char *name)
{
	const struct preset *p = preset_find(name);
	ST_CHECK(p, "use a JSON config file or one of the presets", "unknown preset '%s' (presets: %s)",
		 name, config_preset_names());
	*cfg = (struct st_config){
		.vocab_size = ST_BYTE_VOCAB,
		.dim = p->dim,
		.n_layers = p->n_layers,
		.n_heads = p->n_heads,
		.n_kv_heads = p->n_kv_heads,
		.head_dim = p->dim / p->n_heads,
		.ffn_dim = p->ffn_dim,
		.max_seq = p->max_seq,
		.rope_theta = 10000.0,
		.norm_eps = 1e-6f,
		.tied = 0,
		.init_std = 0.02f,
		.bos_id = ST_BYTE_BOS,
		.eos_id = ST_BYTE_EOS,
	};
	return ST_OK;
}

int config_validate(const struct st_config *c)
{
	const char *hint = "fix the model config";
	ST_CHECK(c->vocab_size > 0, hint, "vocab_size must be positive (got %d)", c->vocab_size);
	ST_CHECK(c->dim > 0, hint, "hidden_size must be positive (got %d)", c->dim);
	ST_CHECK(c->n_layers > 0, hint, "num_hidden_layers must be positive (got %d)", c->n_layers);
	ST_CHECK(c->n_heads > 0, hint, "num_attention_heads must be positive (got %d)", c->n_heads);
	ST_CHECK(c->n_kv_heads > 0, hint, "num_key_value_heads must be positive (got %d)",
		 c->n_kv_heads);
	ST_CHECK(c->n_heads % c->n_kv_heads == 0, hint,
		 "num_key_value_heads (%d) must divide num_attention_heads (%d)", c->n_kv_heads,
		 c->n_heads);
	ST_CHECK(c->head_dim > 0 && c->head_dim % 2 == 0, hint,
		 "head_dim must be positive and even for RoPE (got %d)", c->head_dim);
	ST_CHECK(c->ffn_dim > 0, hint, "intermediate_size must be positive (got %d)", c->ffn_dim);
	/* 2 at least, as init's --max-seq: no --seq-len trains a shorter model */
	ST_CHECK(c->max_seq >= 2, hint, "max_position_embeddings must be at least 2 (got %d)",
		 c->max_seq);
	ST_CHECK(c->rope_theta > 0 && isfinite(c->rope_theta), hint,
		 "rope_theta must be positive and finite (got %g)", c->rope_theta);
	/* what config.json's reader takes (config_parse), so that no model is
	 * written (by import) that strata cannot then load */
	ST_CHECK(c->norm_eps >= FLT_MIN && c->norm_eps < 1, hint,
		 "rms_norm_eps must be in (0, 1) and no smaller than %g, the smallest normal float "
		 "(got %g)",
		 (double)FLT_MIN, c->norm_eps);
	/* before anything is sized by it: bookkeeping is allocated per layer */
	ST_CHECK(c->n_layers <= ST_MAX_LAYERS, hint,
		 "num_hidden_layers is %d; strata takes at most %d", c->n_layers, ST_MAX_LAYERS);
	/* int32 offsets in kernels: keep every weight matrix under 2^31 elements
	 * (the q and k/v projections are heads * head_dim by hidden_size) */
	const double qd = (double)c->n_heads * c->head_dim, kvd = (double)c->n_kv_heads * c->head_dim;
	ST_CHECK((double)c->vocab_size * c->dim < 2147483647.0 &&
			 (double)c->ffn_dim * c->dim < 2147483647.0 && qd * c->dim < 2147483647.0 &&
			 kvd * c->dim < 2147483647.0,
		 hint, "a weight matrix has more than 2^31 elements (vocab_size, intermediate_size "
		       "or num_attention_heads * head_dim, times hidden_size)");
	return ST_OK;
}

static int json_int_value(const cJSON *it, const char *key, int *out, const char *path)
{
	ST_CHECK(cJSON_IsNumber(it) && it->valuedouble == floor(it->valuedouble),
		 "fix the value in config.json", "%s: \"%s\" must be an integer", path, key);
	/* up to INT_MAX, as config_validate and init take it (this stopped
	 * below it: init wrote a model strata then refused) */
	ST_CHECK(fabs(it->valuedouble) <= 2147483647.0, "fix the value in config.json",
		 "%s: \"%s\" is %.0f, more than strata's sizes hold (at most 2^31 - 1)", path, key,
		 it->valuedouble);
	*out = (int)it->valuedouble;
	return ST_OK;
}

static int json_int(const cJSON *root, const char *key, int *out, int required, const char *path)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
	if (!it || cJSON_IsNull(it)) {
		ST_CHECK(!required, "a LLaMA config.json needs this key", "%s: missing \"%s\"", path,
			 key);
		return ST_OK;
	}
	return json_int_value(it, key, out, path);
}

static int json_num(const cJSON *root, const char *key, double *out, const char *path)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
	if (!it || cJSON_IsNull(it))
		return ST_OK;
	ST_CHECK(cJSON_IsNumber(it), "fix the value in config.json", "%s: \"%s\" must be a number",
		 path, key);
	*out = it->valuedouble;
	return ST_OK;
}

/* A JSON boolean; absent or null leaves *out as it is. 1, "true" and the
 * like are refused rather than read as false. */
static int json_bool(const cJSON *root, const char *key, int *out, const char *path)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
	if (!it || cJSON_IsNull(it))
		return ST_OK;
	ST_CHECK(cJSON_IsBool(it), "write true or false (no quotes) in config.json",
		 "%s: \"%s\" must be true or false", path, key);
	*out = cJSON_IsTrue(it);
	return ST_OK;
}

static int config_parse(struct st_config *cfg, const cJSON *root, const char *path)
{
	const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
	const int marked_stable = mt && cJSON_IsString(mt) &&
				  strcmp(mt->valuestring, ST_MODEL_TYPE_STABLE) == 0;
	ST_CHECK(!mt || cJSON_IsNull(mt) || cJSON_IsString(mt),
		 "write the architecture as a string: \"model_type\": \"llama\"",
		 "%s: model_type is not a string", path);
	if (mt && cJSON_IsString(mt))
		ST_CHECK(marked_stable || strcmp(mt->valuestring, "llama") == 0,
			 "strata trains LLaMA-architecture models (model_type \"llama\", or "
			 "\"" ST_MODEL_TYPE_STABLE "\" with the stable embedding)",
			 "%s: unsupported architecture model_type \"%s\"", path, mt->valuestring);
	*cfg = (struct st_config){.rope_theta = 10000.0, .norm_eps = 1e-6f, .init_std = 0.02f,
				  .max_seq = 2048, .bos_id = -1, .eos_id = -1, .head_dim = 0};
	ST_TRY(json_int(root, "vocab_size", &cfg->vocab_size, 1, path));
	ST_TRY(json_int(root, "hidden_size", &cfg->dim, 1, path));
	ST_TRY(json_int(root, "num_hidden_layers", &cfg->n_layers, 1, path));
	ST_TRY(json_int(root, "num_attention_heads", &cfg->n_heads, 1, path));
	cfg->n_kv_heads = cfg->n_heads;
	ST_TRY(json_int(root, "num_key_value_heads", &cfg->n_kv_heads, 0, path));
	ST_TRY(json_int(root, "intermediate_size", &cfg->ffn_dim, 1, path));
	ST_TRY(json_int(root, "max_position_embeddings", &cfg->max_seq, 0, path));
	ST_TRY(json_int(root, "head_dim", &cfg->head_dim, 0, path));
	if (cfg->head_dim == 0 && cfg->n_heads > 0) {
		/* HF derives head_dim = hidden_size / heads when it is not given */
		ST_CHECK(cfg->dim % cfg->n_heads == 0, "fix the model config",
			 "%s: num_attention_heads (%d) must divide hidden_size (%d)", path,
			 cfg->n_heads, cfg->dim);
		cfg->head_dim = cfg->dim / cfg->n_heads;
	}
	ST_TRY(json_int(root, "bos_token_id", &cfg->bos_id, 0, path));
	/* Llama 3.1 and later list several end tokens; the first is the one
	 * strata keeps (config_save writes it back as a single id) */
	const cJSON *eos = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
	if (eos && cJSON_IsArray(eos)) {
		ST_CHECK(cJSON_GetArraySize(eos) > 0, "fix the value in config.json",
			 "%s: \"eos_token_id\" is an empty list", path);
		ST_TRY(json_int_value(cJSON_GetArrayItem(eos, 0), "eos_token_id", &cfg->eos_id, path));
	} else
		ST_TRY(json_int(root, "eos_token_id", &cfg->eos_id, 0, path));
	/* rope_theta: top level (older files) or inside rope_parameters (newer) */
	ST_TRY(json_num(root, "rope_theta", &cfg->rope_theta, path));
	/* plain RoPE only: rope_parameters / rope_scaling absent, null, or of
	 * rope_type (older files: type) "default", which transformers treats as
	 * no scaling; llama3, yarn, linear, dynamic... are refused, not ignored */
	const char *keys[2] = {"rope_parameters", "rope_scaling"};
	const cJSON *rope = NULL; /* the one whose rope_theta counts */
	for (int k = 0; k < 2; k++) {
		const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, keys[k]);
		if (!o || cJSON_IsNull(o) || (cJSON_IsObject(o) && !o->child))
			continue; /* absent, null or {}: transformers reads none of them */
		rope = o;
		const cJSON *rt = cJSON_GetObjectItemCaseSensitive(o, "rope_type");
		if (!rt)
			rt = cJSON_GetObjectItemCaseSensitive(o, "type");
		const int plain = cJSON_IsObject(o) &&
				  ((!rt && k == 0) || (cJSON_IsString(rt) && !strcmp(rt->valuestring, "default")));
		ST_CHECK(plain, "only plain RoPE is supported for now (rope_type \"default\")",
			 "%s: %s with rope_type %s is not supported", path, keys[k],
			 cJSON_IsString(rt) ? rt->valuestring : rt ? "(not a string)" : "(none)");
	}
	/* transformers 5 (checked with 5.24) takes a rope_scaling over
	 * rope_parameters whole: the theta is the one it holds, else the top
	 * level's, else 10000, whatever rope_parameters says (strata took
	 * rope_parameters' over the top level's there) */
	if (rope)
		ST_TRY(json_num(rope, "rope_theta", &cfg->rope_theta, path));
	double eps = cfg->norm_eps, std = cfg->init_std;
	ST_TRY(json_num(root, "rms_norm_eps", &eps, path));
	ST_TRY(json_num(root, "initializer_range", &std, path));
	/* checked as read: 1e300 would become inf as a float, 1e-50 zero */
	ST_CHECK(isfinite(eps) && eps > 0 && eps < 1, "fix the value in config.json",
		 "%s: \"rms_norm_eps\" must be in (0, 1) (got %g)", path, eps);
	ST_CHECK((float)eps >= FLT_MIN, "fix the value in config.json",
		 "%s: \"rms_norm_eps\" %g is below the smallest normal float (%g)", path, eps,
		 (double)FLT_MIN);
	ST_CHECK(isfinite(std) && std >= 0 && std < 1e6, "fix the value in config.json",
		 "%s: \"initializer_range\" must be in [0, 1e6) (got %g)", path, std);
	cfg->norm_eps = (float)eps;
	cfg->init_std = (float)std;
	ST_TRY(json_bool(root, "tie_word_embeddings", &cfg->tied, path));
	ST_TRY(json_bool(root, "stable_embedding", &cfg->stable_embedding, path));
	ST_CHECK(!marked_stable || cfg->stable_embedding,
		 "set \"stable_embedding\": true, or model_type \"llama\" for a model without it",
		 "%s: model_type \"" ST_MODEL_TYPE_STABLE "\" marks a model with the stable "
		 "embedding, but \"stable_embedding\" is not true",
		 path);
	const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
	ST_CHECK(!act || cJSON_IsNull(act) || cJSON_IsString(act), "fix the value in config.json",
		 "%s: \"hidden_act\" must be a string", path);
	/* "swish" is transformers' other name for SiLU (ACT2FN maps both) */
	ST_CHECK(!act || !cJSON_IsString(act) || strcmp(act->valuestring, "silu") == 0 ||
			 strcmp(act->valuestring, "swish") == 0,
		 "LLaMA uses SwiGLU (hidden_act \"silu\")", "%s: unsupported hidden_act \"%s\"", path,
		 act->valuestring);
	/* Hugging Face's LLaMA can carry biases; strata's has none, and would
	 * otherwise run another model than the one the file describes */
	static const char *const biases[] = {"attention_bias", "mlp_bias"};
	for (int i = 0; i < 2; i++) {
		int on = 0;
		ST_TRY(json_bool(root, biases[i], &on, path));
		ST_CHECK(!on, "strata's LLaMA has no bias terms; use a model without them",
			 "%s: \"%s\" is true, which strata does not support", path, biases[i]);
	}
	return ST_OK;
}

int config_load(struct st_config *cfg, const char *path)
{
	cJSON *root;
	ST_TRY(fs_read_json(path, &root, "check the file is a JSON object"));
	int rc = config_parse(cfg, root, path);
	cJSON_Delete(root);
	if (rc != ST_OK)
		return rc;
	if (config_validate(cfg) != ST_OK) {
		ST_ERROR(NULL, "in %s", path); /* the rule broken is said above */
		return ST_FAIL;
	}
	return ST_OK;
}

int config_resolve(struct st_config *cfg, const char *preset_or_path)
{
	if (fs_exists(preset_or_path)) {
		if (!fs_is_dir(preset_or_path))
			return config_load(cfg, preset_or_path);
		char p[4096];
		snprintf(p, sizeof p, "%s/config.json", preset_or_path);
		if (fs_exists(p)) {
			if (preset_find(preset_or_path))
				st_log_info("%s is a directory here: using its config.json, not the preset "
					    "%s (run from another directory for the preset)",
					    preset_or_path, preset_or_path);
			return config_load(cfg, p);
		}
		/* a directory that happens to share a preset's name (an --out of
		 * an earlier run, say) does not hide the preset */
		if (preset_find(preset_or_path)) {
			st_log_info("%s is a directory with no config.json: using the preset %s",
				    preset_or_path, preset_or_path);
			ST_TRY(config_preset(cfg, preset_or_path));
			return config_validate(cfg);
		}
		ST_ERROR("give a config.json, a model directory holding one, or a preset",
			 "the directory %s holds no config.json (presets: %s)", preset_or_path,
			 config_preset_names());
		return ST_FAIL;
	}
	if (strchr(preset_or_path, '/') || strstr(preset_or_path, ".json")) {
		ST_ERROR("give an existing config file or a preset name", "config file %s not found",
			 preset_or_path);
		return ST_FAIL;
	}
	ST_TRY(config_preset(cfg, preset_or_path));
	return config_validate(cfg);
}

/* A float as the shortest decimal that reads back as the same float: 1e-06,
 * not the double 9.99999997475243e-07 that cJSON would print. */
static double float_decimal(float f)
{
	char buf[32];
	for (int prec = 1; prec < 9; prec++) {
		snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
		if ((float)strtod(buf, NULL) == f)
			return strtod(buf, NULL);
	}
	return (double)f;
}

/* The source config.json's keys a save does not carry over: those strata
 * writes itself (added first, so they are found in r), and those that
 * describe what the save changes: the weights' dtype (strata writes fp32),
 * their quantization, the RoPE blocks whose theta strata writes at the
 * top level (only plain RoPE is read), custom code the checkpoint does not
 * hold (auto_map names modeling files that are not copied), and the
 * source's provenance (its transformers version, its name or path). */
static const char *const replaced_keys[] = {
	"dtype", "torch_dtype", "quantization_config", "rope_parameters", "rope_scaling",
	"rope_theta", "bos_token_id", "eos_token_id", "stable_embedding", "auto_map",
	"transformers_version", "_name_or_path"};

/* base's keys that r has not, copied to the end of r; base's list of end
 * tokens kept where its first is r's one id (Llama 3.1 lists several:
 * strata reads the first). */
static int carry_keys(cJSON *r, const char *base)
{
	cJSON *b = cJSON_Parse(base);
	if (!b || !cJSON_IsObject(b)) {
		cJSON_Delete(b);
		return ST_OK; /* nothing readable to carry: strata's keys alone */
	}
	int rc = ST_OK;
	for (const cJSON *it = b->child; it && rc == ST_OK; it = it->next) {
		int skip = !it->string || cJSON_GetObjectItemCaseSensitive(r, it->string) != NULL;
		for (size_t k = 0; !skip && k < sizeof replaced_keys / sizeof *replaced_keys; k++)
			skip = !strcmp(it->string, replaced_keys[k]);
		cJSON *copy = skip ? NULL : cJSON_Duplicate(it, 1);
		if (!skip && (!copy || !cJSON_AddItemToObject(r, it->string, copy)))
			rc = ST_FAIL;
	}
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(b, "eos_token_id");
	const cJSON *one = cJSON_GetObjectItemCaseSensitive(r, "eos_token_id");
	if (rc == ST_OK && cJSON_IsArray(list) && cJSON_IsNumber(one) &&
	    cJSON_IsNumber(cJSON_GetArrayItem(list, 0)) &&
	    cJSON_GetArrayItem(list, 0)->valuedouble == one->valuedouble) {
		cJSON *copy = cJSON_Duplicate(list, 1);
		if (!copy || !cJSON_ReplaceItemInObjectCaseSensitive(r, "eos_token_id", copy))
			rc = ST_FAIL;
	}
	cJSON_Delete(b);
	if (rc != ST_OK)
		ST_ERROR(NULL, "out of memory carrying config.json's keys");
	return rc;
}

int config_save(const struct st_config *c, const char *path)
{
	return config_save_with(c, path, NULL);
}

int config_save_with(const struct st_config *c, const char *path, const char *base)
{
	cJSON *r = cJSON_CreateObject();
	/* A model with the stable embedding is not a LLaMA to other readers:
	 * transformers would load it as one, drop the layer norm it does not
	 * know, and run a different model without an error. Its own model_type
	 * makes them refuse it instead. */
	cJSON *arch = cJSON_AddArrayToObject(r, "architectures");
	cJSON_AddItemToArray(arch, cJSON_CreateString(c->stable_embedding ? ST_ARCH_STABLE
									  : "LlamaForCausalLM"));
	cJSON_AddStringToObject(r, "model_type", c->stable_embedding ? ST_MODEL_TYPE_STABLE : "llama");
	cJSON_AddNumberToObject(r, "vocab_size", c->vocab_size);
	cJSON_AddNumberToObject(r, "hidden_size", c->dim);
	cJSON_AddNumberToObject(r, "intermediate_size", c->ffn_dim);
	cJSON_AddNumberToObject(r, "num_hidden_layers", c->n_layers);
	cJSON_AddNumberToObject(r, "num_attention_heads", c->n_heads);
	cJSON_AddNumberToObject(r, "num_key_value_heads", c->n_kv_heads);
	cJSON_AddNumberToObject(r, "head_dim", c->head_dim);
	cJSON_AddNumberToObject(r, "max_position_embeddings", c->max_seq);
	/* exactly: cJSON prints 15 digits where they read back within an ulp, and
	 * a resumed run took a rope_theta one ulp off the one it trained with */
	json_add_exact(r, "rope_theta", c->rope_theta);
	cJSON_AddNumberToObject(r, "rms_norm_eps", float_decimal(c->norm_eps));
	cJSON_AddNumberToObject(r, "initializer_range", float_decimal(c->init_std));
	cJSON_AddBoolToObject(r, "tie_word_embeddings", c->tied);
	cJSON_AddStringToObject(r, "hidden_act", "silu");
	cJSON_AddBoolToObject(r, "attention_bias", 0);
	cJSON_AddBoolToObject(r, "mlp_bias", 0);
	/* ids outside the vocabulary (a preset's byte-tokenizer ids under a
	 * smaller --vocab) name no token: left out */
	if (c->bos_id >= 0 && c->bos_id < c->vocab_size)
		cJSON_AddNumberToObject(r, "bos_token_id", c->bos_id);
	if (c->eos_id >= 0 && c->eos_id < c->vocab_size)
		cJSON_AddNumberToObject(r, "eos_token_id", c->eos_id);
	cJSON_AddStringToObject(r, "torch_dtype", "float32");
	if (c->stable_embedding)
		cJSON_AddBoolToObject(r, "stable_embedding", 1);
	if (base && carry_keys(r, base) != ST_OK) {
		cJSON_Delete(r);
		return ST_FAIL;
	}
	char *text = cJSON_Print(r);
	cJSON_Delete(r);
	if (!text) {
		ST_ERROR(NULL, "out of memory formatting %s", path);
		return ST_FAIL;
	}
	size_t len = strlen(text);
	text[len] = '\0';
	int rc = fs_write_file_atomic(path, text, len);
	free(text);
	return rc;
}
