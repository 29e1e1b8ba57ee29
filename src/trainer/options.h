/* Training options: one table drives the command-line flags (--micro-batch 8),
 * the JSON config file (same keys: {"micro-batch": 8}), --help, and the copy
 * saved in every checkpoint's trainer.json. */
#ifndef ST_OPTIONS_H
#define ST_OPTIONS_H

#include <stdio.h>

#define ST_PATH 1024

struct st_train_opts {
	char model[ST_PATH];     /* HF model directory (from strata init) */
	char data[ST_PATH];      /* prepared data dir (train.bin, val.bin) or a train shard */
	char val[ST_PATH];       /* validation shard (default: val.bin beside the data) */
	char out[ST_PATH];       /* run directory: checkpoints and metrics.jsonl */
	char resume[ST_PATH];    /* checkpoint dir, or a run dir (its latest checkpoint) */
	char optimizer[24];
	int micro_batch, seq_len, grad_accum;
	double lr, min_lr_ratio;
	long warmup;
	char schedule[24];       /* "cosine" | "linear" | "wsd" | "constant" */
	double decay_frac;       /* wsd: the share of the steps after warmup that decay */
	double weight_decay, grad_clip, beta1, beta2, eps, momentum;
	int quant_block;
	long quant_min_size;
	int max_skipped_steps;
	double galore_rank, galore_scale;
	int galore_update_gap;
	int galore_start_spread;
	int galore_per_layer;
	char galore_proj[16];    /* "randomized" | "svd" */
	char galore_moments[8];  /* "keep" | "rotate" */
	int decay_norms, decay_embed;
	long steps;
	double max_tokens;       /* token budget; sets steps when steps is 0 */
	long eval_interval, eval_tokens, ckpt_interval;
	int keep_ckpts;
	long seed;
	int threads;
	int log_interval;
	char device[8];          /* "cpu" | "cuda" | "auto" */
	char matmul_precision[16]; /* "fp32" | "bf16": the linear layers' matmuls */
	char progress[8];        /* "auto" | "bar" | "lines" | "none" */
	/* tiers and offload (engine/place.h, store/) */
	char device_mem[24], host_mem[24]; /* byte budgets: "2G", "auto" */
	char offload_dir[ST_PATH];         /* comma-separated directories, one per SSD */
	char place[96];                    /* "auto" or KIND=TIER,... */
	int prefetch;
	char io_block[16];
	int io_depth;
	char shard_size[24];               /* checkpoints: weight files above it are sharded */
	char trace[ST_PATH];               /* Chrome/Perfetto trace of every queue ("" = none) */
	char recompute[8];                 /* layers whose activations are recomputed: N, all, auto */
	char activations[256];             /* per-layer activation policy (engine/plan.h) or auto */
	char device_updates[16];           /* units updated on the device: N or auto */
	char profile[ST_PATH];             /* hardware profile file ("" = the per-user cache) */
	int trace_steps;
	/* not an option (never saved): --offload-dir was given on this command
	 * line, so a refused directory is not one a resume kept */
	int offload_dir_given;
	/* not an option: --place was given on this command line or its
	 * --config, so a placement refused on resume is not the run's saved one */
	int place_given;
	int device_updates_given; /* the same for --device-updates */
	/* not an option: --warmup was given on this command line or in its
	 * --config, so a resume does not keep the run's own warmup */
	int warmup_given;
};

enum st_opt_type { OT_INT, OT_LONG, OT_DOUBLE, OT_STR, OT_BOOL };

struct st_opt_desc {
	const char *key;
	enum st_opt_type type;
	size_t offset, size;
	const char *defval;
	const char *help;
};

extern const struct st_opt_desc train_opt_table[];
extern const int train_opt_count;

void train_opts_defaults(struct st_train_opts *o);
/* Set one option from its text value; errors name the key and the value. */
int train_opts_set(struct st_train_opts *o, const char *key, const char *value);
/* 1 for a known option that is not a boolean (a bare --flag sets those to
 * true): given bare, it lacks its value. */
int train_opts_needs_value(const char *key);
/* A boolean as options and flags spell it: 1 for 1/true/yes, 0 for
 * 0/false/no, -1 for anything else. */
int train_opts_bool(const char *v);
/* Apply a JSON object of options (file contents) — unknown keys are errors. */
int train_opts_load_json(struct st_train_opts *o, const char *path);
struct cJSON;
/* Every option as a JSON object (for trainer.json), each number as it reads
 * back exactly; caller deletes. */
struct cJSON *train_opts_to_cjson(const struct st_train_opts *o);
/* The same as text; caller frees. */
char *train_opts_to_json(const struct st_train_opts *o);
/* Apply options from a parsed trainer.json object (cJSON *) */
int train_opts_from_cjson(struct st_train_opts *o, const struct cJSON *obj, const char *where);
int train_opts_validate(const struct st_train_opts *o);
void train_opts_help(FILE *f);

#endif
