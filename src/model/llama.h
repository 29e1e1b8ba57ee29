/* The LLaMA model: its parameter layout over units, and each unit's forward
 * and backward written once against the kernel table (ops/ops.h).
 *
 * Units, in execution order: embed, layer[0..L-1], head. A unit owns one
 * contiguous run of parameters (its W slab); each parameter has a descriptor
 * saying its Hugging Face name, shape, offset in the slab and role, and the
 * optimizer decides weight decay, GaLore or 8-bit state from the role, never
 * from a position. Model code receives plain pointers to a unit's slabs and
 * never knows in which tier they live (engine/ and store/ decide). */
#ifndef ST_LLAMA_H
#define ST_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "ops/ops.h"

enum st_param_role {
	ST_ROLE_EMBED,  /* token embedding (V,C) */
	ST_ROLE_NORM,   /* norm gains and biases (C) */
	ST_ROLE_ATTN,   /* q, k, v, o projections */
	ST_ROLE_MLP,    /* gate, up, down projections */
	ST_ROLE_LMHEAD, /* untied output projection (V,C) */
};

enum st_param_init {
	ST_INIT_NORMAL,  /* normal(0, initializer_range) */
	ST_INIT_XAVIER,  /* uniform(-a, a), a = sqrt(6 / (fan_in + fan_out)) */
	ST_INIT_ONES,
	ST_INIT_ZEROS,
};

struct st_param {
	char name[96];       /* Hugging Face name, e.g. model.layers.3.mlp.up_proj.weight */
	enum st_param_role role;
	enum st_param_init init;
	int unit;
	size_t offset;       /* in elements, within the unit's slab */
	int ndim;
	int64_t shape[2];    /* (out, in) for matrices, as HF stores them */
	size_t numel;
};

enum st_unit_kind { ST_UNIT_EMBED, ST_UNIT_LAYER, ST_UNIT_HEAD };

struct st_unit {
	enum st_unit_kind kind;
	int layer;           /* for ST_UNIT_LAYER */
	size_t numel;        /* elements in the unit's parameter slab */
	int first_param, n_params;
};

struct st_model {
	struct st_config cfg;
	int n_units;         /* n_layers + 2 */
	struct st_unit *units;
	int n_params;
	struct st_param *params;
	size_t numel;        /* all parameters (tied lm_head counted once) */
	size_t matmul_numel; /* parameters taking part in matmuls (incl. the head) */
	/* The linear layers' matmuls round their inputs to bf16 and sum in fp32
	 * (--matmul-precision bf16, set by session_matmul_precision before the
	 * activations are sized: their block then holds the workspace). */
	int matmul_bf16;
};

/* Bytes of the bf16 matmuls' workspace for passes over `rows` token rows:
 * both operands of the largest linear product, whole (within 64 MiB: a
 * larger product is computed in tiles), and at least ST_MATMUL_BF16_MIN_WS;
 * 0 where the model's matmuls are fp32. */
size_t model_matmul_ws_bytes(const struct st_model *m, size_t rows);

/* Indices of the layer's parameters within its unit, in slab order. */
enum { LP_ATTN_NORM, LP_WQ, LP_WK, LP_WV, LP_WO, LP_MLP_NORM, LP_WGATE, LP_WUP, LP_WDOWN, LP__COUNT };

int model_build(struct st_model *m, const struct st_config *cfg);
void model_free(struct st_model *m);
static inline int model_head_unit(const struct st_model *m) { return m->n_units - 1; }
const struct st_param *model_find_param(const struct st_model *m, const char *name);
/* Training FLOPs per token (forward + backward) at sequence length t: 6 per
 * matmul weight, plus causal attention (QK^T and PV, on average (t+1)/2 keys). */
double model_flops_per_token(const struct st_model *m, int t);
/* The forward's FLOPs per token of one unit (the training figure is 3x). */
double model_unit_fwd_flops(const struct st_model *m, int unit, int t);
/* Of those, the linear layers' (the matmuls --matmul-precision sets). */
double model_unit_linear_flops(const struct st_model *m, int unit);
/* Forward FLOPs per token of causal attention with h query heads of hd
 * (scores and weighted sum over, on average, (t+1)/2 keys); a layer's
 * share of model_unit_fwd_flops, and what profile.c times to measure
 * attention_gflops. */
double model_attention_flops(int h, int hd, int t);
/* Bytes per token that one unit's kernels other than matmuls and attention
 * read and write (norms, RoPE, SwiGLU, the residual copies and adds, the
 * embedding's gather and scatter, the loss over the logits), each tensor an
 * op reads or writes counted once: its forward (*fwd) and its backward
 * (*bwd). The planner prices them at the profile's elementwise_gbs, which
 * profile.c measures on the layer's own sequence of those kernels. */
void model_unit_ew_bytes(const struct st_model *m, int unit, double *fwd, double *bwd);
/* The same for a layer of config c (no model built): the profile's
 * reference layer. */
void model_layer_ew_bytes(const struct st_config *c, double *fwd, double *bwd);

/* Deterministic random init: normal(0, init_std) for matrices and the
 * embedding, 1 for norm gains; each parameter from its own seeded stream, so
 * the result does not depend on thread count or unit placement. */
void model_init_unit(const struct st_model *m, int unit, float *w, uint64_t seed);

/* Activations of one micro-batch of B sequences of T tokens. Saved tensors
 * are per layer (the A slabs); scratch is shared by all units. */
struct st_layer_acts {
	float *x;      /* (N,C) residual input of the layer */
	float *xn1;    /* (N,C) */
	float *rstd1;  /* (N) */
	float *q;      /* (N,H*hd) after RoPE */
	float *k, *v;  /* (N,Hkv*hd), k after RoPE */
	float *att;    /* (N,H*hd) attention output before o_proj */
	float *lse;    /* (B,H,T) */
	float *xmid;   /* (N,C) residual after attention */
	float *xn2;    /* (N,C) */
	float *rstd2;  /* (N) */
	float *gate, *up, *h; /* (N,F) */
};

/* A pass's bf16 matmul workspace (model.matmul_bf16; NULL: fp32 matmuls). */
struct st_mm {
	void *ws; /* model_matmul_ws_bytes, 64-byte aligned */
	size_t ws_bytes;
};

struct st_acts {
	int b, t;
	struct st_mm mm;
	float *emb;      /* (N,C) raw embedding rows (stable embedding only) */
	float *emb_mean, *emb_rstd; /* (N) */
	struct st_layer_acts *layers; /* L of them */
	float *x_final;  /* (N,C) output of the last layer */
	float *xf;       /* (N,C) after the final norm */
	float *rstd_f;   /* (N) */
	float *logits;   /* (N,V); holds dlogits after the loss */
	float *losses;   /* (N) */
	/* backward scratch */
	float *dx;       /* (N,C) gradient of the residual stream */
	float *dtmp;     /* (N,C) */
	float *dxn;      /* (N,C) */
	float *dq, *dk, *dv, *datt; /* (N,H*hd), (N,Hkv*hd) x2, (N,H*hd) */
	float *dh, *dgate, *dup;   /* (N,F) */
	float *rope_cos, *rope_sin; /* (T,hd/2) */
};

/* Floats of the saved activations of one layer (its A slab) and of the
 * head's block (final norm, logits, losses and the backward scratch shared by
 * all units), for micro-batches of b sequences of t tokens. */
size_t acts_layer_floats(const struct st_model *m, int b, int t);
size_t acts_rest_floats(const struct st_model *m, int b, int t);
/* A recomputed layer keeps only its input (N,C); the rest of its tensors live
 * in one scratch block of acts_layer_floats shared by all recomputed layers
 * and are rebuilt by re-running the layer's forward before its backward
 * (activation checkpointing). All the A slabs' floats with the first
 * n_recompute layers recomputed: */
size_t acts_input_floats(const struct st_model *m, int b, int t);
size_t acts_total_floats(const struct st_model *m, int b, int t, int n_recompute);
/* Point a's tensors into the given blocks (64-byte aligned, sized as above)
 * and fill the RoPE tables. */
int acts_bind(struct st_acts *a, const struct st_model *m, int b, int t, float *const *layer_blocks,
	      float *rest_block);
/* The same with the first n_recompute layers recomputed: their
 * layer_blocks hold acts_input_floats, and shared (acts_layer_floats) holds
 * the rest of whichever of them is being computed. */
int acts_bind_recompute(struct st_acts *a, const struct st_model *m, int b, int t,
			float *const *layer_blocks, float *rest_block, int n_recompute, float *shared);
/* The same with any set of recomputed layers (recomputed[l] != 0; NULL:
 * none). A NULL layer block leaves that layer unbound: the executor points
 * it at a staging slot with acts_point_layer before each use (a layer whose
 * activations are swapped out between its forward and its backward). */
int acts_bind_mask(struct st_acts *a, const struct st_model *m, int b, int t,
		   float *const *layer_blocks, float *rest_block, const unsigned char *recomputed,
		   float *shared);
/* Point layer l's tensors into block (acts_layer_floats, or with shared:
 * the input in block and the rest in shared). */
void acts_point_layer(struct st_acts *a, const struct st_model *m, int l, float *block, float *shared);
void acts_unbind(struct st_acts *a);

/* The stable embedding's LayerNorm epsilon: torch.nn.LayerNorm's default,
 * which bitsandbytes' StableEmbedding keeps (not config.json's
 * rms_norm_eps, which is the RMSNorms'). */
#define ST_EMBED_NORM_EPS 1e-5f

/* Unit passes. w/g point at the unit's W and G slabs; the head also receives
 * the embed unit's slabs (wte, dwte) because a tied head reads the embedding.
 * Backward passes accumulate (+=) into g. */
void llama_embed_forward(const struct st_ops *ops, const struct st_model *m, struct st_acts *a,
			 const float *w, const int32_t *tokens);
void llama_embed_backward(const struct st_ops *ops, const struct st_model *m,
			  struct st_acts *a, const float *w, float *g, const int32_t *tokens);
void llama_layer_forward(const struct st_ops *ops, const struct st_model *m, struct st_acts *a,
			 int l, const float *w);
void llama_layer_backward(const struct st_ops *ops, const struct st_model *m,
			  struct st_acts *a, int l, const float *w, float *g);
/* Final norm, logits, per-token losses; with dlogits_scale > 0 also the
 * gradient of sum(losses) * dlogits_scale w.r.t. the logits (in a->logits).
 * Returns the sum of the losses of rows with targets >= 0. */
double llama_head_forward(const struct st_ops *ops, const struct st_model *m,
			  struct st_acts *a, const float *w, const float *wte,
			  const int32_t *targets, float dlogits_scale);
void llama_head_backward(const struct st_ops *ops, const struct st_model *m,
			 struct st_acts *a, const float *w, const float *wte, float *g,
			 float *dwte);

/* A decoder's activations (engine/decode.h): one sequence, read in passes
 * of up to t_max new tokens, unit by unit, in chunks of up to `rows` tokens,
 * attending over each layer's key/value cache of t_max positions. Every
 * tensor but the caches lives in one scratch block. */
struct st_decode_acts {
	int rows, t_max;
	float *x;                         /* (t_max,C): the pass's residual streams */
	float *xn, *rstd;                 /* (rows,C), (rows) */
	float *emb, *emb_mean, *emb_rstd; /* stable embedding only: (rows,C), (rows) x2 */
	float *q, *att;                   /* (rows,H*hd) */
	float *gate, *up, *h;             /* (rows,F) */
	float *xf, *rstd_f;               /* (C), (1): the last row's final norm */
	float *logits;                    /* (V): the last row's */
	float *rope_cos, *rope_sin;       /* (t_max,hd/2) */
};

/* Floats of one layer's key/value cache (keys, then values, each
 * (t_max, Hkv*hd)) and of the scratch block. */
size_t decode_cache_floats(const struct st_model *m, int t_max);
size_t decode_rest_floats(const struct st_model *m, int rows, int t_max);
/* Point d's tensors into block (decode_rest_floats) and fill the RoPE tables. */
void decode_bind(struct st_decode_acts *d, const struct st_model *m, int rows, int t_max,
		 float *block);
/* Decoder passes over a chunk of n <= rows new tokens at positions
 * pos .. pos+n-1 (pos + n <= t_max), whose residual rows are x (n,C): the
 * embedding writes them; a layer writes the tokens' keys and values into its
 * cache's rows pos .. pos+n-1, attends over rows 0 .. pos+n-1 and updates
 * x; the head scores one row (x_last, the token sampling needs) into
 * d->logits. The kernels are the forward's, on fewer rows: the numbers
 * agree with exec_micro_step's to rounding. */
void llama_embed_decode(const struct st_ops *ops, const struct st_model *m,
			struct st_decode_acts *d, const float *w, const int32_t *tokens, int n,
			float *x);
void llama_layer_decode(const struct st_ops *ops, const struct st_model *m,
			struct st_decode_acts *d, int l, const float *w, float *cache, int pos,
			int n, float *x);
void llama_head_decode(const struct st_ops *ops, const struct st_model *m,
		       struct st_decode_acts *d, const float *w, const float *wte,
		       const float *x_last);

#endif
