/* Batches from token shards; see data.h. */
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "io/fsutil.h"
#include "io/tokenizer.h"
#include "trainer/data.h"
#include "util/check.h"
#include "util/rng.h"

int data_check_shard(const struct st_shard *s, int vocab_size, int min_tokens)
{
	ST_CHECK(s->vocab_size <= (uint32_t)vocab_size,
		 "prepare the data with the model's tokenizer, or use a model with a larger vocabulary",
		 "%s was made by tokenizer '%s' with vocabulary %u, larger than the model's %d",
		 s->path, s->tokenizer, s->vocab_size, vocab_size);
	ST_CHECK(s->n_tokens >= (uint64_t)min_tokens,
		 min_tokens > 2 ? "use more text, or a shorter --seq-len" : "use more text",
		 "%s holds %llu token%s, too few for one window of %d", s->path,
		 (unsigned long long)s->n_tokens, s->n_tokens == 1 ? "" : "s", min_tokens);
	/* the header's vocabulary is outside the shard's checksum: a token at
	 * or past it says header and tokens disagree */
	ST_CHECK(s->vocab_size >= 1, "re-run strata prepare: the shard is damaged",
		 "%s: the header's vocabulary size is 0", s->path);
	const uint32_t limit = s->vocab_size < (uint32_t)vocab_size ? s->vocab_size : (uint32_t)vocab_size;
	if (s->max_token < limit) /* the largest token, found at open */
		return ST_OK;
	for (uint64_t i = 0; i < s->n_tokens; i++) { /* the first past it, for the message */
		uint32_t tok = shard_token(s, i);
		ST_CHECK(tok < (uint32_t)vocab_size, "re-run strata prepare with the model's tokenizer",
			 "%s: token %u at position %llu is >= the model's vocabulary size %d", s->path,
			 tok, (unsigned long long)i, vocab_size);
		ST_CHECK(tok < s->vocab_size, "re-run strata prepare: the shard is damaged",
			 "%s: token %u at position %llu is past the vocabulary of %u its header gives",
			 s->path, tok, (unsigned long long)i, s->vocab_size);
	}
	return ST_OK;
}

/* A token shard (train or validation): a loss mask is not one. */
static int check_tokens(const struct st_shard *s, int vocab_size)
{
	ST_CHECK(strcmp(s->tokenizer, "mask") != 0,
		 "give the token shard beside it (X.bin for X.mask.bin), or its directory",
		 "%s is a loss mask (prepare writes one beside each shard of JSONL examples), "
		 "not tokens",
		 s->path);
	return data_check_shard(s, vocab_size, 2);
}

/* The loss mask's path for shard X.bin (X.mask.bin); 0 for another name. */
static int mask_path(char *path, size_t cap, const char *shard)
{
	const size_t n = strlen(shard);
	if (n < 4 || strcmp(shard + n - 4, ".bin"))
		return 0;
	snprintf(path, cap, "%.*s.mask.bin", (int)(n - 4), shard);
	return 1;
}

/* X.mask.bin beside X.bin, when there is one: it must match the shard. */
static int open_mask(struct st_shard *mask, int *has, const struct st_shard *s)
{
	char path[4200];
	if (!mask_path(path, sizeof path, s->path) || !fs_exists(path))
		return ST_OK;
	ST_TRY(shard_open(mask, path));
	*has = 1;
	ST_CHECK(mask->n_tokens == s->n_tokens && mask->vocab_size == 2 && !strcmp(mask->tokenizer, "mask"),
		 "re-run strata prepare: the loss mask belongs to other data",
		 "%s does not match %s (%llu mask entries for %llu tokens)", path, s->path,
		 (unsigned long long)mask->n_tokens, (unsigned long long)s->n_tokens);
	/* said as a mask's values, not as tokens past a vocabulary */
	for (uint64_t i = 0; mask->max_token > 1 && i < mask->n_tokens; i++) {
		const uint32_t v = shard_token(mask, i);
		ST_CHECK(v <= 1, "re-run strata prepare: the loss mask is damaged",
			 "%s: value %u at position %llu is not 0 or 1", path, v, (unsigned long long)i);
	}
	return data_check_shard(mask, 2, 2);
}

int data_open(struct st_data *d, const char *data, const char *val, int vocab_size, int need_train)
{
	memset(d, 0, sizeof *d);
	char train_path[4096] = "", val_path[4096] = "";
	if (data && *data) {
		if (fs_is_dir(data)) {
			snprintf(train_path, sizeof train_path, "%s/train.bin", data);
			snprintf(val_path, sizeof val_path, "%s/val.bin", data);
			/* prepare writes train.bin last: without it, the directory's
			 * val.bin and masks may be from an unfinished prepare */
			ST_CHECK((val && *val) || fs_exists(train_path) || !fs_exists(val_path),
				 "re-run strata prepare into it",
				 "%s holds val.bin but no train.bin: a strata prepare into it did not "
				 "finish, and its val.bin may not match its loss mask",
				 data);
		} else {
			snprintf(train_path, sizeof train_path, "%s", data);
			/* a prepared directory's train.bin given as a file: its val.bin
			 * beside it is the default held-out shard, as for the directory */
			const char *base = strrchr(data, '/');
			if (!strcmp(base ? base + 1 : data, "train.bin")) {
				fs_dirname(val_path, sizeof val_path, data);
				snprintf(val_path + strlen(val_path), sizeof val_path - strlen(val_path),
					 "/val.bin");
			}
		}
	}
	if (val && *val)
		snprintf(val_path, sizeof val_path, "%s", val);
	if (need_train) {
		ST_CHECK(*train_path, "pass --data DIR (from strata prepare) or --data FILE.bin",
			 "no training data given");
		ST_TRY(shard_open(&d->train, train_path));
		d->has_train = 1;
		if (check_tokens(&d->train, vocab_size) != ST_OK ||
		    open_mask(&d->train_mask, &d->has_train_mask, &d->train) != ST_OK) {
			data_close(d);
			return ST_FAIL;
		}
	}
	if (*val_path && (fs_exists(val_path) || (val && *val))) {
		if (shard_open(&d->val, val_path) != ST_OK) {
			data_close(d);
			return ST_FAIL;
		}
		d->has_val = 1;
		if (check_tokens(&d->val, vocab_size) != ST_OK ||
		    open_mask(&d->val_mask, &d->has_val_mask, &d->val) != ST_OK) {
			data_close(d);
			return ST_FAIL;
		}
		/* examples to train on (a loss mask beside train.bin, opened or
		 * not: eval opens no training shard) but none to score */
		char train_mask[4200];
		if (!d->has_val_mask &&
		    (d->has_train_mask || (mask_path(train_mask, sizeof train_mask, train_path) &&
					   fs_exists(train_mask))))
			st_log_warn("the validation shard %s has no loss mask beside it, but the "
				    "training data has one: the held-out loss scores every token, "
				    "prompts and <bos> included; re-run strata prepare to write both",
				    d->val.path);
	}
	if (d->has_train && d->has_val) {
		/* ids of another tokenizer score as noise; the training shard itself
		 * scores data the model trains on */
		if (strcmp(d->train.tokenizer, d->val.tokenizer) != 0) {
			ST_ERROR("give a validation shard prepared with the training data's tokenizer",
				 "%s was tokenized with '%s', but the training data %s with '%s'",
				 d->val.path, d->val.tokenizer, d->train.path, d->train.tokenizer);
			data_close(d);
			return ST_FAIL;
		}
		struct stat a, b;
		if (stat(d->train.path, &a) == 0 && stat(d->val.path, &b) == 0 &&
		    a.st_dev == b.st_dev && a.st_ino == b.st_ino)
			st_log_warn("the validation shard %s is the training shard: the held-out loss "
				    "scores text the model trains on",
				    d->val.path);
	}
	return ST_OK;
}

int data_check_tokenizer(const struct st_data *d, const char *model_dir,
			 const struct st_config *cfg)
{
	char path[4200], name[25];
	snprintf(path, sizeof path, "%s/tokenizer.json", model_dir);
	const struct st_shard *s = d->has_train ? &d->train : d->has_val ? &d->val : NULL;
	/* bytes for a model whose ids are a BPE vocabulary's: surely another
	 * tokenizer (two BPE files that differ may be one tokenizer saved twice,
	 * so that is a warning below) */
	ST_CHECK(!s || strcmp(s->tokenizer, "byte") != 0 || !fs_exists(path),
		 "prepare the data with the model's tokenizer: strata prepare --tokenizer MODEL_DIR",
		 "%s was tokenized with the byte tokenizer, but the model %s has a tokenizer.json: "
		 "its ids are that tokenizer's tokens, not bytes",
		 s ? s->path : "", model_dir);
	/* bytes for a model without tokenizer.json whose config.json names the
	 * ids of a tokenizer of its own (a SentencePiece GGUF import, a Hugging
	 * Face directory without its tokenizer.json): its ids are that
	 * tokenizer's tokens (0-2 <unk>, <s>, </s> in Llama 2's, the bytes
	 * three ids further on). A model from `strata init --vocab N` names no
	 * ids, and trains on bytes as meant: nothing said. */
	if (s && !strcmp(s->tokenizer, "byte") && !fs_exists(path) &&
	    cfg->vocab_size != ST_BYTE_VOCAB && (cfg->bos_id >= 0 || cfg->eos_id >= 0))
		st_log_warn("%s was tokenized with the byte tokenizer, but the model %s (vocabulary "
			    "%d) names the ids of a tokenizer of its own (bos_token_id %d, "
			    "eos_token_id %d) and has no tokenizer.json: to it the data's ids are "
			    "that tokenizer's tokens, not bytes (put its tokenizer.json in %s and "
			    "prepare the data with --tokenizer %s)",
			    s->path, model_dir, cfg->vocab_size, cfg->bos_id, cfg->eos_id, model_dir,
			    model_dir);
	if (s && !fs_exists(path) && strcmp(s->tokenizer, "byte") != 0) {
		/* checkpoints carry the model's tokenizer files: there are none */
		st_log_warn("%s was tokenized with '%s', but %s has no tokenizer.json: sample "
			    "would read the model%s with the byte tokenizer (copy the tokenizer.json "
			    "given to strata prepare into %s, or pass --tokenizer to sample)",
			    s->path, s->tokenizer, model_dir,
			    d->has_train ? " and its checkpoints" : "", model_dir);
		return ST_OK;
	}
	if (!fs_exists(path) || tokenizer_file_name(path, name) != ST_OK)
		return ST_OK;
	/* The run needs only the shards' ids (prepared elsewhere, a tokenizer
	 * strata cannot read is no obstacle), but a file it cannot read would be
	 * carried into every checkpoint for sample to fail on: said now. */
	struct st_tokenizer tk;
	const int old = st_log_mute(1);
	const int loaded = tokenizer_load(&tk, path) == ST_OK;
	char why[512];
	snprintf(why, sizeof why, "%s", st_log_last_error());
	st_log_mute(old);
	if (loaded) {
		tokenizer_free(&tk);
		malloc_trim(0); /* its tables' memory back: the run holds no tokenizer */
	} else {
		st_log_warn("strata cannot read the model's tokenizer: %s; the data's tokens are used "
			    "as they are, but `strata sample` and `strata prepare` cannot use "
			    "this tokenizer.json (replace it with the model's own)",
			    why);
		return ST_OK; /* comparing its hash with the data's would advise using it */
	}
	if (s && strcmp(s->tokenizer, name) != 0)
		st_log_warn("%s was tokenized with '%s', but the model's tokenizer.json is '%s': "
			    "unless the two files are one tokenizer saved twice, the same ids stand "
			    "for other text (run strata prepare with --tokenizer %s)",
			    s->path, s->tokenizer, name, model_dir);
	return ST_OK;
}

void data_close(struct st_data *d)
{
	if (d->has_train)
		shard_close(&d->train);
	if (d->has_val)
		shard_close(&d->val);
	if (d->has_train_mask)
		shard_close(&d->train_mask);
	if (d->has_val_mask)
		shard_close(&d->val_mask);
	memset(d, 0, sizeof *d);
}

static void window(const struct st_shard *s, const struct st_shard *mask, int32_t *tokens,
		   int32_t *targets, int t, uint64_t start)
{
	for (int i = 0; i < t; i++) {
		const uint64_t next = start + (uint64_t)i + 1;
		tokens[i] = (int32_t)shard_token(s, start + (uint64_t)i);
		targets[i] = mask && !shard_token(mask, next) ? -1 : (int32_t)shard_token(s, next);
	}
	/* read once: a long run's random windows held the whole shard */
	shard_release(s, start, (uint64_t)t + 1);
	if (mask)
		shard_release(mask, start, (uint64_t)t + 1);
}

void data_train_batch(const struct st_data *d, int32_t *tokens, int32_t *targets, int b, int t,
		      uint64_t seed, long step, int micro)
{
	const struct st_shard *s = &d->train;
	/* windows of t+1 tokens; the trainer checks n_tokens > t */
	uint64_t span = s->n_tokens - (uint64_t)t;
	for (int r = 0; r < b; r++) {
		uint64_t h = rng_hash3(seed, (uint64_t)step, ((uint64_t)micro << 32) | (uint64_t)r);
		window(s, d->has_train_mask ? &d->train_mask : NULL, tokens + (size_t)r * t,
		       targets + (size_t)r * t, t, h % span);
	}
}

long data_val_windows(const struct st_data *d, int t)
{
	if (!d->has_val || d->val.n_tokens < 2)
		return 0;
	/* every next-token target once: the last window may be short, padded
	 * with ignored targets (it used to be dropped, up to t - 1 targets) */
	return (long)((d->val.n_tokens - 1 + (uint64_t)t - 1) / (uint64_t)t);
}

long data_eval_windows(const struct st_data *d, int t, long max_tokens)
{
	const long windows = data_val_windows(d, t);
	/* rounded up without max_tokens + t - 1, which overflowed for a
	 * --max-tokens near LONG_MAX into no window at all */
	const long want = max_tokens / t + (max_tokens % t != 0);
	return max_tokens > 0 && windows > want ? want : windows;
}

void data_val_batch(const struct st_data *d, int32_t *tokens, int32_t *targets, int b, int t,
		    long first)
{
	const struct st_shard *s = &d->val;
	long n = data_val_windows(d, t);
	for (int r = 0; r < b; r++) {
		int32_t *tok = tokens + (size_t)r * t, *tgt = targets + (size_t)r * t;
		long w = first + r;
		for (int i = 0; i < t; i++) {
			uint64_t pos = (uint64_t)w * (uint64_t)t + (uint64_t)i;
			if (w < n && pos + 1 < s->n_tokens) {
				tok[i] = (int32_t)shard_token(s, pos);
				tgt[i] = d->has_val_mask && !shard_token(&d->val_mask, pos + 1)
						 ? -1
						 : (int32_t)shard_token(s, pos + 1);
			} else {
				tok[i] = 0;
				tgt[i] = -1;
			}
		}
	}
	/* read: released, as the training windows are */
	const uint64_t from = (uint64_t)first * (uint64_t)t;
	if (from < s->n_tokens) {
		const uint64_t len = (uint64_t)b * (uint64_t)t + 1;
		const uint64_t n_rel = s->n_tokens - from < len ? s->n_tokens - from : len;
		shard_release(s, from, n_rel);
		if (d->has_val_mask)
			shard_release(&d->val_mask, from, n_rel);
	}
}
