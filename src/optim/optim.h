/* Optimizers: each works on the flat slabs of one unit (weights, gradients,
 * state) through the kernel table, so it runs on either backend and the
 * engine may call it per unit as soon as that unit's gradient is complete.
 *
 * Which parameters get weight decay is a property of the parameter's role:
 * matrices (attention, MLP, untied lm_head) always; norm gains and the token
 * embedding only when asked (decay_norms / decay_embed). */
#ifndef ST_OPTIM_H
#define ST_OPTIM_H

#include <stddef.h>

#include "model/llama.h"
#include "ops/ops.h"

enum st_optim_kind { ST_OPT_ADAMW, ST_OPT_SGD };

struct st_optim_cfg {
	enum st_optim_kind kind;
	float beta1, beta2, eps;  /* AdamW */
	float momentum;           /* SGD; 0 = plain SGD, no state */
	float weight_decay;
	int decay_norms, decay_embed;
};

/* Parse "adamw" / "sgd"; ST_FAIL with the list when unknown. */
int optim_parse_kind(enum st_optim_kind *k, const char *s);
const char *optim_kind_name(enum st_optim_kind k);
/* Elements of optimizer state per parameter element (AdamW 2: m, v). */
int optim_state_per_param(const struct st_optim_cfg *c);
/* Names of the state tensors (for checkpoints), e.g. {"exp_avg","exp_avg_sq"}. */
const char *optim_state_name(const struct st_optim_cfg *c, int i);
int optim_param_decays(const struct st_optim_cfg *c, const struct st_param *p);

/* One update of every parameter of `unit`: w (unit slab), g (its gradient),
 * s (state slab: optim_state_per_param() consecutive arrays of the unit's
 * numel), at 1-based step t with learning rate lr, gradients multiplied by
 * grad_scale first (global-norm clipping). */
void optim_step_unit(const struct st_ops *ops, const struct st_optim_cfg *c,
		     const struct st_model *m, int unit, float *w, const float *g, float *s,
		     long t, float lr, float grad_scale);

#endif
