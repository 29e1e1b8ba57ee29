/* The training loop: data -> micro-batches -> gradient accumulation ->
 * global-norm clipping -> per-unit optimizer updates -> lr schedule ->
 * evaluation -> checkpoints -> resume. */
#ifndef ST_TRAINER_H
#define ST_TRAINER_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/plan.h"
#include "io/fsutil.h"
#include "engine/session.h"
#include "optim/optim.h"
#include "trainer/data.h"
#include "trainer/options.h"
#include "trainer/perlayer.h"
#include "trainer/progress.h"
#include "engine/updater.h"
#include "util/trace.h"

/* A checkpoint being written in the background (trainer/checkpoint.c): its
 * capture thread copies each unit's weights and then each unit's optimizer
 * state into the checkpoint files in unit order; an update of unit u waits
 * (ckpt_wait_unit) until both of u's are captured, so the files hold the
 * state of the checkpoint's step exactly. */
struct st_ckpt_async {
	pthread_t thread;
	int running;          /* a capture thread is not joined yet */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int w_done, s_done;   /* units whose weights / state are captured */
	int rc;
	long step, updates;
	char id[17];          /* its "ckpt_id" */
	char name[64], tmp[4096];
	double t0, pause_s, wait_s; /* when it began; the pause; updates' waits */
	int finished;         /* the capture thread is done: its message may be said */
	double written_s, waited_s; /* for that message */
	int nonfinite;        /* the save was refused for inf or NaN weights or state */
	int in_place;         /* the directory was renamed into place (latest may lag) */
	int bad_unit;         /* the first unit whose weights hold one, or -1 */
	int scanned_unit;     /* the unit checked last (asked for once per parameter) */
	long bad_at;          /* its element in the unit's slab */
	float bad_val;
};

/* The tokenizer files a checkpoint carries, and a model directory may hold. */
#define ST_TOK_FILES 5
/* Their names, tokenizer.json first (checkpoint.c). */
extern const char *const st_tok_files[ST_TOK_FILES];

struct st_trainer {
	struct st_train_opts o;
	struct st_session s;
	struct st_optim opt;
	struct st_data data;
	struct st_plan plan;   /* every slab's home, activations, device updates (engine/plan.h) */
	struct st_updater up;  /* per-unit updates */
	unsigned char *no_grad; /* per unit: per-layer GaLore's layers, updated from
				 * accumulators, not a gradient slab (up.no_grad) */
	double *grad_sumsq;    /* per unit, from the executor */
	double train_s;        /* wall time of the training steps of this process */
	double loop_t0;        /* when the training loop began, and the queue counters then */
	double q_start[5];     /* (q_snap: transfer waits, copy, disk and optimizer busy,
				* update waits) */
	long timed_steps;
	int per_layer;         /* GaLore per-layer updates (pl in use) */
	struct st_perlayer pl;
	long step;             /* steps completed (updates + skipped) */
	long updates;          /* optimizer updates applied (AdamW's bias-correction t) */
	long skipped;          /* steps skipped for a non-finite loss or gradient */
	long total_steps, warmup;
	long run_warmup;       /* the warmup the resumed checkpoint's run used; -1: unknown */
	double tokens_seen;
	int32_t *tokens, *targets; /* (grad_accum, B, T) of the current step */
	FILE *metrics;          /* metrics.jsonl, written through its fd (rundir_metrics_write) */
	int metrics_lost;       /* a write failed: no more records */
	long metrics_at_start;  /* metrics.jsonl's length before this run wrote to it (-1:
				 * not yet): a run stopped before its first step cuts it back */
	int no_val_targets_said; /* an evaluation found no target: warned once */
	int no_targets_said;     /* a training step had no target: warned once */
	int galore_zero_said;    /* a GaLore projector due at a zero gradient: warned once */
	int interrupted;        /* the signal that stopped the run before its end, or 0 */
	int ckpt_deferred;      /* a checkpoint fell due at a skipped step: written at the
				 * next step that updates */
	double last_loss, last_val_loss;
	char ckpt_loaded[4096];
	char convert_note[512]; /* the resumed state's conversion, said once the run starts */
	int ckpt_threads; /* the threads the loaded checkpoint's run used (0: not saved) */
	/* The run's identity and its history, in trainer.json (struct
	 * ckpt_ids): the run's id, drawn at a fresh start and carried by every
	 * checkpoint of the run and of its resumes, tells a checkpoint of
	 * another run copied into a run directory from its own; each
	 * checkpoint's own id and its predecessor's step and id (the last one
	 * saved, or the one resumed from; step -1 and id "": none) chain this
	 * run's checkpoints, for --keep-ckpts and a `latest` that lags. */
	char run_id[17];
	long prev_ckpt_step;
	char prev_ckpt_id[17];
	char model_dir[4096];   /* where the weights came from (its tokenizer files travel on) */
	char *tok_text[ST_TOK_FILES]; /* those files as they were at the start (NULL: */
	size_t tok_len[ST_TOK_FILES]; /* absent), for every checkpoint: the source may go */
	char *cfg_text;         /* its config.json as it was at the start (NULL: none), whose
				 * keys strata does not use the checkpoints carry on */
	struct st_ckpt_async ck;
	struct st_trace trace;  /* --trace */
	long trace_until;       /* stop recording after this step */
	int lock_fd;            /* OUT/.lock, flocked while the run is open; -1: none */
	/* the directories of --out (as given, before rundir_absolute_paths)
	 * this run made (fs_mkdir_p_made), for a run refused before it starts
	 * to remove again */
	size_t out_made[ST_MADE_MAX];
	int n_out_made;
	int lock_held;          /* the flock is held (a file system without flock: not) */
	int plan_only;          /* `strata plan`: its table says what the run would log */
	struct st_progress pg;  /* the live progress line, ended before other output */
};

/* Set up a run: a fresh model directory (--model) or a checkpoint (--resume,
 * whose saved options are the base that the given ones override). */
int trainer_open(struct st_trainer *tr, const struct st_train_opts *o);
/* Train to total_steps; evaluates and checkpoints as configured, and once at
 * the end. */
int trainer_run(struct st_trainer *tr);
/* `strata plan`: the plan training would make with these options (engine/
 * plan.h) and its predicted step, printed as a table (json 0) or as JSON
 * (planview.h); nothing is allocated or trained. The hardware profile is
 * --profile's file (or the per-user cache), measured and written there when
 * missing. */
int trainer_plan(const struct st_train_opts *o, int json);
/* The optimizer's settings from the options (kind: --optimizer, parsed),
 * one place for train and plan alike. */
struct st_optim_cfg trainer_optim_cfg(const struct st_train_opts *o, enum st_optim_kind kind);
void trainer_close(struct st_trainer *tr);

/* The run's length in steps and its warmup (--warmup, else a tenth of the
 * steps): --steps, else a --max-tokens budget: the `done` steps that have
 * seen tokens_seen tokens (0 and 0 for a fresh run), then what is left of
 * the budget at o's tokens per step, rounded up to whole steps. */
void train_schedule(const struct st_train_opts *o, long done, double tokens_seen, long *total,
		    long *warmup);
/* Learning rate at 1-based step: linear warmup to lr over `warmup` steps,
 * then o->schedule's:
 *   cosine    decay from lr (at step warmup + 1) toward lr * min_lr_ratio,
 *             which step total + 1 would reach (llm.c's schedule);
 *   linear    the same path as a straight line;
 *   wsd       lr, then over the last d = ceil(decay_frac * (total - warmup))
 *             steps a straight line toward the floor, the first of them a
 *             (d+1)th of the way down, step total + 1 at the floor
 *             (warmup-stable-decay: the decay can be run from any stable
 *             checkpoint by resuming with a longer or shorter --steps);
 *   constant  lr. */
double lr_at(const struct st_train_opts *o, long step, long total, long warmup);

/* Mean loss over the validation windows (up to max_tokens; 0: all); NaN
 * with *n_tokens 0 where they hold no loss target (all masked). */
int evaluate(struct st_session *s, const struct st_data *d, int b, int t, long max_tokens,
	     double *loss, long *n_tokens);

/* Checkpoints (trainer/checkpoint.c). A checkpoint is a directory
 * out/step-NNNNNN with config.json, model.safetensors, optimizer.safetensors
 * and trainer.json, written under a temporary name, fsynced and renamed into
 * place, so a crash leaves either the old set of checkpoints or the new one. */
int ckpt_save(struct st_trainer *tr);
/* Lazy asynchronous checkpoints (Deep Optimizer States' idea, arXiv
 * 2410.21316): ckpt_begin snapshots the counters and options, writes
 * trainer.json and starts the capture thread, and returns; training goes on
 * while the weights and state are written, each update waiting only for its
 * own unit's capture. ckpt_finish joins it (renaming the directory into
 * place happened in the thread) and returns its status. ckpt_save is
 * begin + finish. */
int ckpt_begin(struct st_trainer *tr);
int ckpt_finish(struct st_trainer *tr);
/* ST_FAIL once a background checkpoint has failed (already reported). */
int ckpt_poll(struct st_trainer *tr);
/* The updater's hook: wait until unit's weights and state are captured. */
void ckpt_wait_unit(void *ckpt_async, int unit);
/* Resolve a checkpoint path: a step directory, or a run directory (its
 * "latest"; without one, its newest step directory holding trainer.json,
 * with a warning: a run killed between its first checkpoint and `latest`). */
int ckpt_resolve(char *out, size_t n, const char *path);
/* Hold checkpoint directory dir against --keep-ckpts while this process
 * reads it (eval, sample): a shared flock on the directory, kept until
 * ckpt_unpin or the process ends; a run's prune removes only a checkpoint
 * it can lock exclusively and leaves one being read to a later save.
 * Returns 1 when dir is held (or cannot be: a file system without flock),
 * 0 when it is gone or being removed (resolve it again). */
int ckpt_pin(const char *dir);
/* Let go of the checkpoint ckpt_pin holds (its weights are loaded). */
void ckpt_unpin(void);
/* The flag the checkpoints that messages name are given to ("--resume",
 * the default; eval and sample take "--model"). */
void ckpt_paths_flag(const char *flag);
/* Another process holds run directory out's lock: a run is training there. */
int ckpt_run_busy(const char *out);
/* The newest step directory of run directory out that holds trainer.json:
 * its step, and its name into name (size n); -1 when there is none. */
long ckpt_newest(const char *out, char *name, size_t n);
/* A resume into the run directory of its checkpoint, from another step than
 * `latest` names (an earlier one): `latest` is pointed at it before training,
 * so a kill before the first new checkpoint cannot leave `latest` on the
 * abandoned later steps. */
int ckpt_mark_resumed(const struct st_trainer *tr);
/* Read trainer.json's saved options into o (for resume). */
int ckpt_read_options(struct st_train_opts *o, const char *ckpt_dir);
/* Load optimizer state and progress into an opened trainer; on failure it
 * also names the newest earlier checkpoint (ckpt_name_earlier). */
int ckpt_load_state(struct st_trainer *tr, const char *ckpt_dir);
/* `strata plan --resume`: the settings checks ckpt_load_state makes of the
 * optimizer file (its optimizer, block, threshold, SGD momentum) against
 * tr->opt, without loading the state, so that plan refuses what train
 * would. */
int ckpt_check_state_settings(const struct st_trainer *tr, const char *ckpt_dir);
/* Whether optimizer state of kind `from` converts into `to` on resume:
 * adamw <-> adamw8bit, sgd <-> sgd8bit (and each into itself, for another
 * --quant-block or --quant-min-size); never GaLore's. */
int ckpt_can_convert(enum st_optim_kind from, enum st_optim_kind to);
/* The run's state slabs from an optimizer file laid out otherwise (another
 * kind of the family, block or threshold): see convert.c. */
int ckpt_convert_state(struct st_trainer *tr, const struct st_safetensors *sf, const char *path,
		       enum st_optim_kind from, int from_block);
/* After a failed load of ckpt_dir (RUN/step-N): say which step directory of
 * RUN to resume from instead, the newest before N, or that there is none. */
void ckpt_name_earlier(const char *ckpt_dir);
/* How many step directories in run directory out are past step and at most
 * last; the first of them into *first. */
int ckpt_count_later(const char *out, long step, long last, long *first);
/* A checkpoint's identities, from its trainer.json: "run_id", "ckpt_id",
 * and the checkpoint before it in its run, "prev_step" and "prev_id". An
 * id is 16 hex digits, "" where absent (saved before 2026-11-24); prev_step
 * is -1 for none (the first of a fresh run), -2 where absent. */
struct ckpt_ids {
	char run[17], self[17], prev[17];
	long prev_step;
};
/* 0 (and every field empty or -2) where trainer.json cannot be read. */
int ckpt_read_ids(const char *ckpt_dir, struct ckpt_ids *ids);
/* The steps of run directory out's checkpoint chain from step-from back
 * (from first), each hop's directory holding the checkpoint its successor
 * names (its "ckpt_id" the successor's "prev_id"), at most max; *legacy:
 * the step of a checkpoint on it saved before the chain was recorded (its
 * history unknown), else -1. Returns the count. */
int ckpt_chain(const char *out, long from, long *steps, int max, long *legacy);
/* A fresh identity (16 hex digits). */
void ckpt_new_id(char id[17]);
/* The temp directories and files that processes killed in a save or a
 * removal left in run directory out, whose lock the caller holds (an aside
 * copy put back first): removed, except spare (the checkpoint a run
 * resumed from, whatever its name). Every save does it; a resume does it
 * first, since a run killed after its last save has no later save (its
 * resume has nothing to train). Checkpoints beyond --keep-ckpts wait for
 * a save. */
void ckpt_tidy(const char *out, const char *spare);
/* Read the tokenizer files of tr->model_dir (tokenizer.json and its
 * companions) into tr, for every checkpoint to carry. */
int ckpt_read_tokenizer_files(struct st_trainer *tr);

#endif
