/* Optimizers: each works on the flat slabs of one unit (weights, gradients,
 * state) through the kernel table, so it runs on either backend and the
 * engine may call it per unit as soon as that unit's gradient is complete.
 *
 * Per-parameter decisions come from the parameter's descriptor (its role and
 * size), never from its position in a list:
 *   - weight decay: matrices (attention, MLP, untied lm_head) always; norm
 *     gains/biases and the token embedding only when asked;
 *   - 8-bit state (adamw8bit, sgd8bit; Dettmers et al. 2021): block-wise
 *     dynamic quantization, except tensors under quant_min_numel elements
 *     (4096 by default, as bitsandbytes) and the token embedding, which keep
 *     fp32 state (the paper pairs 8-bit optimizers with a 32-bit-state
 *     embedding, section 2.3);
 *   - GaLore (galore-adamw, galore-adamw8bit; Zhao et al. 2024, galore.c):
 *     attention and MLP matrices keep AdamW state for their projected
 *     gradient plus a projector; every other parameter uses the plain
 *     optimizer (adamw or adamw8bit). */
#ifndef ST_OPTIM_H
#define ST_OPTIM_H

#include <stddef.h>

#include "io/safetensors.h"
#include "model/llama.h"
#include "ops/ops.h"

enum st_optim_kind {
	ST_OPT_ADAMW,
	ST_OPT_SGD,
	ST_OPT_ADAMW8,
	ST_OPT_SGD8,
	ST_OPT_GALORE_ADAMW,
	ST_OPT_GALORE_ADAMW8,
};

/* GaLore projector computation (optim/galore_proj.h) */
enum st_galore_proj { ST_GALORE_SVD, ST_GALORE_RANDOMIZED };

struct st_optim_cfg {
	enum st_optim_kind kind;
	float beta1, beta2, eps;  /* AdamW */
	float momentum;           /* SGD; 0 = plain SGD, no state */
	float weight_decay;
	int decay_norms, decay_embed;
	int quant_block;          /* elements per absmax block (256, as bitsandbytes) */
	long quant_min_numel;     /* smaller tensors keep fp32 state (4096) */
	/* GaLore */
	double galore_rank;       /* >= 1: the rank; in (0, 1): a fraction of the hidden size */
	int galore_gap;           /* T: steps between projector refreshes (200) */
	float galore_scale;       /* alpha: the projected-back update's scale (0.25) */
	enum st_galore_proj galore_proj;
	int galore_rotate;        /* on refresh, rotate moments into the new subspace */
	int galore_spread;        /* first projectors spread over this many updates (8; 0 as 1) */
	uint64_t seed;            /* for the randomized projector */
};

/* Where one parameter's state lives in its unit's S slab (byte offsets). */
struct st_pstate {
	int n_states;        /* AdamW 2 (m, v); SGD with momentum 1; plain SGD 0 */
	int q8;              /* 8-bit block-wise codes instead of fp32 */
	size_t n_blocks;     /* absmax entries per state (q8) */
	size_t off[2];       /* fp32 array, or uint8 codes (q8) */
	size_t absmax_off[2];/* fp32 absmax per block (q8) */
	size_t state_numel;  /* elements per state array: numel, or the projected R's */
	/* GaLore (galore != 0): W is rows x cols (m x n). right (m >= n): P is
	 * (r, n) and R = G P^T is (m, r); left: P is (m, r) and R = P^T G is
	 * (r, n). The moments are R-shaped. The first projector comes at update
	 * start (staggered over the first galore_spread updates; not updated
	 * before), then refreshed whenever (t - 1) % gap == phase (phases
	 * staggered across parameters). */
	int galore, rows, cols, rank, right, full, phase, start;
	size_t proj_off;     /* fp32 P */
};

struct st_optim {
	struct st_optim_cfg cfg;
	const struct st_model *m;
	struct st_pstate *ps;  /* one per model parameter */
	size_t *unit_bytes;    /* S slab size of each unit */
	size_t total_bytes;
	float map_signed[256], map_unsigned[256]; /* dynamic quantization maps */
	/* GaLore scratch (one step at a time): R, N (max R size), the previous
	 * P, the rotation, and the projector's workspace */
	float *g_r, *g_n, *g_pold, *g_rot;
	void *g_work;
	/* the first GaLore matrix whose projector was due at a zero gradient
	 * (-1: none), set by the optimizer's thread, said by the trainer */
	int *g_zero_first;
	size_t galore_weights; /* elements of the matrices under GaLore */
};

/* The most state tensors one parameter has (GaLore 8-bit: the projector and
 * two moments of codes + absmax). */
#define ST_STATE_TENSORS_MAX 6

/* One tensor of optimizer state, as saved in checkpoints. */
struct st_state_tensor {
	char suffix[32];      /* "exp_avg", "exp_avg.codes", "exp_avg.absmax", ... */
	enum st_dtype dtype;  /* F32 or U8 */
	int ndim;
	int64_t shape[2];
	size_t off, bytes;    /* in the unit's S slab */
};

/* Parse "adamw" / "sgd" / "adamw8bit" / "sgd8bit" / "galore-adamw" /
 * "galore-adamw8bit"; ST_FAIL with the list. */
int optim_parse_kind(enum st_optim_kind *k, const char *s);
const char *optim_kind_name(enum st_optim_kind k);
/* adamw8bit, sgd8bit, galore-adamw8bit: the kinds --quant-block and
 * --quant-min-size apply to */
int optim_kind_is_8bit(enum st_optim_kind k);
/* 1 when block is a valid --quant-block: a power of two in [16, 65536]. */
int optim_quant_block_ok(int block);
int optim_param_decays(const struct st_optim_cfg *c, const struct st_param *p);

/* Lay out every parameter's state; fails on impossible settings. */
int optim_init(struct st_optim *o, const struct st_optim_cfg *c, const struct st_model *m);
void optim_free(struct st_optim *o);
/* Fill out[] with parameter i's state tensors; returns how many. */
int optim_state_tensors(const struct st_optim *o, int i,
			struct st_state_tensor out[ST_STATE_TENSORS_MAX]);
/* State k (0, 1) of a parameter: its name in checkpoints ("exp_avg",
 * "exp_avg_sq", or SGD's "momentum_buffer"), and the map its 8-bit codes
 * use (signed for the first moment and SGD's momentum, unsigned for v). */
const char *optim_moment_name(const struct st_optim *o, int k);
const float *optim_moment_map(const struct st_optim *o, int k);
/* Bytes of parameter i's state as saved (no alignment padding). */
size_t optim_param_state_bytes(const struct st_optim *o, int i);

/* One update of every parameter of `unit`: w (unit weights), g (gradient),
 * s (the unit's S slab, laid out by optim_init), at 1-based update count t,
 * learning rate lr, gradients multiplied by grad_scale first (clipping). */
void optim_step_unit(const struct st_ops *ops, const struct st_optim *o, int unit, float *w,
		     const float *g, void *s, long t, float lr, float grad_scale);
/* The same for parameter i alone: w and g point at its own elements, s is
 * its unit's S slab. */
void optim_step_param(const struct st_ops *ops, const struct st_optim *o, int i, float *w,
		      const float *g, void *s, long t, float lr, float grad_scale);

#endif
