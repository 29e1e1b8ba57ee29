/* Parameter layout: which parameters each unit owns, their HF names, shapes,
 * roles and offsets in the unit's slab; deterministic initialization; FLOPs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/llama.h"
#include "util/check.h"
#include "util/rng.h"

static void add_param(struct st_model *m, int unit, const char *name, enum st_param_role role,
		      int64_t d0, int64_t d1)
{
	struct st_param *p = &m->params[m->n_params++];
	struct st_unit *u = &m->units[unit];
	snprintf(p->name, sizeof p->name, "%s", name);
	p->role = role;
	p->init = role == ST_ROLE_NORM ? ST_INIT_ONES : ST_INIT_NORMAL;
	p->unit = unit;
	p->offset = u->numel;
	p->ndim = d1 > 0 ? 2 : 1;
	p->shape[0] = d0;
	p->shape[1] = d1 > 0 ? d1 : 0;
	p->numel = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
	/* keep every parameter 16-float (64-byte) aligned inside its slab */
	u->numel += (p->numel + 15) & ~(size_t)15;
	u->n_params++;
}

int model_build(struct st_model *m, const struct st_config *cfg)
{
	ST_TRY(config_validate(cfg));
	memset(m, 0, sizeof *m);
	m->cfg = *cfg;
	const int L = cfg->n_layers, C = cfg->dim, F = cfg->ffn_dim, V = cfg->vocab_size;
	const int qd = cfg->n_heads * cfg->head_dim, kvd = cfg->n_kv_heads * cfg->head_dim;
	m->n_units = L + 2;
	m->units = st_calloc((size_t)m->n_units, sizeof *m->units);
	m->params = st_calloc((size_t)(L * LP__COUNT + 5), sizeof *m->params);
	if (!m->units || !m->params)
		return ST_FAIL;

	m->units[0] = (struct st_unit){.kind = ST_UNIT_EMBED, .first_param = 0};
	add_param(m, 0, "model.embed_tokens.weight", ST_ROLE_EMBED, V, C);
	if (cfg->stable_embedding) {
		m->params[0].init = ST_INIT_XAVIER;
		add_param(m, 0, "model.embed_norm.weight", ST_ROLE_NORM, C, 0);
		add_param(m, 0, "model.embed_norm.bias", ST_ROLE_NORM, C, 0);
		m->params[2].init = ST_INIT_ZEROS;
	}
	char name[96];
	for (int l = 0; l < L; l++) {
		int u = 1 + l;
		m->units[u] = (struct st_unit){.kind = ST_UNIT_LAYER, .layer = l,
					       .first_param = m->n_params};
#define LNAME(s) (snprintf(name, sizeof name, "model.layers.%d.%s", l, (s)), name)
		add_param(m, u, LNAME("input_layernorm.weight"), ST_ROLE_NORM, C, 0);
		add_param(m, u, LNAME("self_attn.q_proj.weight"), ST_ROLE_ATTN, qd, C);
		add_param(m, u, LNAME("self_attn.k_proj.weight"), ST_ROLE_ATTN, kvd, C);
		add_param(m, u, LNAME("self_attn.v_proj.weight"), ST_ROLE_ATTN, kvd, C);
		add_param(m, u, LNAME("self_attn.o_proj.weight"), ST_ROLE_ATTN, C, qd);
		add_param(m, u, LNAME("post_attention_layernorm.weight"), ST_ROLE_NORM, C, 0);
		add_param(m, u, LNAME("mlp.gate_proj.weight"), ST_ROLE_MLP, F, C);
		add_param(m, u, LNAME("mlp.up_proj.weight"), ST_ROLE_MLP, F, C);
		add_param(m, u, LNAME("mlp.down_proj.weight"), ST_ROLE_MLP, C, F);
#undef LNAME
	}
	int h = L + 1;
	m->units[h] = (struct st_unit){.kind = ST_UNIT_HEAD, .first_param = m->n_params};
	add_param(m, h, "model.norm.weight", ST_ROLE_NORM, C, 0);
	if (!cfg->tied)
		add_param(m, h, "lm_head.weight", ST_ROLE_LMHEAD, V, C);

	for (int i = 0; i < m->n_params; i++) {
		m->numel += m->params[i].numel;
		if (m->params[i].role != ST_ROLE_NORM && m->params[i].role != ST_ROLE_EMBED)
			m->matmul_numel += m->params[i].numel;
	}
	if (cfg->tied) /* the embedding doubles as the output projection */
		m->matmul_numel += (size_t)V * C;
	return ST_OK;
}

void model_free(struct st_model *m)
{
	free(m->units);
	free(m->params);
	memset(m, 0, sizeof *m);
}

const struct st_param *model_find_param(const struct st_model *m, const char *name)
{
	for (int i = 0; i < m->n_params; i++)
		if (strcmp(m->params[i].name, name) == 0)
			return &m->params[i];
	return NULL;
}

double model_unit_linear_flops(const struct st_model *m, int unit)
{
	const struct st_config *c = &m->cfg;
	const struct st_unit *un = &m->units[unit];
	double f = 0;
	for (int i = un->first_param; i < un->first_param + un->n_params; i++)
		if (m->params[i].role != ST_ROLE_NORM && m->params[i].role != ST_ROLE_EMBED)
			f += 2.0 * (double)m->params[i].numel;
	if (un->kind == ST_UNIT_HEAD && c->tied) /* the embedding doubles as the output projection */
		f += 2.0 * (double)c->vocab_size * c->dim;
	return f;
}

double model_attention_flops(int h, int hd, int t)
{
	return 2.0 * 2.0 * h * hd * (t + 1) / 2.0;
}

double model_unit_fwd_flops(const struct st_model *m, int unit, int t)
{
	const struct st_config *c = &m->cfg;
	double f = model_unit_linear_flops(m, unit);
	if (m->units[unit].kind == ST_UNIT_LAYER)
		f += model_attention_flops(c->n_heads, c->head_dim, t);
	return f;
}

/* As llama.c runs them, in floats per token. Forward: two RMSNorms (x read,
 * xn written: 2C each), RoPE on q and k in place (2QD + 2KD), the two
 * residual copies (2C each) and SwiGLU (gate, up read, h written: 3F).
 * Backward: SwiGLU's (dh, gate, up read, dgate, dup written: 5F), two
 * RMSNorms' (dxn, x read, dx written: 3C each), two residual adds (3C
 * each) and RoPE's (2QD + 2KD). The norms' per-row and per-column sums are
 * left out (N + C against N C). */
void model_layer_ew_bytes(const struct st_config *c, double *fwd, double *bwd)
{
	const double C = c->dim, F = c->ffn_dim, QD = (double)c->n_heads * c->head_dim;
	const double KD = (double)c->n_kv_heads * c->head_dim;
	*fwd = sizeof(float) * (8 * C + 2 * QD + 2 * KD + 3 * F);
	*bwd = sizeof(float) * (12 * C + 2 * QD + 2 * KD + 5 * F);
}

void model_unit_ew_bytes(const struct st_model *m, int unit, double *fwd, double *bwd)
{
	const struct st_config *c = &m->cfg;
	const double C = c->dim, V = c->vocab_size;
	switch (m->units[unit].kind) {
	case ST_UNIT_LAYER:
		model_layer_ew_bytes(c, fwd, bwd);
		return;
	case ST_UNIT_EMBED: /* rows gathered (read, written), and scattered back (read, added);
			     * the stable embedding's LayerNorm as an RMSNorm's */
		*fwd = sizeof(float) * (2 * C + (c->stable_embedding ? 2 * C : 0));
		*bwd = sizeof(float) * (3 * C + (c->stable_embedding ? 3 * C : 0));
		return;
	default: /* the head: its RMSNorm, and the loss reading the logits and writing their
		  * gradient in the forward's call */
		*fwd = sizeof(float) * (2 * C + 2 * V);
		*bwd = sizeof(float) * 3 * C;
		return;
	}
}

double model_flops_per_token(const struct st_model *m, int t)
{
	double f = 0; /* backward is twice the forward */
	for (int u = 0; u < m->n_units; u++)
		f += 3.0 * model_unit_fwd_flops(m, u, t);
	return f;
}

void model_init_unit(const struct st_model *m, int unit, float *w, uint64_t seed)
{
	const struct st_unit *u = &m->units[unit];
	memset(w, 0, u->numel * sizeof *w);
	for (int i = u->first_param; i < u->first_param + u->n_params; i++) {
		const struct st_param *p = &m->params[i];
		float *x = w + p->offset;
		struct st_rng r;
		rng_seed(&r, seed, (uint64_t)i);
		const double a = sqrt(6.0 / (double)(p->shape[0] + p->shape[1]));
		for (size_t j = 0; j < p->numel; j++) {
			switch (p->init) {
			case ST_INIT_ONES:
				x[j] = 1.0f;
				break;
			case ST_INIT_ZEROS:
				x[j] = 0.0f;
				break;
			case ST_INIT_XAVIER:
				x[j] = (float)(a * (2.0 * rng_uniform(&r) - 1.0));
				break;
			case ST_INIT_NORMAL:
				x[j] = (float)(m->cfg.init_std * rng_normal(&r));
				break;
			}
		}
	}
}
