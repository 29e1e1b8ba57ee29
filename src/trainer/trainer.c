/* The training loop; see trainer.h.
 *
 * Exactness under gradient accumulation and clipping: every micro-batch adds
 * d(loss_sum * scale)/dW into the G slabs, with scale = 1 / (target tokens in
 * the whole step), so after the last micro-batch G is the gradient of the
 * step's mean loss whatever the split. The global norm is then summed over
 * the units' G slabs in unit order (double), and the clip factor reaches the
 * optimizer as grad_scale, so no extra pass rewrites the gradients. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trainer/interrupt.h"
#include "trainer/progress.h"
#include "trainer/rundir.h"
#include "trainer/tiers.h"
#include "trainer/trainer.h"
#include "util/check.h"
#include "util/finite.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void train_schedule(const struct st_train_opts *o, long done, double tokens_seen, long *total,
		    long *warmup)
{
	const double tokens_per_step = (double)o->micro_batch * o->seq_len * o->grad_accum;
	if (o->steps > 0) {
		*total = o->steps;
	} else {
		/* a token budget: the steps done, then what is left of the budget
		 * at this run's tokens per step (a resume may change them) */
		const double left = o->max_tokens - tokens_seen;
		*total = done + (left > 0 ? (long)ceil(left / tokens_per_step) : 0);
	}
	*warmup = o->warmup >= 0 ? o->warmup : *total / 10;
}

double lr_at(const struct st_train_opts *o, long step, long total, long warmup)
{
	if (warmup > 0 && step <= warmup)
		return o->lr * (double)step / (double)warmup;
	if (!strcmp(o->schedule, "constant"))
		return o->lr;
	const double lo = o->lr * o->min_lr_ratio;
	/* Every decay ends one step past the run: its last step just above the
	 * floor (a step at the floor itself would, at --min-lr-ratio 0, do
	 * nothing; a one-step run took the floor). */
	if (!strcmp(o->schedule, "wsd")) {
		/* warmup-stable-decay: the full rate, then the last d steps of the
		 * run step down linearly, the first of them already below it */
		const long span = total - warmup;
		long d = (long)ceil(o->decay_frac * (double)span);
		d = d < 1 ? 1 : d > span ? span : d;
		const long into = step - (total - d); /* 1 at the first decayed step */
		if (span <= 0 || into <= 0)
			return o->lr;
		const double frac = fmin((double)into / (double)(d + 1), 1.0);
		return o->lr - (o->lr - lo) * frac;
	}
	/* cosine (llm.c's) and linear: the first step after warmup takes the
	 * full rate and the decay runs toward the floor over the rest */
	double span = (double)(total - warmup);
	double frac = span > 0 ? (double)(step - 1 - warmup) / span : 1.0;
	if (frac > 1)
		frac = 1;
	if (!strcmp(o->schedule, "linear"))
		return o->lr - (o->lr - lo) * frac;
	return lo + 0.5 * (o->lr - lo) * (1.0 + cos(M_PI * frac));
}

static void wait_update(void *ctx, int unit)
{
	updater_wait_unit(ctx, unit);
}

struct st_optim_cfg trainer_optim_cfg(const struct st_train_opts *o, enum st_optim_kind kind)
{
	return (struct st_optim_cfg){
		.kind = kind, .beta1 = (float)o->beta1, .beta2 = (float)o->beta2,
		.eps = (float)o->eps, .momentum = (float)o->momentum,
		.weight_decay = (float)o->weight_decay, .decay_norms = o->decay_norms,
		.decay_embed = o->decay_embed, .quant_block = o->quant_block,
		.quant_min_numel = o->quant_min_size, .galore_rank = o->galore_rank,
		.galore_gap = o->galore_update_gap, .galore_spread = o->galore_start_spread,
		.galore_scale = (float)o->galore_scale,
		.galore_proj = strcmp(o->galore_proj, "svd") ? ST_GALORE_RANDOMIZED : ST_GALORE_SVD,
		.galore_rotate = !strcmp(o->galore_moments, "rotate"), .seed = (uint64_t)o->seed};
}

int trainer_open(struct st_trainer *tr, const struct st_train_opts *o)
{
	memset(tr, 0, sizeof *tr);
	tr->lock_fd = -1;
	tr->metrics_at_start = -1;
	tr->o = *o;
	tr->last_loss = tr->last_val_loss = NAN; /* none yet */
	tr->prev_ckpt_step = -1;
	tr->run_warmup = -1;
	pthread_mutex_init(&tr->ck.mu, NULL);
	pthread_cond_init(&tr->ck.cv, NULL);
	ST_TRY(train_opts_validate(&tr->o));
	const int resuming = *tr->o.resume != 0;
	ST_TRY(rundir_check(tr, resuming));

	const struct st_ops *ops;
	ST_TRY(session_backend(&ops, tr->o.device, tr->o.threads));
	enum st_optim_kind kind;
	ST_TRY(optim_parse_kind(&kind, tr->o.optimizer));
	tr->per_layer = (kind == ST_OPT_GALORE_ADAMW || kind == ST_OPT_GALORE_ADAMW8) &&
			tr->o.galore_per_layer;
	const int grads = tr->per_layer ? ST_GRADS_SHARED_LAYERS : ST_GRADS_ALL;
	char model_dir[4096], path[4200];
	if (resuming) {
		ST_TRY(ckpt_resolve(tr->ckpt_loaded, sizeof tr->ckpt_loaded, tr->o.resume));
		/* absolute, as trainer.json's paths and the saves' lines are: the
		 * resume record in metrics.jsonl named it as typed, relative to
		 * wherever the resume ran */
		ST_TRY(fs_absolute(tr->ckpt_loaded, sizeof tr->ckpt_loaded));
		snprintf(model_dir, sizeof model_dir, "%s", tr->ckpt_loaded);
	} else {
		ST_CHECK_USAGE(*tr->o.model, "create one with `strata init --config tiny --out DIR`",
			 "no model given (--model DIR)");
		snprintf(model_dir, sizeof model_dir, "%s", tr->o.model);
	}
	snprintf(tr->model_dir, sizeof tr->model_dir, "%s", model_dir);
	ST_TRY(ckpt_read_tokenizer_files(tr));
	struct st_config cfg;
	snprintf(path, sizeof path, "%s/config.json", model_dir);
	if (config_load(&cfg, path) != ST_OK) {
		if (resuming)
			ckpt_name_earlier(model_dir);
		return ST_FAIL;
	}
	ST_TRY(session_build(&tr->s, ops, &cfg, NULL));
	ST_TRY(session_matmul_precision(&tr->s, tr->o.matmul_precision, "--matmul-precision"));
	/* the weights' headers against config.json before anything is sized by it */
	if (session_check_weights(&tr->s, model_dir) != ST_OK) {
		if (resuming)
			ckpt_name_earlier(model_dir);
		return ST_FAIL;
	}
	const struct st_model *m = &tr->s.model;
	ST_CHECK_USAGE(tr->o.seq_len <= m->cfg.max_seq, "lower --seq-len",
		 "--seq-len %d exceeds the model's max_position_embeddings %d", tr->o.seq_len,
		 m->cfg.max_seq);

	ST_TRY(data_open(&tr->data, tr->o.data, tr->o.val, m->cfg.vocab_size, 1));
	ST_TRY(rundir_absolute_paths(&tr->o, resuming)); /* trainer.json must name them from anywhere */
	ST_TRY(data_check_tokenizer(&tr->data, model_dir, &m->cfg));
	ST_CHECK(tr->data.train.n_tokens > (uint64_t)tr->o.seq_len,
		 "use more text, or a shorter --seq-len",
		 "the training data %s holds %llu tokens, fewer than one window of %d + 1",
		 tr->data.train.path, (unsigned long long)tr->data.train.n_tokens, tr->o.seq_len);
	if (!tr->data.has_val)
		st_log_warn("no validation shard: evaluation is skipped (give --val FILE)");

	const struct st_optim_cfg oc = trainer_optim_cfg(&tr->o, kind);
	ST_TRY(optim_init(&tr->opt, &oc, m));
	ST_TRY(tiers_setup(tr, model_dir, grads));
	tr->grad_sumsq = st_calloc((size_t)m->n_units, sizeof *tr->grad_sumsq);
	if (!tr->grad_sumsq)
		return ST_FAIL;
	/* Per-layer GaLore's updates go through the updater too (its step_unit
	 * reads the accumulators the backward's hook filled): it streams
	 * offloaded weights and state as it does for the other optimizers. */
	ST_TRY(updater_init(&tr->up, ops, &tr->opt, m, &tr->s.store, tr->plan.prefetch,
			    tr->o.threads, tr->plan.place.offloaded));
	tr->s.exec.before_unit = wait_update;
	tr->s.exec.before_unit_ctx = &tr->up;
	tr->up.before_update = ckpt_wait_unit;
	tr->up.before_update_ctx = &tr->ck;
	tr->up.on_device = tr->plan.dev_update;
	if (tr->per_layer) {
		ST_TRY(perlayer_init(&tr->pl, ops, &tr->opt, &tr->s.store, tr->plan.prefetch,
				     tr->o.grad_accum));
		tr->no_grad = st_calloc((size_t)m->n_units, 1);
		if (!tr->no_grad)
			return ST_FAIL;
		for (int u = 0; u < m->n_units; u++)
			tr->no_grad[u] = m->units[u].kind == ST_UNIT_LAYER;
		tr->up.step_unit = perlayer_update;
		tr->up.step_unit_ctx = &tr->pl;
		tr->up.no_grad = tr->no_grad;
	}

	/* a fresh run draws its id; a resume carries its run's on, and one
	 * from a checkpoint saved before there were ids has none, nor do its
	 * checkpoints (drawn at each such resume, two resumes into one run
	 * directory made it look like two runs' and refused it) */
	struct ckpt_ids ids = {.prev_step = -2};
	if (resuming)
		ckpt_read_ids(tr->ckpt_loaded, &ids);
	if (*ids.run)
		memcpy(tr->run_id, ids.run, sizeof ids.run);
	else if (!resuming)
		ckpt_new_id(tr->run_id);
	if (resuming) {
		ST_TRY(ckpt_load_state(tr, tr->ckpt_loaded));
		tr->prev_ckpt_step = tr->step;
		memcpy(tr->prev_ckpt_id, ids.self, sizeof ids.self); /* "": history unknown */
	}
	train_schedule(&tr->o, tr->step, tr->tokens_seen, &tr->total_steps, &tr->warmup);
	/* The warmup belongs to the run's start: with --warmup -1 (a tenth of
	 * the run) a resume keeps the one the run used, so a longer --steps
	 * does not send a run past its warmup back into it (a stable wsd
	 * checkpoint resumed at 10x the length went back to 0.85 lr). */
	if (resuming && tr->o.warmup < 0 && !tr->o.warmup_given && tr->run_warmup >= 0)
		tr->warmup = tr->run_warmup;
	const int decays = strcmp(tr->o.schedule, "constant") != 0;
	if (tr->warmup > tr->total_steps)
		st_log_warn("--warmup %ld is longer than the run (%ld step%s): the learning rate ends "
			    "at %.3g, never reaching --lr %g%s",
			    tr->warmup, tr->total_steps, tr->total_steps == 1 ? "" : "s",
			    lr_at(&tr->o, tr->total_steps, tr->total_steps, tr->warmup), tr->o.lr,
			    decays ? ", and never decays" : "");
	else if (decays && strcmp(tr->o.schedule, "wsd") != 0 && tr->warmup > 0 &&
		 tr->warmup >= tr->total_steps - 1 && tr->total_steps > 2)
		/* cosine and linear: the step after warmup takes the full rate, so
		 * the decay would begin only after the last step (wsd's last steps
		 * decay whatever the warmup) */
		st_log_warn("--warmup %ld spans the whole run (%ld steps): the learning rate reaches "
			    "--lr %g at step %ld and never decays",
			    tr->warmup, tr->total_steps, tr->o.lr, tr->warmup);
	tiers_note_eval_traffic(tr);
	size_t ckpt_bytes = 0; /* fp32 weights and the optimizer state */
	for (int u = 0; u < m->n_units; u++)
		ckpt_bytes += m->units[u].numel * sizeof(float) + tr->opt.unit_bytes[u];
	ST_TRY(rundir_check_room(tr, ckpt_bytes));
	if (*tr->convert_note)
		st_log_info("%s", tr->convert_note);

	const size_t n = (size_t)tr->o.grad_accum * tr->o.micro_batch * tr->o.seq_len;
	tr->tokens = st_malloc(n * sizeof *tr->tokens);
	tr->targets = st_malloc(n * sizeof *tr->targets);
	if (!tr->tokens || !tr->targets)
		return ST_FAIL;
	if (*tr->o.trace) {
		ST_TRY(trace_open(&tr->trace, tr->o.trace));
		tr->s.store.trace = tr->s.exec.trace = tr->up.trace = &tr->trace;
		tr->trace_until = tr->step + tr->o.trace_steps;
	}
	snprintf(path, sizeof path, "%s/metrics.jsonl", tr->o.out);
	tr->metrics = fopen(path, "a+"); /* read too: rundir_metrics_trim */
	ST_CHECK(tr->metrics, "choose a writable --out directory", "cannot open %s: %s", path,
		 strerror(errno));
	rundir_metrics_trim(fileno(tr->metrics), path);
	return ST_OK;
}

void trainer_close(struct st_trainer *tr)
{
	if (tr->metrics)
		fclose(tr->metrics);
	data_close(&tr->data);
	updater_free(&tr->up); /* finishes queued updates before the store goes */
	ckpt_finish(tr);       /* and a checkpoint still being written */
	pthread_mutex_destroy(&tr->ck.mu);
	pthread_cond_destroy(&tr->ck.cv);
	session_close(&tr->s); /* joins the transfer threads */
	trace_close(&tr->trace); /* no thread records any more */
	plan_free(&tr->plan);
	free(tr->grad_sumsq);
	if (tr->per_layer)
		perlayer_free(&tr->pl);
	optim_free(&tr->opt);
	free(tr->no_grad);
	free(tr->tokens);
	free(tr->targets);
	if (tr->lock_fd >= 0)
		close(tr->lock_fd); /* the run directory is free */
	for (int i = 0; i < ST_TOK_FILES; i++)
		free(tr->tok_text[i]);
	free(tr->cfg_text);
	memset(tr, 0, sizeof *tr);
	tr->lock_fd = -1;
}

int evaluate(struct st_session *s, const struct st_data *d, int b, int t, long max_tokens,
	     double *loss, long *n_tokens)
{
	ST_CHECK(d->has_val, "give a validation shard", "no validation data");
	ST_TRY(session_exec(s, b, t));
	const long windows = data_eval_windows(d, t, max_tokens);
	/* micro-batches in groups, each unit's weights read once per group
	 * where they stream (engine/exec.h); one at a time where they do not,
	 * or where the group's memory cannot be had */
	const long batches = (windows + b - 1) / b;
	int k = exec_eval_group_max(&s->exec);
	if (k > batches)
		k = batches > 0 ? (int)batches : 1;
	float *hidden = NULL;
	if (k > 1) {
		const int old = st_log_mute(1);
		hidden = st_aligned_alloc((size_t)k * exec_eval_row_floats(&s->exec) * sizeof(float));
		st_log_mute(old);
		if (!hidden) {
			st_log_warn("no memory for a group of %d evaluation micro-batches: each streams "
				    "the offloaded weights on its own", k);
			k = 1;
		}
	}
	const size_t n = (size_t)b * t;
	const int old = st_log_mute(k > 1); /* a group's tokens may not fit: one then */
	int32_t *tok = st_malloc((size_t)k * n * sizeof *tok);
	int32_t *tgt = st_malloc((size_t)k * n * sizeof *tgt);
	st_log_mute(old);
	if ((!tok || !tgt) && k > 1) {
		free(tok);
		free(tgt);
		free(hidden);
		hidden = NULL;
		k = 1;
		tok = st_malloc(n * sizeof *tok);
		tgt = st_malloc(n * sizeof *tgt);
	}
	if (!tok || !tgt) {
		free(tok);
		free(tgt);
		free(hidden);
		return ST_FAIL;
	}
	double sum = 0;
	long count = 0;
	for (long w = 0; w < windows; w += (long)k * b) {
		int g = 0;
		for (; g < k && w + (long)g * b < windows; g++) {
			const long w0 = w + (long)g * b;
			int32_t *gt = tgt + g * n;
			data_val_batch(d, tok + g * n, gt, b, t, w0);
			for (int r = 0; r < b; r++) /* rows past the requested windows are ignored */
				if (w0 + r >= windows)
					for (int i = 0; i < t; i++)
						gt[(size_t)r * t + i] = -1;
		}
		if (hidden) {
			exec_eval_group(&s->exec, tok, tgt, g, hidden, &sum, &count);
		} else {
			long c = 0;
			sum += exec_micro_step(&s->exec, tok, tgt, 0.0f, &c);
			count += c;
		}
	}
	free(hidden);
	free(tok);
	free(tgt);
	*loss = count ? sum / (double)count : NAN; /* none: every target masked (prompts) */
	*n_tokens = count;
	/* a transfer that failed (a block whose checksum does not match, EIO)
	 * left its slot's stale bytes in the sums: no loss then (the store said
	 * why) */
	return store_ok(&s->store);
}

static int run_eval(struct st_trainer *tr, struct st_progress *pg)
{
	if (!tr->data.has_val)
		return ST_OK;
	double loss;
	long n;
	const double t0 = now_s();
	if (!tr->step && getenv("STRATA_FAULT_TERM_IN_EVAL")) {
		/* test hook: a SIGTERM during the step-0 evaluation, taken by the
		 * watcher (up to 10 s) before the evaluation ends */
		kill(getpid(), SIGTERM);
		for (int i = 0; i < 1000 && !interrupt_signal(); i++)
			usleep(10000);
	}
	ST_TRY(evaluate(&tr->s, &tr->data, tr->o.micro_batch, tr->o.seq_len, tr->o.eval_tokens,
			&loss, &n));
	progress_eval(pg, tr->step, loss, n, now_s() - t0);
	if (!n) {
		/* the windows scored hold only masked targets: no loss, said once,
		 * and training goes on (its checkpoints are not lost to it) */
		if (!tr->no_val_targets_said && tr->o.eval_tokens)
			st_log_warn("the first %ld held-out tokens hold no loss targets (prompts only, "
				    "under the loss mask): no held-out loss; give a larger --eval-tokens "
				    "(0: the whole val.bin)",
				    tr->o.eval_tokens);
		else if (!tr->no_val_targets_said)
			st_log_warn("val.bin holds no loss target that fits a --seq-len %d window "
				    "(prompts only, under the loss mask): no held-out loss; a longer "
				    "--seq-len fits more completions",
				    tr->o.seq_len);
		tr->no_val_targets_said = 1;
		rundir_metrics_write(tr, "{\"step\": %ld, \"val_loss\": null, \"val_ppl\": null, "
				  "\"val_tokens\": 0, \"elapsed_s\": %.3f}\n",
			      tr->step, now_s() - tr->loop_t0);
		return ST_OK;
	}
	tr->last_val_loss = loss;
	if (!isfinite(loss))
		st_log_warn("the held-out loss at step %ld is not finite: the model's outputs "
			    "overflow", tr->step);
	char l[32], p[32];
	rundir_metrics_write(tr, "{\"step\": %ld, \"val_loss\": %s, \"val_ppl\": %s, \"val_tokens\": %ld, "
			  "\"elapsed_s\": %.3f}\n",
		      tr->step, st_json_num(l, sizeof l, "%.6f", loss),
		      st_json_num(p, sizeof p, "%.4f", exp(loss)), n, now_s() - tr->loop_t0);
	return ST_OK;
}

/* One optimizer step: all micro-batches, norm, clip, per-unit updates.
 *
 * Without per-layer GaLore the updates are queued to the updater (trainer/
 * updater.h) and run while the next step's forward proceeds; every gradient
 * slab is zero when a step starts (fresh, or discarded by its last update).
 * Per-layer GaLore consumes each layer's gradient in the executor's callback
 * and applies its updates here. */
/* A GaLore projector that was due at a zero gradient (galore_refresh keeps
 * the previous one), said once, naming the first such matrix: the optimizer
 * may note it on its own thread a step after it ran. */
static void note_galore_zero(struct st_trainer *tr)
{
	const int i = tr->opt.g_zero_first ? __atomic_load_n(tr->opt.g_zero_first, __ATOMIC_RELAXED)
					   : -1;
	if (i < 0 || tr->galore_zero_said++)
		return;
	st_log_warn("GaLore: %s got a zero gradient when its projector was due (a step without "
		    "loss targets, or weights that start at zero): it keeps its previous subspace, "
		    "or the first r coordinates until its next refresh, %d updates on; other such "
		    "matrices are not named",
		    tr->s.model.params[i].name, tr->o.galore_update_gap);
}

static int train_step(struct st_trainer *tr, double *loss_out, double *gnorm_out, double *lr_out)
{
	note_galore_zero(tr);
	struct st_session *s = &tr->s;
	const struct st_ops *ops = s->ops;
	const struct st_model *m = &s->model;
	const int B = tr->o.micro_batch, T = tr->o.seq_len, A = tr->o.grad_accum;
	const long step = tr->step + 1;
	const size_t per = (size_t)B * T;

	long n_targets = 0;
	for (int j = 0; j < A; j++) {
		data_train_batch(&tr->data, tr->tokens + j * per, tr->targets + j * per, B, T,
				 (uint64_t)tr->o.seed, step, j);
		for (size_t i = 0; i < per; i++)
			n_targets += tr->targets[j * per + i] >= 0;
	}
	struct st_perlayer *pl = tr->per_layer ? &tr->pl : NULL;
	if (pl) {
		/* every gradient slab is zero here, as without per-layer updates:
		 * the layers' shared one is zeroed by the hook after each layer,
		 * the embedding's and head's discarded by their update (or by the
		 * skip) */
		perlayer_begin(pl, tr->updates + 1);
		s->exec.on_unit_grad = perlayer_on_unit;
		s->exec.on_unit_grad_ctx = pl;
	}

	/* a step whose windows hold no loss target (all prompt, with masks) has
	 * a zero gradient and loss 0, not a division by zero */
	const float scale = n_targets ? 1.0f / (float)n_targets : 0.0f;
	double loss_sum = 0;
	/* zero unless a backward runs (none does when no window has a target) */
	memset(tr->grad_sumsq, 0, (size_t)m->n_units * sizeof *tr->grad_sumsq);
	for (int j = 0; j < A; j++) {
		long c;
		/* the last micro-batch leaves each unit's gradient norm behind */
		s->exec.grad_sumsq = !pl && j == A - 1 ? tr->grad_sumsq : NULL;
		loss_sum += exec_micro_step(&s->exec, tr->tokens + j * per, tr->targets + j * per,
					    scale, &c);
		/* no target, no backward: the layers' zero gradients are handed to
		 * per-layer GaLore here (its accumulators held another step's) */
		for (int u = 0; pl && !n_targets && u < m->n_units; u++)
			perlayer_on_unit(pl, u);
		if (pl)
			perlayer_end_micro(pl);
	}
	s->exec.grad_sumsq = NULL;
	ST_TRY(store_ok(&s->store));
	const int head = model_head_unit(m);
	/* test hook: the head's first gradient made NaN, or the finite value
	 * STRATA_FAULT_GRAD_VALUE, at this step */
	const char *fault = getenv("STRATA_FAULT_NAN_AT_STEP");
	if (fault && atol(fault) == step) {
		float *g = store_acquire(&s->store, head, ST_SLAB_G);
		const char *value = getenv("STRATA_FAULT_GRAD_VALUE");
		g[0] = value ? strtof(value, NULL) : NAN;
		tr->grad_sumsq[head] = ops->sumsq(g, m->units[head].numel);
		store_release(&s->store, head, ST_SLAB_G, 1);
	}
	double sumsq = 0; /* in unit order, whatever order the norms came in */
	for (int u = 0; u < m->n_units; u++) {
		if (!pl)
			sumsq += tr->grad_sumsq[u];
		else if (m->units[u].kind == ST_UNIT_LAYER)
			sumsq += perlayer_unit_sumsq(pl, u);
		else {
			const float *g = store_acquire_as(&s->store, u, ST_SLAB_G, ST_ACCESS_READ);
			sumsq += ops->sumsq(g, m->units[u].numel);
			store_release(&s->store, u, ST_SLAB_G, 0);
		}
	}
	const double gnorm = sqrt(sumsq), loss = n_targets ? loss_sum / (double)n_targets : 0.0;
	*loss_out = loss;
	*gnorm_out = gnorm;
	*lr_out = 0;
	/* A finite gradient whose clipped norm reaches sqrt(FLT_MAX) can hold an
	 * element whose square is inf in fp32: Adam's v would become inf (an
	 * 8-bit block's absmax with it, zeroing the block's other codes and
	 * making them NaN at the next decode). Such a step is skipped as a
	 * non-finite one is. Only reachable with --grad-clip 0 or a huge clip. */
	const double clipped = tr->o.grad_clip > 0 && gnorm > tr->o.grad_clip ? tr->o.grad_clip : gnorm;
	const int overflow = isfinite(gnorm) && clipped >= 0x1p64;
	if (!isfinite(gnorm) || !isfinite(loss) || overflow) {
		/* Skip the update, keep every weight and moment as it was (never zero
		 * them, as bitsandbytes does), count it, and stop after too many. */
		if (pl)
			perlayer_undo(pl);
		updater_submit(&tr->up, 0, 0, 0, 0); /* only clears the gradients */
		tr->step = step;
		tr->tokens_seen += (double)per * A;
		tr->skipped++;
		st_log_warn("step %ld: %s (loss %g, gradient norm %g): update skipped (%ld so far, limit %d)",
			    step,
			    !isfinite(loss)	 ? "non-finite loss"
			    : !isfinite(gnorm) ? "non-finite gradient"
					       : "gradient too large for fp32 (its square overflows)",
			    loss, gnorm, tr->skipped, tr->o.max_skipped_steps);
		char ls[32], gs[32]; /* numbers, null where not finite (JSON has no nan) */
		rundir_metrics_write(tr, "{\"step\": %ld, \"skipped\": true, \"loss\": %s, \"grad_norm\": %s}\n",
			      step, st_json_num(ls, sizeof ls, "%g", loss),
			      st_json_num(gs, sizeof gs, "%g", gnorm));
		ST_CHECK(tr->skipped <= tr->o.max_skipped_steps,
			 "lower --lr, or resume from the last checkpoint with different settings",
			 "%ld step%s skipped for non-finite or overflowing gradients (limit "
			 "--max-skipped-steps %d); stopping",
			 tr->skipped, tr->skipped == 1 ? "" : "s", tr->o.max_skipped_steps);
		return ST_OK;
	}
	float clip = 1.0f;
	if (tr->o.grad_clip > 0 && gnorm > tr->o.grad_clip)
		clip = (float)(tr->o.grad_clip / (gnorm + 1e-6));
	const double lr = lr_at(&tr->o, step, tr->total_steps, tr->warmup);
	tr->updates++;
	updater_submit(&tr->up, 1, tr->updates, (float)lr, clip);
	tr->step = step;
	tr->tokens_seen += (double)per * A;
	*lr_out = lr;
	if (!n_targets) {
		/* no loss to report (0 would read as a perfect one); the update ran
		 * on momentum and weight decay alone, as any optimizer's does with
		 * a zero gradient */
		*loss_out = NAN;
		if (!tr->no_targets_said++)
			st_log_warn("step %ld: its windows hold no loss target (prompts only, under the "
				    "loss mask): no loss, and the update moves the weights by momentum "
				    "and weight decay alone; a longer --seq-len fits more completions",
				    step);
	}
	return ST_OK;
}

/* Every queued update done and written back (before evaluation reads the
 * weights from outside the executor, checkpoints, and the end). */
static int settle(struct st_trainer *tr)
{
	updater_drain(&tr->up);
	store_drain(&tr->s.store);
	return store_ok(&tr->s.store);
}

/* The queue counters. They run over the whole process, and the queues work
 * for evaluations and checkpoints too (an update can finish under the next
 * evaluation), so the report takes them over the training loop, from q_snap
 * at its start, against the loop's wall time. */
static void q_snap(const struct st_trainer *tr, double v[5])
{
	const struct st_store *s = &tr->s.store;
	v[0] = s->wait_s[0];
	v[1] = s->q_copy.busy_s;
	v[2] = s->q_disk.busy_s;
	v[3] = tr->up.busy_s;
	v[4] = tr->up.wait_s;
}

/* How busy each queue was over the training loop, and which one bounds the
 * step: compute (the main thread, less its waits), the copy and disk
 * transfer queues, and the optimizer thread. Printed, and appended to
 * metrics.jsonl as {"queues": ...} for bench/offload. */
static void report_queues(struct st_trainer *tr)
{
	const struct st_store *s = &tr->s.store;
	const double wall = now_s() - tr->loop_t0;
	if (wall <= 0 || !tr->timed_steps)
		return;
	double q[5];
	q_snap(tr, q);
	for (int i = 0; i < 5; i++)
		q[i] -= tr->q_start[i];
	const double waits = q[0] + q[4];
	const double busy[4] = {wall - waits, q[1], q[2], q[3]};
	const char *names[4] = {"compute", "copy", "disk", "optimizer"};
	int bound = 0;
	for (int i = 1; i < 4; i++)
		if (busy[i] > busy[bound])
			bound = i;
	st_log_info("queues over %ld steps (%.2f s/step; the loop took %.2f s with evaluations and "
		    "checkpoints): compute %.0f%%, copy %.0f%%, disk %.0f%%, optimizer %.0f%% busy; "
		    "the main thread waited %.2f s for transfers and %.2f s for updates; bound by %s",
		    tr->timed_steps, tr->train_s / (double)tr->timed_steps, wall, 100 * busy[0] / wall,
		    100 * busy[1] / wall, 100 * busy[2] / wall, 100 * busy[3] / wall, q[0], q[4],
		    names[bound]);
	if (tr->plan.t.step_s > 0)
		st_log_info("step time: measured %.3f s, the plan predicted %.3f s (measured / predicted "
			    "%.2f)", tr->train_s / (double)tr->timed_steps, tr->plan.t.step_s,
			    tr->train_s / (double)tr->timed_steps / tr->plan.t.step_s);
	if (s->io_ready)
		st_log_info("disk: read %.2f GiB, wrote %.2f GiB (%.2f GB/s while busy)",
			    (double)s->io.bytes_read / 1073741824.0,
			    (double)s->io.bytes_written / 1073741824.0,
			    s->io.busy_s > 0 ? (double)(s->io.bytes_read + s->io.bytes_written) /
						   s->io.busy_s / 1e9
					     : 0.0);
	rundir_metrics_write(tr,
		"{\"queues\": {\"steps\": %ld, \"steps_s\": %.4f, \"wall_s\": %.4f, \"compute_s\": %.4f, \"copy_s\": %.4f, "
		"\"disk_s\": %.4f, \"optimizer_s\": %.4f, \"wait_transfer_s\": %.4f, "
		"\"wait_update_s\": %.4f, \"disk_read_bytes\": %llu, \"disk_write_bytes\": %llu, "
		"\"bound\": \"%s\", \"predicted_step_s\": %.4f}}\n",
		tr->timed_steps, tr->train_s, wall, busy[0], busy[1], busy[2], busy[3], q[0], q[4],
		(unsigned long long)s->io.bytes_read, (unsigned long long)s->io.bytes_written,
		names[bound], tr->plan.t.step_s);
}

/* The run stopped by a signal before its first step: nothing trained,
 * so nothing to save (a resumed run's checkpoint is already on disk). */
static int stop_untrained(struct st_trainer *tr)
{
	tr->interrupted = interrupt_signal();
	/* what the step-0 evaluation and the start marker wrote goes too: the
	 * run directory is as it was (a fresh run's then holds nothing, and
	 * goes) */
	if (tr->metrics && tr->metrics_at_start >= 0 &&
	    ftruncate(fileno(tr->metrics), (off_t)tr->metrics_at_start) != 0)
		st_log_warn("cannot cut %s/metrics.jsonl back to where this run began: %s",
			    tr->o.out, strerror(errno));
	if (tr->step)
		st_log_warn("stopped by %s before step %ld: nothing trained since the checkpoint "
			    "at step %ld, nothing new saved; go on with the same command",
			    interrupt_name(tr->interrupted), tr->step + 1, tr->step);
	else
		st_log_warn("stopped by %s before the first step: nothing trained, nothing saved; "
			    "start again with the same command",
			    interrupt_name(tr->interrupted));
	return ST_OK;
}

int trainer_run(struct st_trainer *tr)
{
	const struct st_model *m = &tr->s.model;
	const double flops_tok = model_flops_per_token(m, tr->o.seq_len);
	const double tok_step = (double)tr->o.micro_batch * tr->o.seq_len * tr->o.grad_accum;
	char b1[32];
	st_log_info("model: %zu parameters (%s), %d layers, dim %d, heads %d/%d, ffn %d, vocab %d%s",
		    m->numel, fmt_bytes(b1, sizeof b1, (double)m->numel * 4), m->cfg.n_layers,
		    m->cfg.dim, m->cfg.n_heads, m->cfg.n_kv_heads, m->cfg.ffn_dim,
		    m->cfg.vocab_size, m->cfg.tied ? ", tied head" : "");
	/* a CPU that takes bf16 matmuls, running fp32: said, as the option is
	 * easy to miss and about doubles the step (README, bf16 matmuls) */
	const char *impl;
	const int bf16_offer =
		!tr->s.model.matmul_bf16 && ops_bf16_native(tr->s.ops, &impl) && ops_bf16_amx(impl);
	st_log_info("backend: %s, %d thread%s, matmul %s%s", tr->s.ops->name, omp_get_max_threads(),
		    omp_get_max_threads() == 1 ? "" : "s", session_matmul_name(&tr->s),
		    bf16_offer ? " (--matmul-precision bf16 runs on this CPU: bf16 inputs, fp32 "
				 "sums, up to about twice the speed)"
			       : "");
	/* a resumed run: this leg's steps, at this leg's size (earlier ones may
	 * have been another: --grad-accum changed), and where they go */
	const long to_go = tr->total_steps > tr->step ? tr->total_steps - tr->step : 0;
	char span[96] = "";
	if (tr->step && to_go)
		snprintf(span, sizeof span, " from step %ld to %ld", tr->step, tr->total_steps);
	if (tr->step && !to_go)
		st_log_info("training: %s, nothing left to train (the checkpoint is at step %ld, the "
			    "run ends at step %ld), resumed",
			    tr->o.optimizer, tr->step, tr->total_steps);
	else
		st_log_info("training: %s, %ld step%s of %.0f tokens (%d x %d x %d)%s, lr %g, warmup "
			    "%ld%s",
			    tr->o.optimizer, to_go, to_go == 1 ? "" : "s", tok_step, tr->o.micro_batch,
			    tr->o.seq_len, tr->o.grad_accum, span, tr->o.lr, tr->warmup,
			    tr->step ? ", resumed" : "");
	/* windows are drawn at random offsets (data.c): "passes" counts tokens
	 * drawn over tokens held, not epochs of a shuffled order */
	const double held = (double)tr->data.train.n_tokens;
	/* a resumed run: the tokens already seen (at the steps' sizes then),
	 * and this leg's steps at today's size */
	const double left =
		tr->total_steps > tr->step ? tok_step * (double)(tr->total_steps - tr->step) : 0;
	const double drawn = tr->tokens_seen + left;
	char seen[96] = "";
	if (tr->step)
		snprintf(seen, sizeof seen, ", %.0f of them seen before the resume", tr->tokens_seen);
	st_log_info("data: %.0f training tokens; the run draws %.3g times that (%.0f tokens%s, in "
		    "windows at random offsets)",
		    held, drawn / held, drawn, seen);
	if (tok_step > held)
		st_log_warn("one step draws %.0f tokens, more than the %.0f the training data holds: "
			    "each step sees some of them several times (give more data, or a smaller "
			    "--micro-batch or --grad-accum)",
			    tok_step, held);
	if (tr->step)
		st_log_info("resumed from %s at step %ld; checkpoints go to %s", tr->ckpt_loaded,
			    tr->step, tr->o.out);
	/* oneDNN's sgemm rounds differently for another thread count: the run
	 * goes on correctly, but not bit for bit as it would have */
	if (tr->step && tr->ckpt_threads && tr->ckpt_threads != omp_get_max_threads() &&
	    !strcmp(tr->s.ops->name, "cpu"))
		st_log_warn("the checkpoint's run used %d thread%s, this one %d: the matmuls round "
			    "differently, so the run will not match an uninterrupted one bit for bit "
			    "(give --threads %d for that)",
			    tr->ckpt_threads, tr->ckpt_threads == 1 ? "" : "s", omp_get_max_threads(),
			    tr->ckpt_threads);
	if (tr->step && tr->skipped > tr->o.max_skipped_steps && tr->step < tr->total_steps)
		st_log_warn("the run has skipped %ld step%s already, more than --max-skipped-steps %d: "
			    "the next skip stops it",
			    tr->skipped, tr->skipped == 1 ? "" : "s", tr->o.max_skipped_steps);
	long later_first = 0;
	const int later = tr->step < tr->total_steps
				  ? ckpt_count_later(tr->o.out, tr->step, LONG_MAX, &later_first)
				  : 0;
	if (later)
		st_log_warn("%s holds %d checkpoint%s of steps after %ld (the first: step-%06ld), from "
			    "the run resumed here at an earlier step: this run replaces those it saves at "
			    "the same steps and leaves the others, which --keep-ckpts neither counts nor "
			    "removes; give --out DIR to keep this run apart",
			    tr->o.out, later, later == 1 ? "" : "s", tr->step, later_first);
	if (tr->step && tr->step >= tr->total_steps && tr->o.steps > 0)
		st_log_warn("the checkpoint is at step %ld and this run ends at step %ld: nothing to "
			    "train; give --steps above %ld to go on",
			    tr->step, tr->total_steps, tr->step);
	else if (tr->step && tr->step >= tr->total_steps)
		st_log_warn("the checkpoint is at step %ld, having seen %.0f tokens of the %.0f that "
			    "--max-tokens allows: nothing to train; give a larger --max-tokens (or "
			    "--steps) to go on",
			    tr->step, tr->tokens_seen, tr->o.max_tokens);
	if (tr->step < tr->total_steps) { /* with nothing to train, no memory to report */
		store_report(&tr->s.store);
		/* what the state would take as fp32 AdamW, for comparison */
		char b2[32], b3[32];
		st_log_info("optimizer state: %s, %s (%.3f B/param; fp32 AdamW: %s, 8 B/param)",
			    optim_kind_name(tr->opt.cfg.kind),
			    fmt_bytes(b2, sizeof b2, (double)tr->opt.total_bytes),
			    (double)tr->opt.total_bytes / (double)m->numel,
			    fmt_bytes(b3, sizeof b3, 8.0 * (double)m->numel));
		if (tr->opt.galore_weights) {
			size_t gbytes = 0;
			int last_start = 1, rmin = INT_MAX, rmax = 0;
			for (int i = 0; i < m->n_params; i++)
				if (tr->opt.ps[i].galore) {
					gbytes += optim_param_state_bytes(&tr->opt, i);
					if (tr->opt.ps[i].start > last_start)
						last_start = tr->opt.ps[i].start;
					rmin = tr->opt.ps[i].rank < rmin ? tr->opt.ps[i].rank : rmin;
					rmax = tr->opt.ps[i].rank > rmax ? tr->opt.ps[i].rank : rmax;
				}
			/* the ranks the matrices got (a fraction of the width, or capped
			 * at a matrix's smaller side), not only the option as given */
			char ranks[96];
			if (rmin == rmax)
				snprintf(ranks, sizeof ranks, "rank %d", rmin);
			else
				snprintf(ranks, sizeof ranks, "ranks %d-%d", rmin, rmax);
			if (tr->o.galore_rank != (double)rmin || rmin != rmax)
				snprintf(ranks + strlen(ranks), sizeof ranks - strlen(ranks),
					 " (--galore-rank %g)", tr->o.galore_rank);
			st_log_info("GaLore: %zu weights in attention/MLP matrices, %s, first projectors "
				    "over updates 1-%d, refresh every %d updates (%s), scale %g: their state %s "
				    "(%.3f B/weight; AdamW: %s, 8 B/weight)",
				    tr->opt.galore_weights, ranks, last_start,
				    tr->o.galore_update_gap, tr->o.galore_proj, tr->o.galore_scale,
				    fmt_bytes(b2, sizeof b2, (double)gbytes),
				    (double)gbytes / (double)tr->opt.galore_weights,
				    fmt_bytes(b3, sizeof b3, 8.0 * (double)tr->opt.galore_weights));
			/* a matrix trains from its first projector on: one that gets it
			 * after the run's last update never trains */
			const long max_updates = tr->updates + (tr->total_steps - tr->step);
			int late = 0, n_gal = 0;
			for (int i = 0; i < m->n_params; i++) {
				n_gal += tr->opt.ps[i].galore;
				late += tr->opt.ps[i].galore && tr->opt.ps[i].start > max_updates;
			}
			char fix[160];
			if (tr->step)
				snprintf(fix, sizeof fix, "give a longer --steps (the resumed run's "
					 "spread is fixed)");
			else if (max_updates > 1)
				snprintf(fix, sizeof fix, "give --galore-start-spread %ld or less (1: all "
					 "at the first update), or a longer --steps",
					 max_updates);
			else
				snprintf(fix, sizeof fix, "give --galore-start-spread 1 (all at the first "
					 "update), or a longer --steps");
			if (late)
				st_log_warn("%d of the %d GaLore matrices get their first projector after "
					    "the run's last update (%ld): they will not train; %s",
					    late, n_gal, max_updates, fix);
			double gb = tr->per_layer ? (double)tr->pl.acc_bytes : 0;
			for (int u = 0; u < m->n_units; u++) {
				const struct st_slab *sl = store_slab(&tr->s.store, u, ST_SLAB_G);
				if (sl->shared_from < 0)
					gb += (double)sl->bytes;
			}
			st_log_info("gradients: %s (%s; AdamW: %s)", fmt_bytes(b2, sizeof b2, gb),
				    tr->per_layer ? "per-layer: one layer's gradient, low-rank accumulators"
						  : "every unit's gradient kept (--galore-per-layer false)",
				    fmt_bytes(b3, sizeof b3, 4.0 * (double)m->numel));
		}
	}

	/* a signal during the setup (a large model's load, the offload files'
	 * allocation) or the step-0 evaluation stops the run before it trains:
	 * nothing new to save */
	if (tr->step < tr->total_steps && interrupt_signal())
		return stop_untrained(tr);
	/* what a run killed in or after its last save left: with nothing to
	 * train no save comes to tidy it, so the resume does (under the lock
	 * only: without flock another run may be saving there) */
	if (*tr->ckpt_loaded && tr->lock_held)
		ckpt_tidy(tr->o.out, tr->ckpt_loaded);
	if (tr->step < tr->total_steps && *tr->ckpt_loaded)
		ST_TRY(ckpt_mark_resumed(tr));
	if (tr->step < tr->total_steps) {
		tr->metrics_at_start =
			tr->metrics ? (long)lseek(fileno(tr->metrics), 0, SEEK_END) : -1;
		rundir_metrics_start(tr);
	}
	struct st_progress *pg = &tr->pg;
	progress_init(pg, tr->o.progress, tr->total_steps, tr->step, tr->o.log_interval,
		      tr->o.eval_interval, tr->data.has_val);
	tr->loop_t0 = now_s();
	q_snap(tr, tr->q_start);
	if (tr->step == 0 && tr->o.eval_interval > 0)
		ST_TRY(run_eval(tr, pg));
	/* From here a signal (interrupt.h) is read once per step, after it:
	 * the step is then saved whatever the schedule says, and the loop
	 * ends. One the watcher took before (said as stopping before the first
	 * step: it reads the flag after recording the signal) is seen here. */
	interrupt_training();
	if (tr->step < tr->total_steps && interrupt_signal()) {
		progress_done(pg);
		return stop_untrained(tr);
	}
	int stop = 0;
	while (tr->step < tr->total_steps && !stop) {
		ST_TRY(ckpt_poll(tr));
		double t0 = now_s(), loss, gnorm, lr;
		const long skipped_before = tr->skipped;
		ST_TRY(train_step(tr, &loss, &gnorm, &lr));
		double dt = now_s() - t0;
		tr->train_s += dt;
		tr->timed_steps++;
		if (tr->trace.f && tr->step >= tr->trace_until) {
			pthread_mutex_lock(&tr->trace.mu);
			tr->trace.on = 0;
			pthread_mutex_unlock(&tr->trace.mu);
		}
		if (tr->skipped == skipped_before) { /* a skipped step was logged already */
			if (!isnan(loss)) /* NaN: no loss target in the step */
				tr->last_loss = loss;
			char ls[32];
			rundir_metrics_write(tr,
				"{\"step\": %ld, \"loss\": %s, \"lr\": %.6g, \"grad_norm\": %.6g, "
				"\"tokens\": %.0f, \"step_s\": %.4f, \"predicted_s\": %.4f, \"tok_per_s\": %.1f, "
				"\"gflops\": %.2f, \"elapsed_s\": %.3f}\n",
				tr->step, st_json_num(ls, sizeof ls, "%.6f", loss), lr, gnorm, tr->tokens_seen,
				dt, tr->plan.t.step_s, tok_step / dt, flops_tok * tok_step / dt / 1e9,
				now_s() - tr->loop_t0);
			progress_step(pg, tr->step, loss, lr, tok_step, flops_tok * tok_step, dt);
		}
		const int last = tr->step == tr->total_steps;
		if (last || (tr->o.eval_interval > 0 && tr->step % tr->o.eval_interval == 0))
			ST_TRY(run_eval(tr, pg));
		/* A checkpoint due at a skipped step waits for the next step that
		 * updates (or the last): a run whose weights have gone bad and
		 * whose every later step is skipped then writes no checkpoints
		 * that would push the good ones out under --keep-ckpts. */
		const int skipped = tr->skipped != skipped_before;
		stop = interrupt_signal();
		const int due = last || stop || tr->ckpt_deferred ||
				(tr->o.ckpt_interval > 0 && tr->step % tr->o.ckpt_interval == 0);
		if (due && skipped && !last && !stop) {
			if (!tr->ckpt_deferred)
				st_log_info("step %ld was skipped: its checkpoint waits for the next step "
					    "that updates",
					    tr->step);
			tr->ckpt_deferred = 1;
		} else if (due) {
			tr->ckpt_deferred = 0;
			progress_pause(pg);
			const double ts = now_s();
			ST_TRY(settle(tr)); /* the step's updates: part of its time */
			tr->train_s += now_s() - ts;
			if (last && tr->plan.place.offloaded) /* before the checkpoint's own I/O */
				report_queues(tr);
			/* per-layer GaLore updates in this thread, past the hook: wait */
			ST_TRY(tr->per_layer ? ckpt_save(tr) : ckpt_begin(tr));
		}
	}
	progress_done(pg);
	const double ts = now_s();
	ST_TRY(settle(tr));
	note_galore_zero(tr); /* one the last updates noted */
	tr->train_s += now_s() - ts;
	ST_TRY(ckpt_finish(tr));
	if (stop && tr->step < tr->total_steps) {
		tr->interrupted = stop;
		st_log_warn("stopped by %s at step %ld of %ld, saved; go on with: strata train "
			    "--resume %s",
			    interrupt_name(stop), tr->step, tr->total_steps, tr->o.out);
	}
	return ST_OK;
}
