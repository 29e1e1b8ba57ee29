/* Training and validation data from token shards.
 *
 * Training windows are chosen statelessly: the start of sequence r of
 * micro-batch j at step s is a hash of (seed, s, j, r), so a resumed run sees
 * exactly the data the uninterrupted run would have, with no loader state to
 * save. Validation walks the val shard in consecutive windows. A shard with a
 * loss mask beside it (strata prepare on JSONL examples) gets target -1 where
 * the mask is 0, so only completions count in the loss. */
#ifndef ST_DATA_H
#define ST_DATA_H

#include <stdint.h>

#include "io/shard.h"
#include "model/config.h"

struct st_data {
	struct st_shard train, val;
	int has_train, has_val;
	/* loss masks (X.mask.bin beside X.bin, from JSONL examples): a target
	 * whose mask is 0 is context only (-1, not in the loss) */
	struct st_shard train_mask, val_mask;
	int has_train_mask, has_val_mask;
};

/* Open the shards: `data` is a prepared directory (train.bin, val.bin) or a
 * train shard; `val` overrides the validation shard. Every token is checked
 * against vocab_size, and the shard's tokenizer vocabulary must not exceed it. */
int data_open(struct st_data *d, const char *data, const char *val, int vocab_size, int need_train);
void data_close(struct st_data *d);
/* Byte-tokenizer shards for a model directory with a tokenizer.json: an
 * error. Shards of another tokenizer.json than the directory's (ids that
 * mean other text, unless it is the same tokenizer saved twice): a warning,
 * and one where the directory has no tokenizer.json for shards that need
 * one, or none for byte shards while its config.json (cfg) names token ids
 * of a tokenizer of its own. */
int data_check_tokenizer(const struct st_data *d, const char *model_dir,
			 const struct st_config *cfg);
/* Fill tokens/targets (b,t) of micro-batch `micro` of step `step`. */
void data_train_batch(const struct st_data *d, int32_t *tokens, int32_t *targets, int b, int t,
		      uint64_t seed, long step, int micro);
/* Number of consecutive validation windows of t+1 tokens (stride t), the
 * last one short where the shard's n - 1 targets are not a multiple of t:
 * together they score every target once. */
long data_val_windows(const struct st_data *d, int t);
/* The windows an evaluation of max_tokens (0: all) scores: whole windows,
 * rounded up, at most data_val_windows. */
long data_eval_windows(const struct st_data *d, int t, long max_tokens);
/* Fill (b,t) with windows first .. first+b-1; rows past the last window get
 * targets -1 (ignored). */
void data_val_batch(const struct st_data *d, int32_t *tokens, int32_t *targets, int b, int t,
		    long first);
/* Check a shard's tokens are < vocab_size and that it fits the model. */
int data_check_shard(const struct st_shard *s, int vocab_size, int min_tokens);

#endif
