/* A session: one model on one backend, with its slabs in the store and an
 * executor for a fixed micro-batch shape. train, eval, sample and init all
 * start from a session. */
#ifndef ST_SESSION_H
#define ST_SESSION_H

#include "engine/decode.h"
#include "engine/exec.h"
#include "engine/place.h"
#include "model/llama.h"
#include "ops/ops.h"
#include "store/store.h"

struct st_session {
	const struct st_ops *ops;
	struct st_model model;
	struct st_store store;
	struct st_exec exec;
	int exec_ready;
	struct st_decoder dec; /* sample's key/value-cache forward */
	int dec_ready;
	float **w;  /* per-unit W slab pointers where resident (NULL where staged) */
	size_t shard_bytes; /* saving: weight files above this are sharded (0: 5 GB) */
	char matmul_name[160]; /* session_matmul_name's, with bf16 */
};

/* Choose the backend ("cpu", "cuda", "auto") and set the thread count
 * (0: all cores). */
/* The most --threads any command takes: libgomp sizes per-thread data on
 * the stack, and 100000 threads overflowed it. */
#define ST_MAX_THREADS 4096
int session_backend(const struct st_ops **ops, const char *device, int threads);
/* --device given as one of those, else a usage error: commands check it
 * before any other work (eval and sample said it after loading the model,
 * with exit 1). */
int session_check_device(const char *device);
/* Build the model from cfg and allocate its weight slabs (zeroed);
 * with_grads: 0 no gradient slabs, ST_GRADS_ALL one per unit,
 * ST_GRADS_SHARED_LAYERS one per unit except that every layer unit uses the
 * same one (its gradient must be consumed and zeroed after each unit's
 * backward, as the per-layer GaLore updates do). */
enum { ST_GRADS_NONE, ST_GRADS_ALL, ST_GRADS_SHARED_LAYERS };
int session_create(struct st_session *s, const struct st_ops *ops, const struct st_config *cfg,
		   int with_grads);
/* session_create in two halves, for callers that place slabs by a plan:
 * build the model and an empty store with these budgets (NULL: unlimited),
 * then allocate W (and G) with the homes of pl (NULL: all on the device). */
int session_build(struct st_session *s, const struct st_ops *ops, const struct st_config *cfg,
		  const size_t budgets[ST_TIER__COUNT]);
int session_alloc(struct st_session *s, const struct st_place *pl, int with_grads);
/* Load a model directory's weights (model.safetensors or its shards) into
 * the W slabs, a unit at a time (after store_start when slabs are staged). */
int session_load_weights(struct st_session *s, const char *dir);
/* dir's weight files hold every tensor of the built model with its shape, and
 * no other (headers only; before session_alloc, so a config.json that does
 * not match its weights allocates nothing). */
int session_check_weights(const struct st_session *s, const char *dir);
/* Open a HF model directory: config.json + model.safetensors. */
int session_open(struct st_session *s, const struct st_ops *ops, const char *dir, int with_grads);
/* Random init of every unit (deterministic in seed). */
void session_init_random(struct st_session *s, unsigned long seed);
/* The linear layers' matmul precision, "fp32" or "bf16" (inputs rounded to
 * bf16, products summed in fp32), before anything is sized (the bf16
 * workspace is part of the activations). bf16 is refused, naming why, where
 * the backend has no bf16 matmul or only an emulated one (slower than fp32
 * here). flag: the option's name in messages. */
int session_matmul_precision(struct st_session *s, const char *precision, const char *flag);
/* The same check of the word alone, for commands to refuse a slip before
 * any work. */
int session_check_matmul_precision(const char *precision, const char *flag);
/* Whether this CPU takes --matmul-precision bf16 (the CPU backend's
 * ops_bf16_native), for commands that have no session yet. */
int session_cpu_bf16(const char **impl);
/* What runs the session's matmuls, for the logs. */
const char *session_matmul_name(const struct st_session *s);
/* Allocate the executor for micro-batches of b x t (once). */
int session_exec(struct st_session *s, int b, int t);
/* The same with an activation policy per layer (engine/exec.h; NULL: keep). */
int session_exec_policy(struct st_session *s, int b, int t, const unsigned char *act);
/* Allocate the decoder for a t_max-position key/value cache (once; its
 * slabs are the layers' and the head's A slabs, so a session has either an
 * executor or a decoder). */
int session_decoder(struct st_session *s, int t_max);
/* Write config.json + model.safetensors (sharded above shard_bytes) into
 * dir (which must exist). */
int session_save_model(struct st_session *s, const char *dir);
void session_close(struct st_session *s);

#endif
