/* LLaMA model configuration: presets, validation, and config.json in the
 * Hugging Face layout (LlamaForCausalLM). */
#ifndef ST_CONFIG_H
#define ST_CONFIG_H

struct st_config {
	int vocab_size;
	int dim;          /* hidden_size */
	int n_layers;     /* num_hidden_layers */
	int n_heads;      /* num_attention_heads */
	int n_kv_heads;   /* num_key_value_heads (GQA); = n_heads when absent */
	int head_dim;     /* dim / n_heads unless given */
	int ffn_dim;      /* intermediate_size */
	int max_seq;      /* max_position_embeddings */
	double rope_theta;
	float norm_eps;   /* rms_norm_eps */
	int tied;         /* tie_word_embeddings */
	float init_std;   /* initializer_range */
	int bos_id, eos_id;
	/* strata extension (config.json "stable_embedding"): LayerNorm after the
	 * token embedding and Xavier-uniform embedding init (Dettmers et al. 2021,
	 * section 2.3), for 8-bit optimizer stability */
	int stable_embedding;
};

/* config.json of a model with the stable embedding: its own model_type and
 * architecture, so that readers that only know LLaMA refuse it (strata
 * reads both, and "llama" with "stable_embedding": true as written before) */
#define ST_MODEL_TYPE_STABLE "strata_llama"
#define ST_ARCH_STABLE "StrataLlamaForCausalLM"

/* More layers than this is taken for a damaged file (the largest LLaMA has 126). */
#define ST_MAX_LAYERS 4096

/* Fill cfg from a preset name ("tiny", "llama-60m", "llama-130m", ...);
 * ST_FAIL with the list of presets when unknown. */
int config_preset(struct st_config *cfg, const char *name);
/* Comma-separated list of preset names, for --help. */
const char *config_preset_names(void);
/* Check sizes are possible (positive, heads divide dim, kv heads divide heads,
 * head_dim even for RoPE, ...); every problem reported with its field name. */
int config_validate(const struct st_config *cfg);
/* Read a HF config.json (rope_theta at top level or in rope_parameters,
 * num_key_value_heads defaulting to num_attention_heads, head_dim optional). */
int config_load(struct st_config *cfg, const char *path);
/* Load a preset name or a JSON file path. */
int config_resolve(struct st_config *cfg, const char *preset_or_path);
/* Write config.json (HF layout) atomically. */
int config_save(const struct st_config *cfg, const char *path);
/* The same, carrying over the keys of base (a config.json's text, or NULL)
 * that strata neither reads nor changes: pad_token_id, use_cache,
 * attention_dropout, a list of end tokens whose first is cfg's, ... A base
 * that does not parse carries nothing. */
int config_save_with(const struct st_config *cfg, const char *path, const char *base);

#endif
