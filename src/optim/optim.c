/* Per-unit optimizer dispatch and state layout; see optim.h. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"
#include "optim/quantmap.h"
#include "util/check.h"

static const struct {
	const char *name;
	enum st_optim_kind kind;
} kinds[] = {{"adamw", ST_OPT_ADAMW}, {"sgd", ST_OPT_SGD}, {"adamw8bit", ST_OPT_ADAMW8},
	     {"sgd8bit", ST_OPT_SGD8}};

int optim_parse_kind(enum st_optim_kind *k, const char *s)
{
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		if (!strcmp(s, kinds[i].name)) {
			*k = kinds[i].kind;
			return ST_OK;
		}
	ST_ERROR("use --optimizer adamw, sgd, adamw8bit or sgd8bit", "unknown optimizer '%s'", s);
	return ST_FAIL;
}

const char *optim_kind_name(enum st_optim_kind k)
{
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		if (kinds[i].kind == k)
			return kinds[i].name;
	return "?";
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

static int is_adam(enum st_optim_kind k) { return k == ST_OPT_ADAMW || k == ST_OPT_ADAMW8; }
static int is_8bit(enum st_optim_kind k) { return k == ST_OPT_ADAMW8 || k == ST_OPT_SGD8; }

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

int optim_init(struct st_optim *o, const struct st_optim_cfg *c, const struct st_model *m)
{
	memset(o, 0, sizeof *o);
	o->cfg = *c;
	o->m = m;
	if (is_8bit(c->kind))
		ST_CHECK(c->quant_block >= 16 && c->quant_block <= 65536 &&
				 (c->quant_block & (c->quant_block - 1)) == 0,
			 "use a power of two such as 256", "--quant-block must be a power of two in [16, 65536] (got %d)",
			 c->quant_block);
	o->ps = st_calloc((size_t)m->n_params, sizeof *o->ps);
	o->unit_bytes = st_calloc((size_t)m->n_units, sizeof *o->unit_bytes);
	if (!o->ps || !o->unit_bytes)
		return ST_FAIL;
	quantmap_dynamic(o->map_signed, 1);
	quantmap_dynamic(o->map_unsigned, 0);
	const int n_states = is_adam(c->kind) ? 2 : c->momentum != 0.0f ? 1 : 0;
	for (int i = 0; i < m->n_params; i++) {
		const struct st_param *p = &m->params[i];
		struct st_pstate *ps = &o->ps[i];
		size_t *cur = &o->unit_bytes[p->unit];
		ps->n_states = n_states;
		ps->q8 = is_8bit(c->kind) && (long)p->numel >= c->quant_min_numel &&
			 p->role != ST_ROLE_EMBED;
		ps->n_blocks = ps->q8 ? (p->numel + (size_t)c->quant_block - 1) / (size_t)c->quant_block : 0;
		for (int k = 0; k < n_states; k++) {
			ps->off[k] = *cur;
			*cur = align64(*cur + p->numel * (ps->q8 ? 1 : sizeof(float)));
			if (ps->q8) {
				ps->absmax_off[k] = *cur;
				*cur = align64(*cur + ps->n_blocks * sizeof(float));
			}
		}
	}
	for (int u = 0; u < m->n_units; u++)
		o->total_bytes += o->unit_bytes[u];
	return ST_OK;
}

void optim_free(struct st_optim *o)
{
	free(o->ps);
	free(o->unit_bytes);
	memset(o, 0, sizeof *o);
}

int optim_state_tensors(const struct st_optim *o, int i, struct st_state_tensor out[4])
{
	const struct st_param *p = &o->m->params[i];
	const struct st_pstate *ps = &o->ps[i];
	int n = 0;
	for (int k = 0; k < ps->n_states; k++) {
		const char *base = is_adam(o->cfg.kind) ? (k == 0 ? "exp_avg" : "exp_avg_sq")
							: "momentum_buffer";
		struct st_state_tensor *t = &out[n++];
		snprintf(t->suffix, sizeof t->suffix, "%s%s", base, ps->q8 ? ".codes" : "");
		t->dtype = ps->q8 ? ST_DT_U8 : ST_DT_F32;
		t->ndim = p->ndim;
		t->shape[0] = p->shape[0];
		t->shape[1] = p->shape[1];
		t->off = ps->off[k];
		t->bytes = p->numel * (ps->q8 ? 1 : sizeof(float));
		if (ps->q8) {
			t = &out[n++];
			snprintf(t->suffix, sizeof t->suffix, "%s.absmax", base);
			t->dtype = ST_DT_F32;
			t->ndim = 1;
			t->shape[0] = (int64_t)ps->n_blocks;
			t->shape[1] = 0;
			t->off = ps->absmax_off[k];
			t->bytes = ps->n_blocks * sizeof(float);
		}
	}
	return n;
}

void optim_step_unit(const struct st_ops *ops, const struct st_optim *o, int unit, float *w,
		     const float *g, void *s, long t, float lr, float grad_scale)
{
	const struct st_optim_cfg *c = &o->cfg;
	const struct st_model *m = o->m;
	const struct st_unit *u = &m->units[unit];
	char *sb = s;
	const float bc1 = (float)(1.0 - pow(c->beta1, (double)t));
	const float bc2 = (float)(1.0 - pow(c->beta2, (double)t));
	for (int i = u->first_param; i < u->first_param + u->n_params; i++) {
		const struct st_param *p = &m->params[i];
		const struct st_pstate *ps = &o->ps[i];
		const float wd = optim_param_decays(c, p) ? c->weight_decay : 0.0f;
		float *pw = w + p->offset;
		const float *pg = g + p->offset;
		if (is_adam(c->kind) && ps->q8) {
			struct st_adamw8_args a = {
				.lr = lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps,
				.weight_decay = wd, .grad_scale = grad_scale, .bc1 = bc1, .bc2 = bc2,
				.block = c->quant_block, .map_m = o->map_signed,
				.map_v = o->map_unsigned};
			ops->adamw8_step(pw, (uint8_t *)(sb + ps->off[0]), (uint8_t *)(sb + ps->off[1]),
					 (float *)(sb + ps->absmax_off[0]),
					 (float *)(sb + ps->absmax_off[1]), pg, p->numel, &a);
		} else if (is_adam(c->kind)) {
			struct st_adamw_args a = {.lr = lr, .beta1 = c->beta1, .beta2 = c->beta2,
						  .eps = c->eps, .weight_decay = wd,
						  .grad_scale = grad_scale, .bc1 = bc1, .bc2 = bc2};
			ops->adamw_step(pw, (float *)(sb + ps->off[0]), (float *)(sb + ps->off[1]), pg,
					p->numel, &a);
		} else if (ps->q8) {
			struct st_sgd8_args a = {.lr = lr, .momentum = c->momentum,
						 .weight_decay = wd, .grad_scale = grad_scale,
						 .first_step = t == 1, .block = c->quant_block,
						 .map = o->map_signed};
			ops->sgd8_step(pw, (uint8_t *)(sb + ps->off[0]), (float *)(sb + ps->absmax_off[0]),
				       pg, p->numel, &a);
		} else {
			struct st_sgd_args a = {.lr = lr, .momentum = c->momentum,
						.weight_decay = wd, .grad_scale = grad_scale,
						.first_step = t == 1};
			ops->sgd_step(pw, ps->n_states ? (float *)(sb + ps->off[0]) : NULL, pg, p->numel,
				      &a);
		}
	}
}
