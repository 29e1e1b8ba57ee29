/* Optimizer state converted on resume: a checkpoint of adamw resumed with
 * adamw8bit (or back), sgd with momentum as sgd8bit (or back), or an 8-bit
 * run resumed with another --quant-block or --quant-min-size.
 *
 * Each moment of each parameter is read from the file in whatever form it
 * has there (fp32 `NAME.M`, or `NAME.M.codes` + `NAME.M.absmax` at the
 * file's block size, decoded with the map the optimizers use for it: signed
 * for exp_avg and momentum_buffer, unsigned for exp_avg_sq), and written in
 * the form the run lays out: copied as fp32, or quantized block-wise at the
 * run's block with quant_blockwise, the reference the fused kernels match
 * bit for bit. Decoding 8-bit state is exact; quantizing fp32 state rounds
 * it as one 8-bit step would. Bias corrections go on from the saved update
 * count either way. GaLore state (projected moments, projectors) is not
 * converted. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/quantmap.h"
#include "trainer/trainer.h"
#include "util/check.h"
#include "util/finite.h"

static int is_sgd(enum st_optim_kind k)
{
	return k == ST_OPT_SGD || k == ST_OPT_SGD8;
}

int ckpt_can_convert(enum st_optim_kind from, enum st_optim_kind to)
{
	const int galore = from == ST_OPT_GALORE_ADAMW || from == ST_OPT_GALORE_ADAMW8 ||
			   to == ST_OPT_GALORE_ADAMW || to == ST_OPT_GALORE_ADAMW8;
	return !galore && is_sgd(from) == is_sgd(to);
}

/* Moment `name` of parameter `pname` (n elements, shape as the parameter's)
 * from the file into dst as fp32; *used counts the file tensors read. */
static int read_moment(const struct st_safetensors *sf, const char *path, const char *pname,
		       const char *name, const struct st_param *p, size_t n, int block,
		       const float map[256], float *dst, int *used)
{
	char t[200], a[200];
	snprintf(t, sizeof t, "%.95s.%s", pname, name);
	if (safetensors_find(sf, t)) {
		ST_TRY(safetensors_load_raw(sf, t, ST_DT_F32, p->ndim, p->shape, dst, n * sizeof(float)));
		*used += 1;
		return ST_OK;
	}
	snprintf(t, sizeof t, "%.95s.%s.codes", pname, name);
	snprintf(a, sizeof a, "%.95s.%s.absmax", pname, name);
	ST_CHECK(safetensors_find(sf, t) && safetensors_find(sf, a),
		 "the file belongs to another model or optimizer; use this run's checkpoint",
		 "%s has neither %s.%s nor %s", path, pname, name, t);
	const size_t n_blocks = (n + (size_t)block - 1) / (size_t)block;
	uint8_t *codes = st_malloc(n);
	float *absmax = st_malloc(n_blocks * sizeof *absmax);
	const int64_t ashape[1] = {(int64_t)n_blocks};
	int rc = codes && absmax ? ST_OK : ST_FAIL;
	if (rc == ST_OK)
		rc = safetensors_load_raw(sf, t, ST_DT_U8, p->ndim, p->shape, codes, n);
	if (rc == ST_OK)
		rc = safetensors_load_raw(sf, a, ST_DT_F32, 1, ashape, absmax, n_blocks * sizeof(float));
	for (size_t b = 0; rc == ST_OK && b < n_blocks; b++)
		if (!(isfinite(absmax[b]) && absmax[b] >= 0)) {
			ST_ERROR("the checkpoint is damaged; resume from an earlier one",
				 "%s: %s holds %g at element %zu", path, a, (double)absmax[b], b);
			rc = ST_FAIL;
		}
	if (rc == ST_OK)
		dequant_blockwise(dst, codes, absmax, n, block, map);
	free(codes);
	free(absmax);
	*used += 2;
	return rc;
}

int ckpt_convert_state(struct st_trainer *tr, const struct st_safetensors *sf, const char *path,
		       enum st_optim_kind from, int from_block)
{
	const struct st_model *m = &tr->s.model;
	const struct st_optim *o = &tr->opt;
	const int adam = !is_sgd(o->cfg.kind);
	size_t most = 0;
	for (int i = 0; i < m->n_params; i++)
		if (o->ps[i].q8 && o->ps[i].state_numel > most)
			most = o->ps[i].state_numel;
	float *tmp = most ? st_malloc(most * sizeof *tmp) : NULL;
	if (most && !tmp)
		return ST_FAIL;
	int rc = ST_OK, used = 0;
	size_t quantized = 0, decoded = 0;
	for (int u = 0; u < m->n_units && rc == ST_OK; u++) {
		if (!o->unit_bytes[u])
			continue;
		char *state = store_acquire(&tr->s.store, u, ST_SLAB_S);
		const struct st_unit *un = &m->units[u];
		for (int i = un->first_param; i < un->first_param + un->n_params && rc == ST_OK; i++) {
			const struct st_param *p = &m->params[i];
			const struct st_pstate *ps = &o->ps[i];
			for (int k = 0; k < ps->n_states && rc == ST_OK; k++) {
				const char *name = adam ? (k == 0 ? "exp_avg" : "exp_avg_sq")
							: "momentum_buffer";
				const float *map = k == 1 ? o->map_unsigned : o->map_signed;
				const size_t n = ps->state_numel;
				float *x = ps->q8 ? tmp : (float *)(state + ps->off[k]);
				const int before = used;
				rc = read_moment(sf, path, p->name, name, p, n, from_block, map, x, &used);
				if (rc != ST_OK)
					break;
				const long bad = st_first_nonfinite(x, n);
				for (size_t e = 0; rc == ST_OK && bad < 0 && k == 1 && e < n; e++)
					if (x[e] < 0) {
						ST_ERROR("the checkpoint is damaged; resume from an earlier one",
							 "%s: %s.%s holds a negative second moment (%g) at "
							 "element %zu",
							 path, p->name, name, (double)x[e], e);
						rc = ST_FAIL;
					}
				if (bad >= 0) {
					ST_ERROR("the checkpoint is damaged; resume from an earlier one",
						 "%s: %s.%s holds %g at element %ld", path, p->name, name,
						 (double)x[bad], bad);
					rc = ST_FAIL;
				}
				if (rc != ST_OK)
					break;
				decoded += used - before == 2;
				if (ps->q8) {
					quant_blockwise((uint8_t *)(state + ps->off[k]),
							(float *)(state + ps->absmax_off[k]), x, n,
							o->cfg.quant_block, map);
					quantized++;
				}
			}
		}
		store_release(&tr->s.store, u, ST_SLAB_S, 1);
	}
	free(tmp);
	ST_TRY(rc);
	ST_CHECK(used == sf->n, "the file belongs to another model or optimizer; use this run's checkpoint",
		 "%s holds %d tensors, of which this run's state uses %d", path, sf->n, used);
	char from_desc[64], to_desc[64];
	if (optim_kind_is_8bit(from))
		snprintf(from_desc, sizeof from_desc, "%s (block %d)", optim_kind_name(from), from_block);
	else
		snprintf(from_desc, sizeof from_desc, "%s", optim_kind_name(from));
	if (optim_kind_is_8bit(o->cfg.kind))
		snprintf(to_desc, sizeof to_desc, "%s (block %d, fp32 under %ld elements)",
			 optim_kind_name(o->cfg.kind), o->cfg.quant_block, o->cfg.quant_min_numel);
	else
		snprintf(to_desc, sizeof to_desc, "%s", optim_kind_name(o->cfg.kind));
	st_log_info("optimizer state converted from %s to %s: %zu moments decoded from 8 bits, %zu "
		    "quantized; from here on the run is not the one the checkpoint's settings "
		    "would have continued",
		    from_desc, to_desc, decoded, quantized);
	return ST_OK;
}
