/* Per-unit optimizer dispatch: walks the unit's parameters, chooses weight
 * decay from each descriptor's role, and calls the backend's update kernel on
 * the parameter's range of the weight, gradient and state slabs. */
#include <math.h>
#include <string.h>

#include "optim/optim.h"
#include "util/check.h"

int optim_parse_kind(enum st_optim_kind *k, const char *s)
{
	if (strcmp(s, "adamw") == 0)
		*k = ST_OPT_ADAMW;
	else if (strcmp(s, "sgd") == 0)
		*k = ST_OPT_SGD;
	else {
		ST_ERROR("use --optimizer adamw or --optimizer sgd", "unknown optimizer '%s'", s);
		return ST_FAIL;
	}
	return ST_OK;
}

const char *optim_kind_name(enum st_optim_kind k)
{
	return k == ST_OPT_ADAMW ? "adamw" : "sgd";
}

int optim_state_per_param(const struct st_optim_cfg *c)
{
	if (c->kind == ST_OPT_ADAMW)
		return 2;
	return c->momentum != 0.0f ? 1 : 0;
}

const char *optim_state_name(const struct st_optim_cfg *c, int i)
{
	if (c->kind == ST_OPT_ADAMW)
		return i == 0 ? "exp_avg" : "exp_avg_sq";
	return "momentum_buffer";
}

int optim_param_decays(const struct st_optim_cfg *c, const struct st_param *p)
{
	switch (p->role) {
	case ST_ROLE_NORM:
		return c->decay_norms;
	case ST_ROLE_EMBED:
		return c->decay_embed;
	default:
		return 1;
	}
}

void optim_step_unit(const struct st_ops *ops, const struct st_optim_cfg *c,
		     const struct st_model *m, int unit, float *w, const float *g, float *s,
		     long t, float lr, float grad_scale)
{
	const struct st_unit *u = &m->units[unit];
	const size_t n = u->numel;
	for (int i = u->first_param; i < u->first_param + u->n_params; i++) {
		const struct st_param *p = &m->params[i];
		const float wd = optim_param_decays(c, p) ? c->weight_decay : 0.0f;
		float *pw = w + p->offset;
		const float *pg = g + p->offset;
		if (c->kind == ST_OPT_ADAMW) {
			struct st_adamw_args a = {
				.lr = lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps,
				.weight_decay = wd, .grad_scale = grad_scale,
				.bc1 = (float)(1.0 - pow(c->beta1, (double)t)),
				.bc2 = (float)(1.0 - pow(c->beta2, (double)t)),
			};
			ops->adamw_step(pw, s + p->offset, s + n + p->offset, pg, p->numel, &a);
		} else {
			struct st_sgd_args a = {.lr = lr, .momentum = c->momentum,
						.weight_decay = wd, .grad_scale = grad_scale,
						.first_step = t == 1};
			ops->sgd_step(pw, c->momentum != 0.0f ? s + p->offset : NULL, pg, p->numel,
				      &a);
		}
	}
}
