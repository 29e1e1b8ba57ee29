/* Optimizer state converted on resume: a checkpoint of adamw resumed with
 * adamw8bit (or back), sgd with momentum as sgd8bit (or back), or an 8-bit
 * run resumed with another --quant-block or --quant-min-size.
 *
 * Each moment of each parameter is read from the file in whatever form it
 * has there (fp32 `NAME.M`, or `NAME.M.codes` + `NAME.M.absmax` at the
 * file's block size, decoded with the map the optimizers use for it: signed
 * for exp_avg and momentum_buffer, unsigned for exp_avg_sq), and written in
 * the form the run lays out: as fp32, or quantized block-wise at the run's
 * block with quant_blockwise, the reference the fused kernels match bit for
 * bit. Decoding 8-bit state is exact; quantizing fp32 state rounds it as one
 * 8-bit step would. A moment that is 8-bit at the same block on both sides
 * is copied as it is (requantizing decoded codes is not lossless: the
 * signed map has no -1, so a block whose largest value is negative would
 * get a smaller absmax). Bias corrections go on from the saved update count.
 * GaLore state (projected moments, projectors) is not converted.
 *
 * The tensors are read where they lie in the file's mapping, in chunks of
 * CHUNK elements (a multiple of every block size) spread over the OpenMP
 * threads, each with one CHUNK-sized buffer: no copy of a whole tensor. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "optim/quantmap.h"
#include "trainer/trainer.h"
#include "util/check.h"
#include "util/finite.h"

#define CHUNK ((size_t)1 << 16) /* elements: the largest block, so a multiple of any */

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

/* One moment as the file holds it: fp32 values, or codes + absmax. */
struct moment_src {
	const float *f32;
	const uint8_t *codes;
	const float *absmax;
	size_t n_blocks;
	float *copy[2]; /* f32 and absmax copied out of a view not aligned for floats */
};

/* A view of floats the file may place at any byte (its header's length and
 * data_offsets are the writer's: strata pads to 8, another tool may not):
 * read as floats only from an aligned copy, a misaligned load being
 * undefined. *copy owns it (NULL where the view is used as it is). */
static const float *aligned_floats(const struct st_safetensors *sf, const void *view, size_t n,
				   float **copy)
{
	*copy = NULL;
	if (!view || (uintptr_t)view % _Alignof(float) == 0)
		return view;
	*copy = st_malloc(n * sizeof(float));
	if (*copy)
		memcpy(*copy, view, n * sizeof(float));
	safetensors_view_done(sf, view);
	return *copy;
}

/* Finds moment `name` of parameter p (n elements) in the file; *used counts
 * the file tensors it takes. */
static int find_moment(const struct st_safetensors *sf, const char *path, const struct st_param *p,
		       const char *name, size_t n, int block, struct moment_src *m, int *used)
{
	char t[200], a[200];
	memset(m, 0, sizeof *m);
	snprintf(t, sizeof t, "%.95s.%s", p->name, name);
	if (safetensors_find(sf, t)) {
		m->f32 = aligned_floats(sf,
					safetensors_view_raw(sf, t, ST_DT_F32, p->ndim, p->shape,
							     n * sizeof(float)),
					n, &m->copy[0]);
		*used += 1;
		return m->f32 ? ST_OK : ST_FAIL;
	}
	snprintf(t, sizeof t, "%.95s.%s.codes", p->name, name);
	snprintf(a, sizeof a, "%.95s.%s.absmax", p->name, name);
	ST_CHECK(safetensors_find(sf, t) && safetensors_find(sf, a),
		 "the file belongs to another model or optimizer; use this run's checkpoint",
		 "%s has neither %s.%s nor %s", path, p->name, name, t);
	m->n_blocks = (n + (size_t)block - 1) / (size_t)block;
	const int64_t ashape[1] = {(int64_t)m->n_blocks};
	m->codes = safetensors_view_raw(sf, t, ST_DT_U8, p->ndim, p->shape, n);
	m->absmax = m->codes ? aligned_floats(sf,
					      safetensors_view_raw(sf, a, ST_DT_F32, 1, ashape,
								   m->n_blocks * sizeof(float)),
					      m->n_blocks, &m->copy[1])
			     : NULL;
	*used += 2;
	if (!m->absmax)
		return ST_FAIL;
	for (size_t b = 0; b < m->n_blocks; b++)
		ST_CHECK(isfinite(m->absmax[b]) && m->absmax[b] >= 0,
			 "the checkpoint is damaged; resume from an earlier one",
			 "%s: %s holds %g at element %zu", path, a, (double)m->absmax[b], b);
	return ST_OK;
}

static void moment_done(const struct st_safetensors *sf, const struct moment_src *m)
{
	if (!m->copy[0])
		safetensors_view_done(sf, m->f32);
	safetensors_view_done(sf, m->codes);
	if (!m->copy[1])
		safetensors_view_done(sf, m->absmax);
	free(m->copy[0]);
	free(m->copy[1]);
}

/* One moment into the run's layout at ps's k-th state. Returns the first
 * element that is not finite (or, for a second moment, negative), -1 when
 * all are sound, or -2 when out of memory. */
static long convert_moment(const struct st_safetensors *sf, const struct moment_src *m,
			   const struct st_pstate *ps, int k, char *state, size_t n, int from_block,
			   int block, const float map[256], int second)
{
	if (m->codes && ps->q8 && from_block == block) { /* as it is, a chunk at a time */
		for (size_t c0 = 0; c0 < n; c0 += CHUNK) {
			const size_t len = n - c0 < CHUNK ? n - c0 : CHUNK;
			memcpy(state + ps->off[k] + c0, m->codes + c0, len);
			safetensors_view_drop(sf, m->codes + c0, len);
		}
		memcpy(state + ps->absmax_off[k], m->absmax, ps->n_blocks * sizeof(float));
		return -1;
	}
	/* a buffer only to decode codes that are then quantized again */
	const int need_tmp = ps->q8 && m->codes;
	const size_t n_chunks = (n + CHUNK - 1) / CHUNK;
	long bad = -1;
	int nomem = 0;
#pragma omp parallel
	{
		float *tmp = need_tmp ? malloc((n < CHUNK ? n : CHUNK) * sizeof *tmp) : NULL;
		long my_bad = -1;
#pragma omp for schedule(dynamic)
		for (size_t c = 0; c < n_chunks; c++) {
			const size_t c0 = c * CHUNK, len = n - c0 < CHUNK ? n - c0 : CHUNK;
			float *out32 = ps->q8 ? NULL : (float *)(state + ps->off[k]) + c0;
			const float *x = m->f32 ? m->f32 + c0 : NULL;
			if (m->codes) { /* decoded into the run's fp32 state, or the buffer */
				float *d = out32 ? out32 : tmp;
				if (!d)
					continue; /* no buffer: nomem below */
				dequant_blockwise(d, m->codes + c0, m->absmax + c0 / (size_t)from_block,
						  len, from_block, map);
				x = d;
			}
			long b = st_first_nonfinite(x, len);
			for (size_t e = 0; b < 0 && second && e < len; e++)
				if (x[e] < 0)
					b = (long)e;
			if (b >= 0 && (my_bad < 0 || (long)c0 + b < my_bad))
				my_bad = (long)c0 + b;
			if (ps->q8)
				quant_blockwise((uint8_t *)(state + ps->off[k]) + c0,
						(float *)(state + ps->absmax_off[k]) + c0 / (size_t)block, x,
						len, block, map);
			else if (m->f32)
				memcpy(out32, x, len * sizeof *x);
			/* read: the chunk's mapped pages go (the whole tensor
			 * stayed resident beside the budgets until moment_done) */
			if (m->f32)
				safetensors_view_drop(sf, m->f32 + c0, len * sizeof *m->f32);
			if (m->codes)
				safetensors_view_drop(sf, m->codes + c0, len);
		}
#pragma omp critical
		{
			if (need_tmp && !tmp)
				nomem = 1;
			if (my_bad >= 0 && (bad < 0 || my_bad < bad))
				bad = my_bad;
		}
		free(tmp);
	}
	return nomem ? -2 : bad;
}

int ckpt_convert_state(struct st_trainer *tr, const struct st_safetensors *sf, const char *path,
		       enum st_optim_kind from, int from_block)
{
	const struct st_model *m = &tr->s.model;
	const struct st_optim *o = &tr->opt;
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
				const char *name = optim_moment_name(o, k);
				const float *map = optim_moment_map(o, k);
				const size_t n = ps->state_numel;
				struct moment_src ms;
				rc = find_moment(sf, path, p, name, n, from_block, &ms, &used);
				const long bad = rc == ST_OK ? convert_moment(sf, &ms, ps, k, state, n, from_block,
									     o->cfg.quant_block, map, k == 1)
							     : -1;
				moment_done(sf, &ms);
				if (bad == -2) {
					ST_ERROR("free memory, or use fewer threads (--threads)",
						 "out of memory converting %s.%s", p->name, name);
					rc = ST_FAIL;
				} else if (bad >= 0) {
					ST_ERROR("the checkpoint is damaged; resume from an earlier one",
						 "%s: %s.%s holds %s at element %ld", path, p->name, name,
						 k == 1 ? "a value that is not finite or is negative"
							: "a value that is not finite",
						 bad);
					rc = ST_FAIL;
				}
				decoded += rc == ST_OK && ms.codes && !(ps->q8 && from_block == o->cfg.quant_block);
				quantized += rc == ST_OK && ps->q8 && !(ms.codes && from_block == o->cfg.quant_block);
			}
		}
		store_release(&tr->s.store, u, ST_SLAB_S, 1);
	}
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
	/* said once the run is sure to start (trainer_open): a run refused
	 * after (no room for a checkpoint) said "converted", then stopped */
	if (!decoded && !quantized) /* another threshold or kind that moved no tensor */
		snprintf(tr->convert_note, sizeof tr->convert_note,
			 "optimizer state of %s taken as %s unchanged: no moment is stored otherwise "
			 "under the new settings",
			 from_desc, to_desc);
	else
		snprintf(tr->convert_note, sizeof tr->convert_note,
			 "optimizer state converted from %s to %s: %zu moments decoded from 8 bits, %zu "
			 "quantized; from here on the run is not the one the checkpoint's settings "
			 "would have continued",
			 from_desc, to_desc, decoded, quantized);
	return ST_OK;
}
