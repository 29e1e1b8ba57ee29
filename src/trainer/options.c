/* The option table and its parsers; see options.h. */
#include <cJSON.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "io/fsutil.h"
#include "optim/galore.h"
#include "optim/optim.h"
#include "engine/place.h"
#include "engine/session.h"
#include "trainer/options.h"
#include "util/check.h"
#include "util/parse.h"

int train_opts_bool(const char *v)
{
	if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes"))
		return 1;
	if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no"))
		return 0;
	return -1;
}

#define F(field) offsetof(struct st_train_opts, field), sizeof(((struct st_train_opts *)0)->field)

const struct st_opt_desc train_opt_table[] = {
	{"model", OT_STR, F(model), "", "model directory (config.json + model.safetensors)"},
	{"data", OT_STR, F(data), "", "prepared data directory (train.bin, val.bin) or a train shard"},
	{"val", OT_STR, F(val), "", "validation shard (default: val.bin beside the training data)"},
	{"out", OT_STR, F(out), "", "run directory for checkpoints and metrics.jsonl"},
	{"resume", OT_STR, F(resume), "", "checkpoint to continue from (a step dir or a run dir)"},
	{"optimizer", OT_STR, F(optimizer), "adamw", "adamw | sgd | adamw8bit | sgd8bit | galore-adamw | galore-adamw8bit"},
	{"micro-batch", OT_INT, F(micro_batch), "8", "sequences per micro-batch"},
	{"seq-len", OT_INT, F(seq_len), "256", "tokens per sequence"},
	{"grad-accum", OT_INT, F(grad_accum), "1", "micro-batches per optimizer step"},
	{"lr", OT_DOUBLE, F(lr), "1e-3", "peak learning rate"},
	{"min-lr-ratio", OT_DOUBLE, F(min_lr_ratio), "0.1", "the decay's floor, as a fraction of lr (not with --schedule constant)"},
	{"warmup", OT_LONG, F(warmup), "-1", "linear warmup steps (-1: 10% of the steps)"},
	{"schedule", OT_STR, F(schedule), "cosine", "after warmup: cosine | linear (decay to the floor over the run) | wsd (constant, then a linear decay over the last --decay-frac of it) | constant"},
	{"decay-frac", OT_DOUBLE, F(decay_frac), "0.2", "--schedule wsd: the share of the steps after warmup that decay (0 < f <= 1)"},
	{"weight-decay", OT_DOUBLE, F(weight_decay), "0.1", "weight decay on matrices (decoupled for AdamW, L2 for SGD)"},
	{"decay-norms", OT_BOOL, F(decay_norms), "0", "also decay the norms' gains (and the stable embedding's LayerNorm bias)"},
	{"decay-embeddings", OT_BOOL, F(decay_embed), "0", "also decay the token embedding"},
	{"grad-clip", OT_DOUBLE, F(grad_clip), "1.0", "global gradient-norm clip (0: off)"},
	{"beta1", OT_DOUBLE, F(beta1), "0.9", "AdamW beta1"},
	{"beta2", OT_DOUBLE, F(beta2), "0.95", "AdamW beta2"},
	{"eps", OT_DOUBLE, F(eps), "1e-8", "AdamW epsilon"},
	{"momentum", OT_DOUBLE, F(momentum), "0", "SGD momentum (sgd8bit needs > 0)"},
	{"quant-block", OT_INT, F(quant_block), "256", "8-bit optimizers: elements per absmax block (a power of two, 16-65536)"},
	{"quant-min-size", OT_LONG, F(quant_min_size), "4096", "8-bit optimizers: smaller tensors keep fp32 state (the token embedding always does)"},
	{"galore-rank", OT_DOUBLE, F(galore_rank), "128", "GaLore: projection rank (>= 1), or a fraction of the hidden size (< 1)"},
	{"galore-update-gap", OT_INT, F(galore_update_gap), "200", "GaLore: updates between projector refreshes (T; skipped steps do not count)"},
	{"galore-scale", OT_DOUBLE, F(galore_scale), "0.25", "GaLore: scale of the projected-back update (alpha)"},
	{"galore-start-spread", OT_INT, F(galore_start_spread), "8", "GaLore: spread the first projectors over this many updates, and stagger the refreshes over the gap (1: all at the first and refreshed together every gap, as the paper)"},
	{"galore-proj", OT_STR, F(galore_proj), "randomized", "GaLore projector: randomized | svd"},
	{"galore-per-layer", OT_BOOL, F(galore_per_layer), "1", "GaLore: consume each layer's gradient after its backward (no full gradient buffer)"},
	{"galore-moments", OT_STR, F(galore_moments), "keep", "GaLore: on refresh keep the moments or rotate them"},
	{"max-skipped-steps", OT_INT, F(max_skipped_steps), "10", "steps that may be skipped for a non-finite loss or gradient (or a gradient too large for fp32); one more stops the run"},
	{"steps", OT_LONG, F(steps), "0", "optimizer steps (0: from --max-tokens)"},
	{"max-tokens", OT_DOUBLE, F(max_tokens), "0", "token budget, used when --steps is 0 (rounded up to whole steps)"},
	{"eval-interval", OT_LONG, F(eval_interval), "100", "steps between evaluations (0: end only)"},
	{"eval-tokens", OT_LONG, F(eval_tokens), "131072", "validation tokens per evaluation, rounded up to whole windows (0: all)"},
	{"ckpt-interval", OT_LONG, F(ckpt_interval), "500", "steps between checkpoints (0: end only)"},
	{"keep-ckpts", OT_INT, F(keep_ckpts), "3", "checkpoints kept in the run directory (0: all)"},
	{"seed", OT_LONG, F(seed), "1", "seed for the data order (and GaLore's random projections)"},
	{"threads", OT_INT, F(threads), "0", "CPU threads (0: every core, or the cgroup's CPU quota where one is set)"},
	{"log-interval", OT_INT, F(log_interval), "10", "steps between progress lines when not on a terminal"},
	{"device", OT_STR, F(device), "auto", "cpu | cuda | auto"},
	{"matmul-precision", OT_STR, F(matmul_precision), "fp32", "the linear layers' matmuls: fp32, or bf16 (inputs rounded to bf16, sums in fp32: for CPUs with AMX; see README)"},
	{"progress", OT_STR, F(progress), "auto", "auto | bar | lines | none"},
	{"device-mem", OT_STR, F(device_mem), "auto", "device tier budget, e.g. 2G (CPU: a RAM arena; auto: see README)"},
	{"host-mem", OT_STR, F(host_mem), "auto", "host tier budget, e.g. 4G (auto: see README)"},
	{"offload-dir", OT_STR, F(offload_dir), "", "directory for the disk tier; repeat the flag (or use commas) to stripe over several SSDs"},
	{"place", OT_STR, F(place), "auto", "force homes: weights=TIER,gradients=TIER,optimizer=TIER (device, host, disk)"},
	{"prefetch", OT_INT, F(prefetch), "0", "units whose weights (and swapped activations) are fetched ahead of the one computing; 0: chosen by the planner (1 to 4)"},
	{"io-block", OT_STR, F(io_block), "1M", "disk tier: stripe block and request size"},
	{"io-depth", OT_INT, F(io_depth), "16", "disk tier: requests in flight per transfer (0: 16)"},
	{"recompute", OT_STR, F(recompute), "auto", "the first N layers' (or all) activations recomputed in backward, the rest kept; auto: the planner's choice (see --activations)"},
	{"activations", OT_STR, F(activations), "auto", "per layer: keep, recompute, host or disk (swap), or one letter per layer (k, r, h, d); auto: chosen by the planner"},
	{"device-updates", OT_STR, F(device_updates), "auto", "units whose optimizer update runs on the device (state kept there), spread evenly; auto: chosen by the planner"},
	{"profile", OT_STR, F(profile), "", "hardware profile (JSON) the planner uses; measured and written there when missing (default: $STRATA_PROFILE, else ~/.cache/strata/profile.json)"},
	{"trace", OT_STR, F(trace), "", "write a Chrome/Perfetto trace (JSON) of every queue's timeline to this file"},
	{"trace-steps", OT_INT, F(trace_steps), "20", "steps recorded in the trace (from the start of the run)"},
	{"shard-size", OT_STR, F(shard_size), "auto", "checkpoints: model weights above this go into shards with an index (auto: 5 GB, as Hugging Face)"},
};
const int train_opt_count = sizeof train_opt_table / sizeof train_opt_table[0];

static const struct st_opt_desc *find(const char *key)
{
	for (int i = 0; i < train_opt_count; i++) {
		const char *k = train_opt_table[i].key;
		/* accept '_' for '-' so JSON files may use either spelling */
		size_t j = 0;
		for (; k[j] && key[j]; j++)
			if (k[j] != key[j] && !(k[j] == '-' && key[j] == '_'))
				break;
		if (!k[j] && !key[j])
			return &train_opt_table[i];
	}
	return NULL;
}

int train_opts_needs_value(const char *key)
{
	const struct st_opt_desc *d = find(key);
	return d && d->type != OT_BOOL;
}

int train_opts_set(struct st_train_opts *o, const char *key, const char *value)
{
	const struct st_opt_desc *d = find(key);
	if (!d) {
		/* a slip of the keyboard (--stesp, "seq_lne") named with the option
		 * it most likely is: the first near one in the table's order */
		const char *near = NULL;
		for (int i = 0; i < train_opt_count && !near; i++)
			if (st_is_near(key, train_opt_table[i].key))
				near = train_opt_table[i].key;
		char hint[160];
		if (near)
			snprintf(hint, sizeof hint,
				 "did you mean '%s'? `strata train --help` lists the options", near);
		else
			snprintf(hint, sizeof hint, "run `strata train --help` for the list of options");
		ST_USAGE_ERROR(hint, "unknown option '%s'", key);
		return ST_FAIL;
	}
	char *field = (char *)o + d->offset;
	switch (d->type) {
	case OT_INT:
	case OT_LONG: {
		/* decimal only, 1e6 allowed for token budgets */
		long v = 0;
		const enum st_parse r = st_parse_whole(value, &v);
		ST_CHECK_USAGE(r != ST_PARSE_NOT_INT, "give a whole number",
			 "option '%s': '%s' is not an integer", d->key, value);
		const long lim = d->type == OT_INT ? INT_MAX : LONG_MAX;
		ST_CHECK_USAGE(r == ST_PARSE_OK && v <= lim && v >= -lim, "give a smaller number",
			 "option '%s': %s is out of range (its size must be at most %ld)", d->key,
			 value, lim);
		if (d->type == OT_INT)
			*(int *)field = (int)v;
		else
			*(long *)field = v;
		break;
	}
	case OT_DOUBLE: {
		double v = 0;
		const enum st_parse r = st_parse_real(value, &v);
		ST_CHECK_USAGE(r != ST_PARSE_NOT_INT, "give a decimal number",
			 "option '%s': '%s' is not a number", d->key, value);
		ST_CHECK_USAGE(r == ST_PARSE_OK, "give a number a double can hold (about 1e-308 to 1e308)",
			 "option '%s': %s is out of range", d->key, value);
		*(double *)field = v;
		break;
	}
	case OT_BOOL:
		*(int *)field = train_opts_bool(value);
		if (*(int *)field < 0) {
			ST_USAGE_ERROR("use true or false", "option '%s': '%s' is not a boolean", d->key,
				 value);
			return ST_FAIL;
		}
		break;
	case OT_STR:
		ST_CHECK_USAGE(strlen(value) < d->size, "use a shorter value", "option '%s': value too long",
			 d->key);
		memcpy(field, value, strlen(value) + 1);
		break;
	}
	return ST_OK;
}

void train_opts_defaults(struct st_train_opts *o)
{
	memset(o, 0, sizeof *o);
	for (int i = 0; i < train_opt_count; i++)
		if (train_opts_set(o, train_opt_table[i].key, train_opt_table[i].defval) != ST_OK)
			abort(); /* the table's own defaults must parse */
}

int train_opts_from_cjson(struct st_train_opts *o, const cJSON *obj, const char *where)
{
	ST_CHECK_USAGE(cJSON_IsObject(obj), "the options must be a JSON object", "%s: not a JSON object",
		 where);
	const cJSON *it;
	/* one option under both spellings ("seq_len" and "seq-len") is a key
	 * given twice: which one counts would be an accident of order */
	cJSON_ArrayForEach(it, obj)
	{
		const struct st_opt_desc *d = find(it->string);
		for (const cJSON *o2 = it->next; d && o2; o2 = o2->next)
			ST_CHECK_USAGE(find(o2->string) != d, "keep one of them",
				 "%s: option '%s' is given twice, as \"%s\" and \"%s\"", where, d->key,
				 it->string, o2->string);
	}
	cJSON_ArrayForEach(it, obj)
	{
		char buf[64];
		const char *val = buf;
		if (cJSON_IsString(it))
			val = it->valuestring;
		else if (cJSON_IsBool(it)) {
			const struct st_opt_desc *d = find(it->string);
			ST_CHECK_USAGE(!d || d->type == OT_BOOL,
				 "write the number or text the option takes (`strata train --help`)",
				 "%s: option '%s' takes a value, not true or false", where,
				 it->string);
			val = cJSON_IsTrue(it) ? "1" : "0";
		}
		else if (cJSON_IsNumber(it)) {
			/* 1e400 parses as inf: out of range, as the flag says (it read
			 * "'inf' is not a number") */
			ST_CHECK_USAGE(isfinite(it->valuedouble), "give a number a double holds (up to 1.8e308)",
				 "%s: option '%s': the number is out of range", where, it->string);
			snprintf(buf, sizeof buf, "%.17g", it->valuedouble);
		}
		else if (cJSON_IsArray(it) && find(it->string) && !strcmp(find(it->string)->key, "offload-dir")) {
			/* ["/nvme0/s", "/nvme1/s"]: one directory per SSD, as the
			 * repeated flag */
			char *joined = st_calloc(1, sizeof o->offload_dir);
			if (!joined)
				return ST_FAIL;
			const cJSON *d;
			int ok = 1;
			cJSON_ArrayForEach(d, it)
			{
				const size_t len = strlen(joined);
				ok = ok && cJSON_IsString(d) &&
				     len + strlen(d->valuestring) + 2 < sizeof o->offload_dir;
				if (ok)
					snprintf(joined + len, sizeof o->offload_dir - len, "%s%s", len ? "," : "",
						 d->valuestring);
			}
			/* the directories travel joined by commas: a comma in one
			 * would split it */
			const cJSON *comma = NULL;
			cJSON_ArrayForEach(d, it)
				if (!comma && cJSON_IsString(d) && strchr(d->valuestring, ','))
					comma = d;
			const int rc = ok && !comma ? train_opts_set(o, "offload-dir", joined) : ST_FAIL;
			free(joined);
			ST_CHECK_USAGE(ok, "give a list of directory names, or one string \"a,b\"",
				 "%s: option 'offload-dir' holds a list with something other than short "
				 "strings",
				 where);
			ST_CHECK_USAGE(!comma, "rename the directory, or give it through a link without a comma",
				 "%s: offload directory '%s' has a comma in its name, which strata reads as "
				 "two directories",
				 where, comma->valuestring);
			ST_TRY(rc);
			continue;
		} else {
			ST_USAGE_ERROR("options are strings, numbers or booleans (offload-dir: also a list of "
				 "strings)",
				 "%s: option '%s' has an unsupported value", where, it->string);
			return ST_FAIL;
		}
		if (train_opts_set(o, it->string, val) != ST_OK) {
			ST_USAGE_ERROR(NULL, "in %s", where);
			return ST_FAIL;
		}
	}
	return ST_OK;
}

int train_opts_load_json(struct st_train_opts *o, const char *path)
{
	cJSON *root;
	ST_TRY(fs_read_json(path, &root, "check the JSON syntax: an object of option: value"));
	/* a whole-number option of 2^53 or more in a JSON number lost its last
	 * digits in the double it was read into (a seed of 2^53 + 1 trained
	 * as 2^53): its digits as a string read exactly. (A checkpoint's
	 * trainer.json that saved one rounded, before seeds were saved as
	 * strings, still resumes with it.) */
	const cJSON *it;
	cJSON_ArrayForEach(it, root)
	{
		const struct st_opt_desc *d = find(it->string);
		if (cJSON_IsNumber(it) && d && d->type == OT_LONG && /* ints are bounded anyway */
		    fabs(it->valuedouble) >= ST_EXACT_INT_MAX) {
			ST_USAGE_ERROR("write the number as a string (\"9007199254740993\"), which is read exactly",
				 "%s: option '%s': %.17g is 2^53 or more, where a JSON number cannot "
				 "hold every whole number",
				 path, it->string, it->valuedouble);
			cJSON_Delete(root);
			return ST_FAIL;
		}
	}
	int rc = train_opts_from_cjson(o, root, path);
	cJSON_Delete(root);
	return rc;
}

/* cJSON prints 15 significant digits whenever they come within a relative
 * 2^-52 of the value, so a seed of 2^53 - 1 came back as 9.00719925474099e+15
 * and a resume shuffled the data another way. Whole numbers below 2^53 as
 * such; other finite values in the fewest digits that read back exactly. */
struct cJSON *train_opts_to_cjson(const struct st_train_opts *o)
{
	cJSON *r = cJSON_CreateObject();
	for (int i = 0; i < train_opt_count; i++) {
		const struct st_opt_desc *d = &train_opt_table[i];
		const char *field = (const char *)o + d->offset;
		switch (d->type) {
		case OT_INT:
			json_add_exact(r, d->key, *(const int *)field);
			break;
		case OT_LONG: {
			/* past 2^53 a JSON number (a double to its readers) cannot
			 * hold it: its digits as a string, which reads back exactly */
			const long v = *(const long *)field;
			if (v > 9007199254740992L || v < -9007199254740992L) {
				char digits[24];
				snprintf(digits, sizeof digits, "%ld", v);
				cJSON_AddStringToObject(r, d->key, digits);
			} else {
				json_add_exact(r, d->key, (double)v);
			}
			break;
		}
		case OT_DOUBLE:
			json_add_exact(r, d->key, *(const double *)field);
			break;
		case OT_BOOL:
			cJSON_AddBoolToObject(r, d->key, *(const int *)field);
			break;
		case OT_STR:
			cJSON_AddStringToObject(r, d->key, field);
			break;
		}
	}
	return r;
}

char *train_opts_to_json(const struct st_train_opts *o)
{
	cJSON *r = train_opts_to_cjson(o);
	char *s = r ? cJSON_Print(r) : NULL;
	cJSON_Delete(r);
	return s;
}

int train_opts_validate(const struct st_train_opts *o)
{
	char v[32];
	enum st_optim_kind kind; /* first: the checks below depend on it */
	ST_TRY(optim_parse_kind(&kind, o->optimizer));
	ST_CHECK_USAGE(o->micro_batch > 0, "give the sequences per micro-batch, 1 or more (default 8)",
		 "--micro-batch must be positive (got %d)", o->micro_batch);
	ST_CHECK_USAGE(o->seq_len > 1, "give 2 or more tokens per sequence (default 256)",
		 "--seq-len must be at least 2 (got %d)", o->seq_len);
	ST_CHECK_USAGE(o->grad_accum > 0, "give the micro-batches per step, 1 or more (1: no accumulation)",
		 "--grad-accum must be positive (got %d)", o->grad_accum);
	/* a step's tokens and targets are held at once (8 bytes a token): 2^28
	 * tokens (2 GiB) is far beyond any step that trains well */
	const double step_tokens = (double)o->micro_batch * o->seq_len * o->grad_accum;
	ST_CHECK_USAGE(step_tokens <= (double)(1 << 28), "lower --grad-accum, --micro-batch or --seq-len",
		 "a step of %.0f tokens (--micro-batch %d x --seq-len %d x --grad-accum %d) is more "
		 "than the 268435456 strata holds at once",
		 step_tokens, o->micro_batch, o->seq_len, o->grad_accum);
	/* the optimizer's settings are floats: checked as the floats they
	 * become (--lr 1e-50 became 0 and trained nothing, --eps 1e-50 became 0
	 * and --beta1 0.99999999999 became 1, each turning the weights to NaN) */
	ST_CHECK_USAGE(o->lr >= FLT_MIN && o->lr <= FLT_MAX, "the default is 1e-3; fine-tuning uses 1e-5 to 1e-4",
		 "--lr must be positive and a float: from %g to %g (got %s)", (double)FLT_MIN,
		 (double)FLT_MAX, st_shortest(v, sizeof v, o->lr));
	ST_CHECK_USAGE(o->min_lr_ratio >= 0 && o->min_lr_ratio <= 1,
		 "the schedule ends at --lr x this ratio: 0.1 by default, 0 decays to zero",
		 "--min-lr-ratio must be in [0, 1] (got %s)", st_shortest(v, sizeof v, o->min_lr_ratio));
	ST_CHECK_USAGE(o->weight_decay >= 0, "give 0 for no decay (default 0.1)",
		 "--weight-decay must be >= 0 (got %s)", st_shortest(v, sizeof v, o->weight_decay));
	/* AdamW's decoupled decay, and plain SGD's L2 term, scale a decayed
	 * weight by 1 - lr*wd each step: at lr*wd >= 1 that factor is <= 0, and
	 * the run would train a model that is zeroed or flipped each step while
	 * every loss stays finite. (With momentum mu, SGD's L2 term builds up to
	 * about lr*wd/(1 - mu) a step, so there this bound is necessary, not
	 * sufficient.) */
	ST_CHECK_USAGE(o->lr * o->weight_decay < 1,
		 "lower --lr or --weight-decay: their product is usually 1e-5 to 1e-3",
		 "--lr %g x --weight-decay %g = %g: each step would scale every decayed weight by "
		 "1 - %g <= 0",
		 o->lr, o->weight_decay, o->lr * o->weight_decay, o->lr * o->weight_decay);
	/* a float too: 1e-45 became 0, a clip factor of 0, and the run
	 * trained nothing */
	ST_CHECK_USAGE(o->grad_clip == 0 || (o->grad_clip >= FLT_MIN && o->grad_clip <= FLT_MAX),
		 "give the largest gradient norm a step may have (default 1), or 0 for no clipping",
		 "--grad-clip must be 0 or a positive float from %g to %g (got %s)", (double)FLT_MIN,
		 (double)FLT_MAX, st_shortest(v, sizeof v, o->grad_clip));
	/* "as a float": 0.99999999999 is below 1, and rounds to it */
	const char *beta_h = "the defaults are --beta1 0.9 and --beta2 0.95; up to 1 - 6e-8 stays "
			     "below 1 as a float";
	ST_CHECK_USAGE(o->beta1 >= 0 && (float)o->beta1 < 1.0f, beta_h,
		 "--beta1 must be in [0, 1) as a float (got %s)", st_shortest(v, sizeof v, o->beta1));
	ST_CHECK_USAGE(o->beta2 >= 0 && (float)o->beta2 < 1.0f, beta_h,
		 "--beta2 must be in [0, 1) as a float (got %s)", st_shortest(v, sizeof v, o->beta2));
	ST_CHECK_USAGE(o->eps >= FLT_MIN && o->eps <= FLT_MAX, "the default is 1e-8",
		 "--eps must be positive and a float: from %g to %g (got %s)", (double)FLT_MIN,
		 (double)FLT_MAX, st_shortest(v, sizeof v, o->eps));
	ST_CHECK_USAGE(o->momentum >= 0 && (float)o->momentum < 1.0f,
		 "0.9 is usual, 0 is plain SGD; up to 1 - 6e-8 stays below 1 as a float",
		 "--momentum must be in [0, 1) as a float (got %s)", st_shortest(v, sizeof v, o->momentum));
	ST_CHECK_USAGE(strcmp(o->optimizer, "sgd8bit") != 0 || o->momentum > 0,
		 "sgd8bit quantizes the momentum buffer: give --momentum, e.g. 0.9",
		 "--optimizer sgd8bit without momentum has no state to quantize");
	ST_CHECK_USAGE(o->quant_min_size >= 0,
		 "tensors with fewer elements keep fp32 state (default 4096); 0 quantizes all",
		 "--quant-min-size must be >= 0 (got %ld)", o->quant_min_size);
	/* checked for every optimizer, so a typo fails before an 8-bit resume would */
	ST_CHECK_USAGE(optim_quant_block_ok(o->quant_block), "give a power of two from 16 to 65536 (256 is bitsandbytes' choice)",
		 "--quant-block must be a power of two in [16, 65536] (got %d)", o->quant_block);
	/* read at the first save, hours in: a bad size is named now */
	size_t shard;
	ST_TRY(parse_bytes(o->shard_size, &shard, "--shard-size"));
	ST_CHECK_USAGE(o->max_skipped_steps >= 0,
		 "give the non-finite steps to tolerate (default 10); 0 stops at the first",
		 "--max-skipped-steps must be >= 0 (got %d)", o->max_skipped_steps);
	/* before a resume compares the rank with the run's (a rank of 0 read
	 * as "the run used 16") */
	if (!strncmp(o->optimizer, "galore", 6))
		ST_TRY(galore_check_rank_gap(o->galore_rank, o->galore_update_gap));
	ST_CHECK_USAGE(!strcmp(o->galore_proj, "randomized") || !strcmp(o->galore_proj, "svd"),
		 "use --galore-proj randomized (the default) or svd",
		 "--galore-proj must be randomized or svd (got '%s')", o->galore_proj);
	/* checked before it becomes a float: 1e-50 became 0 ("must be positive
	 * (got 0)") and 1e39 inf, which trained the weights to -inf */
	ST_CHECK_USAGE(o->galore_scale >= FLT_MIN && o->galore_scale <= FLT_MAX, "the paper uses 0.25",
		 "--galore-scale must be positive and a float: from %g to %g (got %g)",
		 (double)FLT_MIN, (double)FLT_MAX, o->galore_scale);
	ST_CHECK_USAGE(o->galore_start_spread >= 1, "1 computes every first projector at the first update",
		 "--galore-start-spread must be >= 1 (got %d)", o->galore_start_spread);
	ST_CHECK_USAGE(!strcmp(o->galore_moments, "keep") || !strcmp(o->galore_moments, "rotate"),
		 "use --galore-moments keep (the default) or rotate",
		 "--galore-moments must be keep or rotate (got '%s')", o->galore_moments);
	ST_CHECK_USAGE(o->steps >= 0, "give the steps to train, or --max-tokens N",
		 "--steps must be >= 0 (got %ld)", o->steps);
	/* the tokens a run sees are counted exactly up to 2^53 (trainer.json) */
	ST_CHECK_USAGE((double)o->steps * step_tokens <= 9007199254740992.0, "give fewer --steps",
		 "--steps %ld of %.0f tokens each is %.3g tokens, more than the 2^53 (9e15) a run "
		 "counts",
		 o->steps, step_tokens, (double)o->steps * step_tokens);
	ST_CHECK_USAGE(o->warmup >= -1, "give 0 or more steps, or -1 for a tenth of the run",
		 "--warmup must be >= -1 (got %ld)", o->warmup);
	ST_CHECK_USAGE(!strcmp(o->schedule, "cosine") || !strcmp(o->schedule, "linear") ||
			 !strcmp(o->schedule, "wsd") || !strcmp(o->schedule, "constant"),
		 "use --schedule cosine, linear, wsd or constant", "unknown --schedule '%s'",
		 o->schedule);
	ST_CHECK_USAGE(o->decay_frac > 0 && o->decay_frac <= 1, "0.2 decays over the last fifth of the run",
		 "--decay-frac must be in (0, 1] (got %g)", o->decay_frac);
	ST_CHECK_USAGE(o->max_tokens >= 0 && o->max_tokens <= 9007199254740992.0,
		 "give a token count up to 2^53 (9e15)", "--max-tokens must be in [0, 2^53] (got %g)",
		 o->max_tokens);
	ST_CHECK_USAGE(o->steps > 0 || o->max_tokens > 0, "give --steps N or --max-tokens N",
		 "no training length: --steps and --max-tokens are both 0");
	ST_CHECK_USAGE(o->eval_interval >= 0, "give 0 to evaluate at the end only",
		 "--eval-interval must be >= 0 (got %ld)", o->eval_interval);
	ST_CHECK_USAGE(o->ckpt_interval >= 0, "give 0 to save at the end only",
		 "--ckpt-interval must be >= 0 (got %ld)", o->ckpt_interval);
	ST_CHECK_USAGE(o->eval_tokens >= 0, "give 0 to score the whole validation shard",
		 "--eval-tokens must be >= 0 (got %ld)", o->eval_tokens);
	ST_CHECK_USAGE(o->keep_ckpts >= 0, "give 0 to keep every checkpoint",
		 "--keep-ckpts must be >= 0 (got %d)", o->keep_ckpts);
	ST_CHECK_USAGE(o->threads >= 0 && o->threads <= ST_MAX_THREADS,
		 "give 0 for every core (or the cgroup's CPU quota, where one is set)",
		 "--threads must be in [0, %d] (got %d)", ST_MAX_THREADS, o->threads);
	ST_TRY(session_check_matmul_precision(o->matmul_precision, "--matmul-precision"));
	ST_CHECK_USAGE(o->log_interval > 0, "give the steps between log lines (default 10)",
		 "--log-interval must be positive (got %d)", o->log_interval);
	ST_CHECK_USAGE(o->prefetch >= 0 && o->prefetch <= 64, "give 0 to let the planner choose",
		 "--prefetch must be between 0 (auto) and 64 (got %d)", o->prefetch);
	/* a list of nothing read as no directory, and the run planned without
	 * the disk the user meant to give it */
	ST_CHECK_USAGE(!*o->offload_dir || o->offload_dir[strspn(o->offload_dir, ",")],
		 "give --offload-dir DIR (repeated, or DIR1,DIR2, one per SSD)",
		 "--offload-dir '%s' names no directory", o->offload_dir);
	ST_CHECK_USAGE(o->trace_steps >= 0, "give the steps to trace (default 20)",
		 "--trace-steps must be >= 0 (got %d)", o->trace_steps);
	ST_CHECK_USAGE(!strcmp(o->device, "cpu") || !strcmp(o->device, "cuda") || !strcmp(o->device, "auto"),
		 "use --device cpu, cuda or auto", "unknown device '%s'", o->device);
	ST_CHECK_USAGE(!strcmp(o->progress, "auto") || !strcmp(o->progress, "bar") ||
			 !strcmp(o->progress, "lines") || !strcmp(o->progress, "none"),
		 "use --progress auto, bar, lines or none", "unknown progress mode '%s'", o->progress);
	return ST_OK;
}

void train_opts_help(FILE *f)
{
	for (int i = 0; i < train_opt_count; i++) {
		const struct st_opt_desc *d = &train_opt_table[i];
		const char *arg = d->type == OT_BOOL ? "" : d->type == OT_STR ? " S" : " N";
		char flag[48];
		snprintf(flag, sizeof flag, "--%s%s", d->key, arg);
		fprintf(f, "  %-22s %s", flag, d->help);
		if (d->type == OT_BOOL) /* as the other commands' helps write on/off defaults */
			fprintf(f, " [%s]", strcmp(d->defval, "0") ? "true" : "false");
		else if (*d->defval)
			fprintf(f, " [%s]", d->defval);
		fputc('\n', f);
	}
}
