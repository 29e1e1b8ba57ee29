/* Per-unit optimizer dispatch and state layout; see optim.h. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optim/galore.h"
#include "optim/optim.h"
#include "optim/quantmap.h"
#include "util/check.h"

static const struct {
	const char *name;
	enum st_optim_kind kind;
} kinds[] = {{"adamw", ST_OPT_ADAMW},
	     {"sgd", ST_OPT_SGD},
	     {"adamw8bit", ST_OPT_ADAMW8},
	     {"sgd8bit", ST_OPT_SGD8},
	     {"galore-adamw", ST_OPT_GALORE_ADAMW},
	     {"galore-adamw8bit", ST_OPT_GALORE_ADAMW8}};

int optim_parse_kind(enum st_optim_kind *k, const char *s)
{
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		if (!strcmp(s, kinds[i].name)) {
			*k = kinds[i].kind;
			return ST_OK;
		}
	ST_USAGE_ERROR("use --optimizer adamw, sgd, adamw8bit, sgd8bit, galore-adamw or galore-adamw8bit",
		 "unknown optimizer '%s'", s);
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

static int is_adam(enum st_optim_kind k) { return k != ST_OPT_SGD && k != ST_OPT_SGD8; }
int optim_kind_is_8bit(enum st_optim_kind k)
{
	return k == ST_OPT_ADAMW8 || k == ST_OPT_SGD8 || k == ST_OPT_GALORE_ADAMW8;
}

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

int optim_quant_block_ok(int block)
{
	return block >= 16 && block <= 65536 && (block & (block - 1)) == 0;
}

int optim_init(struct st_optim *o, const struct st_optim_cfg *c, const struct st_model *m)
{
	memset(o, 0, sizeof *o);
	o->cfg = *c;
	o->m = m;
	if (optim_kind_is_8bit(c->kind))
		ST_CHECK_USAGE(optim_quant_block_ok(c->quant_block), "use a power of two such as 256", "--quant-block must be a power of two in [16, 65536] (got %d)",
			 c->quant_block);
	o->ps = st_calloc((size_t)m->n_params, sizeof *o->ps);
	o->unit_bytes = st_calloc((size_t)m->n_units, sizeof *o->unit_bytes);
	if (!o->ps || !o->unit_bytes)
		return ST_FAIL;
	quantmap_dynamic(o->map_signed, 1);
	quantmap_dynamic(o->map_unsigned, 0);
	const int n_states = is_adam(c->kind) ? 2 : c->momentum != 0.0f ? 1 : 0;
	ST_TRY(galore_plan(o)); /* marks the GaLore parameters, their shapes and phases */
	for (int i = 0; i < m->n_params; i++) {
		const struct st_param *p = &m->params[i];
		struct st_pstate *ps = &o->ps[i];
		size_t *cur = &o->unit_bytes[p->unit];
		if (!ps->galore)
			ps->state_numel = p->numel;
		else {
			ps->proj_off = *cur;
			*cur = align64(*cur + galore_proj_numel(ps) * sizeof(float));
		}
		ps->n_states = n_states;
		ps->q8 = optim_kind_is_8bit(c->kind) && (long)ps->state_numel >= c->quant_min_numel &&
			 p->role != ST_ROLE_EMBED;
		ps->n_blocks = ps->q8 ? (ps->state_numel + (size_t)c->quant_block - 1) /
						(size_t)c->quant_block
				      : 0;
		for (int k = 0; k < n_states; k++) {
			ps->off[k] = *cur;
			*cur = align64(*cur + ps->state_numel * (ps->q8 ? 1 : sizeof(float)));
			if (ps->q8) {
				ps->absmax_off[k] = *cur;
				*cur = align64(*cur + ps->n_blocks * sizeof(float));
			}
		}
	}
	for (int u = 0; u < m->n_units; u++)
		o->total_bytes += o->unit_bytes[u];
	return galore_alloc_scratch(o);
}

void optim_free(struct st_optim *o)
{
	galore_free_scratch(o);
	free(o->ps);
	free(o->unit_bytes);
	memset(o, 0, sizeof *o);
}

int optim_state_tensors(const struct st_optim *o, int i,
			struct st_state_tensor out[ST_STATE_TENSORS_MAX])
{
	const struct st_param *p = &o->m->params[i];
	const struct st_pstate *ps = &o->ps[i];
	int n = 0;
	int64_t shape[2] = {p->shape[0], p->shape[1]};
	int ndim = p->ndim;
	if (ps->galore) {
		struct st_state_tensor *t = &out[n++];
		snprintf(t->suffix, sizeof t->suffix, "galore.proj");
		t->dtype = ST_DT_F32;
		t->ndim = 2;
		t->shape[0] = ps->right ? ps->rank : ps->rows;
		t->shape[1] = ps->right ? ps->cols : ps->rank;
		t->off = ps->proj_off;
		t->bytes = galore_proj_numel(ps) * sizeof(float);
		shape[0] = ps->right ? ps->rows : ps->rank;
		shape[1] = ps->right ? ps->rank : ps->cols;
	}
	for (int k = 0; k < ps->n_states; k++) {
		const char *base = optim_moment_name(o, k);
		struct st_state_tensor *t = &out[n++];
		snprintf(t->suffix, sizeof t->suffix, "%s%s", base, ps->q8 ? ".codes" : "");
		t->dtype = ps->q8 ? ST_DT_U8 : ST_DT_F32;
		t->ndim = ndim;
		t->shape[0] = shape[0];
		t->shape[1] = shape[1];
		t->off = ps->off[k];
		t->bytes = ps->state_numel * (ps->q8 ? 1 : sizeof(float));
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

const char *optim_moment_name(const struct st_optim *o, int k)
{
	return !is_adam(o->cfg.kind) ? "momentum_buffer" : k == 0 ? "exp_avg" : "exp_avg_sq";
}

const float *optim_moment_map(const struct st_optim *o, int k)
{
	return k == 1 ? o->map_unsigned : o->map_signed;
}

size_t optim_param_state_bytes(const struct st_optim *o, int i)
{
	struct st_state_tensor t[ST_STATE_TENSORS_MAX];
	size_t bytes = 0;
	for (int k = optim_state_tensors(o, i, t); k-- > 0;)
		bytes += t[k].bytes;
	return bytes;
}

void optim_step_unit(const struct st_ops *ops, const struct st_optim *o, int unit, float *w,
		     const float *g, void *s, long t, float lr, float grad_scale)
{
	const struct st_unit *u = &o->m->units[unit];
	for (int i = u->first_param; i < u->first_param + u->n_params; i++) {
		const size_t off = o->m->params[i].offset;
		optim_step_param(ops, o, i, w + off, g + off, s, t, lr, grad_scale);
	}
}

void optim_step_param(const struct st_ops *ops, const struct st_optim *o, int i, float *pw,
		      const float *pg, void *s, long t, float lr, float grad_scale)
{
	const struct st_optim_cfg *c = &o->cfg;
	char *sb = s;
	const float bc1 = (float)(1.0 - pow(c->beta1, (double)t));
	const float bc2 = (float)(1.0 - pow(c->beta2, (double)t));
	{
		const struct st_param *p = &o->m->params[i];
		const struct st_pstate *ps = &o->ps[i];
		const float wd = optim_param_decays(c, p) ? c->weight_decay : 0.0f;
		if (ps->galore) {
			galore_step(ops, o, i, pw, pg, sb, t, lr, grad_scale, wd);
		} else if (is_adam(c->kind) && ps->q8) {
			struct st_adamw8_args a = {
				.lr = lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->eps,
				.weight_decay = wd, .grad_scale = grad_scale, .bc1 = bc1, .bc2 = bc2,
				.block = c->quant_block, .map_m = optim_moment_map(o, 0),
				.map_v = optim_moment_map(o, 1)};
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
						 .map = optim_moment_map(o, 0)};
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
