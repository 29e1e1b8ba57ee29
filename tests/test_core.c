/* Unit tests of the pieces between kernels and trainer: config parsing and
 * validation, the store's budgets, the lr schedule, option parsing, the
 * data sampler, and the sampler of generated tokens. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/generate.h"
#include "engine/session.h"
#include "jsonutil.h"
#include "model/llama.h"
#include "optim/optim.h"
#include "optim/quantmap.h"
#include "ops/ops.h"
#include "store/store.h"
#include "trainer/options.h"
#include "trainer/progress.h"
#include "trainer/trainer.h"
#include "util/check.h"
#include "util/finite.h"

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	cr_assert(f);
	fputs(text, f);
	fclose(f);
}

/* A small model's config.json at path, with the keys in extra (RoPE's). */
static void write_small_config(const char *path, const char *extra)
{
	char text[512];
	snprintf(text, sizeof text,
		 "{\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":128,"
		 "\"num_hidden_layers\":2,\"num_attention_heads\":4,%s}",
		 extra);
	write_file(path, text);
}

Test(config, hf_variants)
{
	char dir[] = "/tmp/strata-cfg-XXXXXX", path[64];
	cr_assert(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/config.json", dir);
	struct st_config c;
	/* newer layout: rope_theta inside rope_parameters, kv heads missing */
	write_file(path, "{\"model_type\":\"llama\",\"vocab_size\":100,\"hidden_size\":64,"
			 "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
			 "\"rope_parameters\":{\"rope_theta\":500000.0,\"rope_type\":\"default\"},"
			 "\"tie_word_embeddings\":true}");
	cr_assert_eq(config_load(&c, path), 0);
	cr_expect_eq(c.n_kv_heads, 4);
	cr_expect_eq(c.head_dim, 16);
	cr_expect_eq(c.rope_theta, 500000.0);
	cr_expect_eq(c.tied, 1);
	/* explicit head_dim, top-level rope_theta */
	write_file(path, "{\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":128,"
			 "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
			 "\"head_dim\":32,\"rope_theta\":10000}");
	cr_assert_eq(config_load(&c, path), 0);
	cr_expect_eq(c.head_dim, 32);
	cr_expect_eq(c.n_kv_heads, 2);
	/* unsupported architecture and malformed values are errors */
	write_file(path, "{\"model_type\":\"gpt2\",\"vocab_size\":100,\"hidden_size\":64,"
			 "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4}");
	cr_expect_eq(config_load(&c, path), ST_FAIL);
	write_file(path, "{\"vocab_size\":\"many\",\"hidden_size\":64}");
	cr_expect_eq(config_load(&c, path), ST_FAIL);
	write_file(path, "{not json");
	cr_expect_eq(config_load(&c, path), ST_FAIL);
	/* RoPE: plain ("default", or no scaling) is read; any scaling is refused,
	 * not ignored */
	const struct {
		const char *rope;
		int ok;
	} ropes[] = {
		{"\"rope_scaling\":null", 1},
		{"\"rope_scaling\":{\"rope_type\":\"default\"}", 1},
		{"\"rope_scaling\":{\"type\":\"default\"}", 1},
		{"\"rope_scaling\":{}", 1},
		{"\"rope_parameters\":{\"rope_theta\":10000}", 1},
		{"\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0}", 0},
		{"\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.0}", 0},
		{"\"rope_scaling\":{\"factor\":2.0}", 0},
		{"\"rope_parameters\":{\"rope_theta\":10000,\"rope_type\":\"yarn\"}", 0},
		{"\"rope_parameters\":{\"rope_theta\":10000,\"rope_type\":3}", 0},
	};
	for (int i = 0; i < (int)(sizeof ropes / sizeof ropes[0]); i++) {
		write_small_config(path, ropes[i].rope);
		const int old = st_log_mute(1);
		cr_expect_eq(config_load(&c, path) == ST_OK, ropes[i].ok, "%s", ropes[i].rope);
		st_log_mute(old);
	}
	/* transformers 5 takes a rope_scaling that is not empty whole over
	 * rope_parameters: the theta is its own, else the top level's, else
	 * 10000. The thetas LlamaConfig (transformers 5.24) gives these: */
	const struct {
		const char *rope;
		double theta;
	} thetas[] = {
		{"\"rope_theta\":10000,\"rope_scaling\":{\"rope_type\":\"default\",\"rope_theta\":500000}",
		 500000},
		{"\"rope_theta\":500000,\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000},"
		 "\"rope_scaling\":{\"rope_type\":\"default\"}",
		 500000}, /* strata took 10000 */
		{"\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":20000},"
		 "\"rope_scaling\":{\"rope_type\":\"default\"}",
		 10000}, /* strata took 20000 */
		{"\"rope_theta\":500000,\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000}",
		 10000},
		{"\"rope_theta\":500000,\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000},"
		 "\"rope_scaling\":{}",
		 10000},
		{"\"rope_theta\":40000,\"rope_parameters\":{\"rope_type\":\"default\"}", 40000},
		{"\"rope_theta\":40000,\"rope_parameters\":null", 40000},
		{"\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000},"
		 "\"rope_scaling\":{\"rope_type\":\"default\",\"rope_theta\":20000}",
		 20000},
	};
	for (int i = 0; i < (int)(sizeof thetas / sizeof thetas[0]); i++) {
		write_small_config(path, thetas[i].rope);
		cr_assert_eq(config_load(&c, path), ST_OK, "%s", thetas[i].rope);
		cr_expect_eq(c.rope_theta, thetas[i].theta, "%s: theta %g, transformers %g", thetas[i].rope,
			     c.rope_theta, thetas[i].theta);
	}
	/* round trip through config_save */
	cr_assert_eq(config_preset(&c, "llama-60m"), 0);
	cr_assert_eq(config_save(&c, path), 0);
	struct st_config d;
	cr_assert_eq(config_load(&d, path), 0);
	cr_expect(d.dim == 512 && d.n_layers == 8 && d.n_heads == 8 && d.ffn_dim == 1376 &&
		  d.vocab_size == c.vocab_size && d.rope_theta == c.rope_theta && d.norm_eps == c.norm_eps);
	/* the floats as written: the decimals they were given as, not their
	 * float values widened (9.99999997475243e-07); ids outside a smaller
	 * vocabulary left out */
	c.vocab_size = 100;
	cr_assert_eq(config_save(&c, path), 0);
	cJSON *root = tu_read_json(path);
	cr_expect_eq(cJSON_GetObjectItem(root, "rms_norm_eps")->valuedouble, 1e-6);
	cr_expect_eq(cJSON_GetObjectItem(root, "initializer_range")->valuedouble, 0.02);
	cr_expect(!cJSON_GetObjectItem(root, "bos_token_id") && !cJSON_GetObjectItem(root, "eos_token_id"),
		  "token ids 256/257 written for a vocabulary of 100");
	cJSON_Delete(root);
	/* config_save_with: a base's keys strata does not use carried; its own
	 * values for those strata writes, and the ones the save changes, not;
	 * an end-token list only where its first is the id strata keeps, and
	 * ids a smaller vocabulary lost not put back from the base */
	const char *base = "{\"pad_token_id\":0,\"use_cache\":false,\"hidden_size\":9,"
			   "\"dtype\":\"bfloat16\",\"quantization_config\":{\"bits\":4},"
			   "\"rope_parameters\":{\"rope_theta\":1},\"bos_token_id\":256,"
			   "\"eos_token_id\":[%d,5],\"x\":{\"y\":[1,\"z\"]},"
			   "\"auto_map\":{\"AutoModel\":\"m.M\"},\"_name_or_path\":\"a/b\","
			   "\"transformers_version\":\"4.1\"}";
	for (int k = 0; k < 3; k++) {
		char text[512];
		snprintf(text, sizeof text, base, k == 1 ? 256 : 257);
		c.vocab_size = k == 2 ? 100 : 258;
		cr_assert_eq(config_save_with(&c, path, text), 0);
		root = tu_read_json(path);
		cJSON *pad = cJSON_GetObjectItem(root, "pad_token_id");
		cJSON *x = cJSON_GetObjectItem(root, "x"), *eos = cJSON_GetObjectItem(root, "eos_token_id");
		cr_expect(cJSON_IsNumber(pad) && pad->valueint == 0 &&
				  cJSON_IsFalse(cJSON_GetObjectItem(root, "use_cache")) &&
				  cJSON_IsArray(cJSON_GetObjectItem(x, "y")),
			  "k %d: the base's unused keys not carried", k);
		cr_expect(cJSON_GetObjectItem(root, "hidden_size")->valueint == 512 &&
				  !cJSON_GetObjectItem(root, "dtype") &&
				  !cJSON_GetObjectItem(root, "quantization_config") &&
				  !cJSON_GetObjectItem(root, "rope_parameters") &&
				  !cJSON_GetObjectItem(root, "auto_map") &&
				  !cJSON_GetObjectItem(root, "_name_or_path") &&
				  !cJSON_GetObjectItem(root, "transformers_version") &&
				  cJSON_GetObjectItem(root, "rope_theta")->valuedouble == c.rope_theta,
			  "k %d: the base's value of a key strata writes or changes kept", k);
		if (k == 0)
			cr_expect(cJSON_IsArray(eos) && cJSON_GetArraySize(eos) == 2 &&
					  cJSON_GetArrayItem(eos, 0)->valueint == 257,
				  "the end-token list starting with strata's not kept");
		else if (k == 1)
			cr_expect(cJSON_IsNumber(eos) && eos->valueint == 257,
				  "a list starting with another id kept");
		else
			cr_expect(!eos && !cJSON_GetObjectItem(root, "bos_token_id"),
				  "ids outside the vocabulary put back from the base");
		cJSON_Delete(root);
		struct st_config e;
		cr_expect_eq(config_load(&e, path), 0, "k %d: the file does not load", k);
	}
	/* a base that does not parse carries nothing */
	cr_assert_eq(config_save_with(&c, path, "{not json"), 0);
	root = tu_read_json(path);
	cr_expect(!cJSON_GetObjectItem(root, "pad_token_id"));
	cJSON_Delete(root);
}

Test(config, presets_match_the_galore_paper)
{
	struct st_config c;
	cr_assert_eq(config_preset(&c, "llama-60m"), 0);
	cr_expect(c.dim == 512 && c.n_layers == 8 && c.n_heads == 8 && c.ffn_dim == 1376);
	cr_assert_eq(config_preset(&c, "llama-130m"), 0);
	cr_expect(c.dim == 768 && c.n_layers == 12 && c.n_heads == 12 && c.ffn_dim == 2048);
	/* with LLaMA's 32000-token vocabulary the 60M preset has ~58M parameters */
	c.vocab_size = 32000;
	cr_assert_eq(config_preset(&c, "llama-60m"), 0);
	c.vocab_size = 32000;
	struct st_model m;
	cr_assert_eq(model_build(&m, &c), 0);
	cr_expect(m.numel > 55e6 && m.numel < 62e6, "60M preset has %zu parameters", m.numel);
	model_free(&m);
}

Test(model, layout_roles_and_alignment)
{
	struct st_config c;
	cr_assert_eq(config_preset(&c, "tiny"), 0);
	c.tied = 1;
	struct st_model m;
	cr_assert_eq(model_build(&m, &c), 0);
	cr_expect_eq(m.n_units, c.n_layers + 2);
	cr_expect_null(model_find_param(&m, "lm_head.weight"), "tied model has an lm_head");
	const struct st_param *q = model_find_param(&m, "model.layers.1.self_attn.q_proj.weight");
	cr_assert(q);
	cr_expect_eq(q->role, ST_ROLE_ATTN);
	cr_expect_eq(q->unit, 2);
	for (int i = 0; i < m.n_params; i++)
		cr_expect_eq(m.params[i].offset % 16, 0, "%s not 64-byte aligned", m.params[i].name);
	model_free(&m);
}

Test(store, budgets_are_enforced)
{
	size_t budgets[ST_TIER__COUNT] = {1000, 0, 0};
	struct st_store s;
	cr_assert_eq(store_init(&s, 2, budgets), 0);
	cr_expect_eq(store_alloc(&s, 0, ST_SLAB_W, ST_TIER_DEVICE, 600), 0);
	cr_expect_eq(store_alloc(&s, 1, ST_SLAB_W, ST_TIER_DEVICE, 600), ST_FAIL,
		     "allocation past the device budget succeeded");
	cr_expect_eq(store_alloc(&s, 1, ST_SLAB_W, ST_TIER_HOST, 600), 0);
	cr_expect_eq(s.tiers[ST_TIER_DEVICE].used, 600);
	cr_expect_eq(s.tiers[ST_TIER_HOST].peak, 600);
	store_alias(&s, 0, ST_SLAB_M, ST_SLAB_W);
	cr_expect_eq(store_acquire(&s, 0, ST_SLAB_M), store_acquire(&s, 0, ST_SLAB_W));
	store_free(&s); /* aliases must not be freed twice */
}

Test(trainer, lr_schedule)
{
	struct st_train_opts o;
	train_opts_defaults(&o);
	o.lr = 1.0;
	o.min_lr_ratio = 0.1;
	cr_expect_float_eq(lr_at(&o, 1, 100, 10), 0.1, 1e-12);
	cr_expect_float_eq(lr_at(&o, 10, 100, 10), 1.0, 1e-12);
	cr_expect_float_eq(lr_at(&o, 11, 100, 10), 1.0, 1e-12); /* the decay starts at the peak */
	cr_expect_float_eq(lr_at(&o, 56, 100, 10), 0.55, 1e-12); /* cosine midpoint */
	/* the last step just above the floor: 0.1 + 0.45 (1 + cos(pi 89/90)) */
	cr_expect_float_eq(lr_at(&o, 100, 100, 10), 0.1 + 0.45 * (1 + cos(M_PI * 89 / 90)), 1e-12);
	cr_expect(lr_at(&o, 100, 100, 10) > 0.1);
	for (long s = 11; s < 100; s++)
		cr_expect(lr_at(&o, s + 1, 100, 10) < lr_at(&o, s, 100, 10), "lr did not fall at step %ld", s);
	/* no warmup: step 1 takes the full rate (it took the floor in a
	 * one-step run); a floor of 0 is never reached, so no step is wasted */
	cr_expect_float_eq(lr_at(&o, 1, 1, 0), 1.0, 1e-12);
	cr_expect_float_eq(lr_at(&o, 1, 100, 0), 1.0, 1e-12);
	o.min_lr_ratio = 0;
	cr_expect(lr_at(&o, 100, 100, 0) > 0, "the last step's rate is 0");
}

/* --schedule linear, wsd and constant, written out from their definitions:
 * warmup as cosine's, then linear over the same path; wsd holding the full
 * rate until the last ceil(decay_frac * (total - warmup)) steps, the first
 * of those a (d+1)th of the way to the floor and the last just above it;
 * constant at the full rate to the end. */
Test(trainer, lr_schedule_kinds)
{
	struct st_train_opts o;
	train_opts_defaults(&o);
	cr_expect_str_eq(o.schedule, "cosine");
	cr_expect_float_eq(o.decay_frac, 0.2, 1e-15);
	o.lr = 1.0;
	o.min_lr_ratio = 0.1;

	snprintf(o.schedule, sizeof o.schedule, "linear");
	cr_expect_float_eq(lr_at(&o, 5, 100, 10), 0.5, 1e-12); /* warmup unchanged */
	cr_expect_float_eq(lr_at(&o, 11, 100, 10), 1.0, 1e-12);
	cr_expect_float_eq(lr_at(&o, 56, 100, 10), 0.55, 1e-12); /* halfway: 1 - 0.9 * 45/90 */
	cr_expect_float_eq(lr_at(&o, 41, 100, 10), 1.0 - 0.9 * 30.0 / 90.0, 1e-12);
	cr_expect_float_eq(lr_at(&o, 100, 100, 10), 0.1 + 0.9 / 90.0, 1e-12);

	snprintf(o.schedule, sizeof o.schedule, "wsd");
	/* 90 steps after warmup, d = ceil(0.2 * 90) = 18: steps 83..100 decay */
	cr_expect_float_eq(lr_at(&o, 5, 100, 10), 0.5, 1e-12);
	cr_expect_float_eq(lr_at(&o, 11, 100, 10), 1.0, 1e-12);
	cr_expect_float_eq(lr_at(&o, 82, 100, 10), 1.0, 1e-12); /* the last stable step */
	cr_expect_float_eq(lr_at(&o, 83, 100, 10), 1.0 - 0.9 / 19.0, 1e-12);
	cr_expect_float_eq(lr_at(&o, 91, 100, 10), 1.0 - 0.9 * 9.0 / 19.0, 1e-12);
	cr_expect_float_eq(lr_at(&o, 100, 100, 10), 1.0 - 0.9 * 18.0 / 19.0, 1e-12);
	cr_expect(lr_at(&o, 100, 100, 10) > 0.1);
	for (long s = 83; s < 100; s++)
		cr_expect(lr_at(&o, s + 1, 100, 10) < lr_at(&o, s, 100, 10), "wsd did not fall at %ld", s);
	o.decay_frac = 0.013; /* ceil(0.013 * 90) = 2: the last two steps */
	cr_expect_float_eq(lr_at(&o, 98, 100, 10), 1.0, 1e-12);
	cr_expect_float_eq(lr_at(&o, 99, 100, 10), 1.0 - 0.9 / 3.0, 1e-12);
	o.decay_frac = 1; /* the whole run after warmup: linear, one step later */
	cr_expect_float_eq(lr_at(&o, 11, 100, 10), 1.0 - 0.9 / 91.0, 1e-12);
	o.decay_frac = 0.2;
	cr_expect_float_eq(lr_at(&o, 1, 1, 0), 1.0 - 0.9 / 2.0, 1e-12); /* one step: it decays */

	snprintf(o.schedule, sizeof o.schedule, "constant");
	cr_expect_float_eq(lr_at(&o, 5, 100, 10), 0.5, 1e-12);
	cr_expect_float_eq(lr_at(&o, 11, 100, 10), 1.0, 1e-12);
	cr_expect_float_eq(lr_at(&o, 100, 100, 10), 1.0, 1e-12);

	/* the option checks */
	snprintf(o.schedule, sizeof o.schedule, "cosin");
	cr_expect_eq(train_opts_validate(&o), ST_FAIL, "an unknown schedule was taken");
	snprintf(o.schedule, sizeof o.schedule, "wsd");
	o.steps = 10;
	cr_expect_eq(train_opts_validate(&o), ST_OK);
	o.decay_frac = 0;
	cr_expect_eq(train_opts_validate(&o), ST_FAIL, "--decay-frac 0 was taken");
	o.decay_frac = 1.5;
	cr_expect_eq(train_opts_validate(&o), ST_FAIL, "--decay-frac 1.5 was taken");
}

/* The ETA the progress line shows, for given step and evaluation times:
 * the mean step time times the steps left, plus the last evaluation's time
 * times the evaluations left (at multiples of the interval, and the last
 * step). It once left the evaluations out. */
static double eta_shown(long total, long eval_interval, int has_val, double eval_s, long step)
{
	char path[] = "/tmp/strata-eta-XXXXXX";
	const int fd = mkstemp(path), saved = dup(2);
	cr_assert(fd >= 0 && saved >= 0);
	fflush(stderr);
	dup2(fd, 2);
	struct st_progress p;
	progress_init(&p, "lines", total, 0, 1, eval_interval, has_val);
	if (has_val)
		progress_eval(&p, 0, 5.0, 100, eval_s);
	for (long s = 1; s <= step; s++)
		progress_step(&p, s, 5.0, 1e-3, 100, 1e9, 2.0);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	static char text[1 << 16];
	const ssize_t n = pread(fd, text, sizeof text - 1, 0);
	close(fd);
	unlink(path);
	cr_assert(n > 0 && n < (ssize_t)sizeof text - 1);
	text[n] = '\0';
	const char *last = text, *e;
	while ((e = strstr(last + 1, "ETA ")))
		last = e;
	int h = 0, m = 0, sec = 0;
	if (sscanf(last, "ETA %dh%dm", &h, &m) == 2)
		return 3600.0 * h + 60.0 * m;
	if (sscanf(last, "ETA %dm%ds", &m, &sec) == 2)
		return 60.0 * m + sec;
	cr_assert_eq(sscanf(last, "ETA %ds", &sec), 1, "%s", text);
	return sec;
}

Test(trainer, eta_counts_evaluations)
{
	/* 100 steps of 2 s: 20 left at step 80 */
	cr_expect_eq(eta_shown(100, 0, 0, 0, 80), 40.0);
	/* evaluations at 80 (after its line), 90 and 100 (every 10), 7 s each */
	cr_expect_eq(eta_shown(100, 10, 1, 7.0, 80), 40.0 + 21.0);
	/* every 30: at 90 and the last step */
	cr_expect_eq(eta_shown(100, 30, 1, 7.0, 80), 40.0 + 14.0);
	/* every 25: at 100 only; at the end only (0) */
	cr_expect_eq(eta_shown(100, 25, 1, 7.0, 80), 40.0 + 7.0);
	cr_expect_eq(eta_shown(100, 0, 1, 7.0, 80), 40.0 + 7.0);
	/* the last step's line: its evaluation is still to come */
	cr_expect_eq(eta_shown(100, 10, 1, 7.0, 100), 7.0);
	/* no validation data: no evaluations */
	cr_expect_eq(eta_shown(100, 10, 0, 7.0, 80), 40.0);
}

Test(trainer, options_flags_and_json_agree)
{
	struct st_train_opts a, b;
	train_opts_defaults(&a);
	train_opts_defaults(&b);
	cr_assert_eq(train_opts_set(&a, "micro-batch", "4"), 0);
	cr_assert_eq(train_opts_set(&a, "lr", "3e-4"), 0);
	cr_assert_eq(train_opts_set(&a, "decay-norms", "true"), 0);
	cr_assert_eq(train_opts_set(&a, "max-tokens", "1e6"), 0);
	const char *path = "/tmp/strata-opts-test.json";
	write_file(path, "{\"micro-batch\": 4, \"lr\": 3e-4, \"decay_norms\": true, \"max-tokens\": 1000000}");
	cr_assert_eq(train_opts_load_json(&b, path), 0);
	cr_expect_eq(memcmp(&a, &b, sizeof a), 0, "flags and JSON gave different options");
	cr_expect_eq(train_opts_set(&a, "micro-batch", "x"), ST_FAIL);
	cr_expect_eq(train_opts_set(&a, "no-such-option", "1"), ST_FAIL);
	write_file(path, "{\"learning_rate\": 1}");
	cr_expect_eq(train_opts_load_json(&b, path), ST_FAIL, "unknown JSON key accepted");
	/* and they survive the trip through trainer.json's JSON */
	char *text = train_opts_to_json(&a);
	write_file(path, text);
	free(text);
	train_opts_defaults(&b);
	cr_assert_eq(train_opts_load_json(&b, path), 0);
	cr_expect_eq(memcmp(&a, &b, sizeof a), 0, "options changed through JSON");
	/* offload-dir: a list of directories, as the repeated flag; a list
	 * holding anything but strings is refused */
	write_file(path, "{\"offload_dir\": [\"/nvme0/s\", \"/nvme1/s\"]}");
	cr_assert_eq(train_opts_load_json(&b, path), 0);
	cr_expect_str_eq(b.offload_dir, "/nvme0/s,/nvme1/s");
	write_file(path, "{\"offload-dir\": [\"/nvme0/s\", 3]}");
	const int old = st_log_mute(1);
	cr_expect_eq(train_opts_load_json(&b, path), ST_FAIL);
	write_file(path, "{\"lr\": [1]}");
	cr_expect_eq(train_opts_load_json(&b, path), ST_FAIL);
	/* a comma inside one name would split it in two */
	write_file(path, "{\"offload_dir\": [\"/nvme0/s\", \"/nvme1/a,b\"]}");
	cr_expect_eq(train_opts_load_json(&b, path), ST_FAIL);
	st_log_mute(old);
	unlink(path);
}

Test(generate, sampling_rules)
{
	float logits[5] = {0.1f, 2.0f, 1.9f, -3.0f, 0.0f}, scratch[10];
	cr_expect_eq(sample_logits(logits, 5, 0.0, 1.0, 0, 0.5, scratch), 1, "greedy");
	/* top_p tiny keeps only the most likely token, whatever u is */
	for (double u = 0; u < 1; u += 0.1)
		cr_expect_eq(sample_logits(logits, 5, 1.0, 1e-6, 0, u, scratch), 1);
	/* top_p 0.6 keeps tokens 1 and 2 (p ~ 0.45, 0.41): never 0, 3 or 4 */
	for (double u = 0; u < 1; u += 0.01) {
		int t = sample_logits(logits, 5, 1.0, 0.6, 0, u, scratch);
		cr_expect(t == 1 || t == 2, "top-p sampled token %d", t);
	}
	/* full distribution: frequencies follow softmax */
	int hist[5] = {0};
	for (int i = 0; i < 10000; i++)
		hist[sample_logits(logits, 5, 1.0, 1.0, 0, (i + 0.5) / 10000.0, scratch)]++;
	double z = 0;
	for (int i = 0; i < 5; i++)
		z += exp(logits[i]);
	for (int i = 0; i < 5; i++)
		cr_expect(fabs(hist[i] / 10000.0 - exp(logits[i]) / z) < 0.002, "token %d frequency", i);
	/* top_k 2: the two most likely (1, 2), in their renormalized shares;
	 * top_k 1 is greedy whatever u; top_k past the vocabulary is no limit */
	int h2[5] = {0};
	for (int i = 0; i < 10000; i++)
		h2[sample_logits(logits, 5, 1.0, 1.0, 2, (i + 0.5) / 10000.0, scratch)]++;
	const double z2 = exp(logits[1]) + exp(logits[2]);
	cr_expect(h2[0] == 0 && h2[3] == 0 && h2[4] == 0, "top-k 2 sampled outside the two");
	cr_expect(fabs(h2[1] / 10000.0 - exp(logits[1]) / z2) < 0.002, "top-k 2: token 1 frequency");
	for (double u = 0; u < 1; u += 0.1)
		cr_expect_eq(sample_logits(logits, 5, 1.0, 1.0, 1, u, scratch), 1);
	int h9[5] = {0};
	for (int i = 0; i < 10000; i++)
		h9[sample_logits(logits, 5, 1.0, 1.0, 9, (i + 0.5) / 10000.0, scratch)]++;
	cr_expect(memcmp(h9, hist, sizeof hist) == 0, "top-k past the vocabulary cut something");
	/* top-k first, then top-p within it, as Hugging Face applies them:
	 * shares 0.4, 0.3, 0.2, 0.1 at top-k 2 are 0.571 and 0.429, so top-p
	 * 0.5 keeps token 0 alone (a top-p cut of the whole mass first, 0.4 <
	 * 0.5, kept both) and top-p 0.6 keeps both */
	const float lg[4] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
	for (double u = 0; u < 1; u += 0.01)
		cr_expect_eq(sample_logits(lg, 4, 1.0, 0.5, 2, u, scratch), 0, "u %g", u);
	int h3[4] = {0};
	for (int i = 0; i < 1000; i++)
		h3[sample_logits(lg, 4, 1.0, 0.6, 2, (i + 0.5) / 1000.0, scratch)]++;
	cr_expect(h3[2] == 0 && h3[3] == 0 && abs(h3[0] - 571) <= 2, "%d %d %d %d", h3[0], h3[1],
		  h3[2], h3[3]);
	/* tokens tied with the k-th are kept, as Hugging Face's TopKLogitsWarper
	 * keeps them: logits 5, 4, 3, 3, 3, 1 at top-k 3 keep five tokens at
	 * 0.564, 0.207 and 0.076 each (exactly three were kept, the lower ids) */
	const float tie[6] = {5, 4, 3, 3, 3, 1};
	float scr6[12];
	int h6[6] = {0};
	for (int i = 0; i < 10000; i++)
		h6[sample_logits(tie, 6, 1.0, 1.0, 3, (i + 0.5) / 10000.0, scr6)]++;
	const double zt = exp(5.0) + exp(4.0) + 3 * exp(3.0);
	cr_expect(h6[5] == 0 && h6[3] > 0 && h6[4] > 0, "%d %d %d %d %d %d", h6[0], h6[1], h6[2],
		  h6[3], h6[4], h6[5]);
	for (int i = 0; i < 5; i++)
		cr_expect(fabs(h6[i] / 10000.0 - exp(tie[i]) / zt) < 0.002, "tie: token %d frequency %d",
			  i, h6[i]);
}

static int gen_count;
static int gen_stop_after; /* stop after this many tokens; 0: never */
static int gen_emit(int32_t tok, void *arg)
{
	(void)tok, (void)arg;
	return ++gen_count == gen_stop_after;
}

/* generate() stops at <eos> without emitting it, stops when emit says so, and
 * refuses non-finite
 * scores (a diverged model used to print token 0, NUL bytes). With every
 * weight zero each score is 0, and greedy picks token 0: as <eos>, nothing
 * is emitted; as any other id, every token is. */
static void check_generate_stops(int decoder)
{
	struct st_config c;
	cr_assert_eq(config_preset(&c, "tiny"), 0);
	c.n_layers = 1;
	struct st_session s;
	cr_assert_eq(session_create(&s, ops_cpu(), &c, ST_GRADS_NONE), ST_OK);
	for (int u = 0; u < s.model.n_units; u++)
		memset(s.w[u], 0, s.model.units[u].numel * sizeof(float));
	cr_assert_eq(decoder ? session_decoder(&s, 8) : session_exec(&s, 1, 8), ST_OK);
	const int32_t prompt[2] = {65, 66};
	int ends[2] = {0, 257};
	struct st_gen_opts g = {.max_new = 5, .temperature = 0, .top_p = 1, .seed = 1,
				.stop_at_eos = 1, .eos_ids = ends, .n_eos = 1};
	gen_count = 0;
	cr_expect_eq(generate(&s, prompt, 2, &g, gen_emit, NULL), ST_OK);
	cr_expect_eq(gen_count, 0, "<eos> was emitted");
	/* any end token of the list stops it (Llama 3.1 Instruct lists three) */
	ends[0] = 257, ends[1] = 0, g.n_eos = 2;
	gen_count = 0;
	cr_expect_eq(generate(&s, prompt, 2, &g, gen_emit, NULL), ST_OK);
	cr_expect_eq(gen_count, 0, "the second end token was emitted");
	g.n_eos = 1;
	gen_count = 0;
	cr_expect_eq(generate(&s, prompt, 2, &g, gen_emit, NULL), ST_OK);
	cr_expect_eq(gen_count, 5);
	/* an emit that cannot write stops the loop (sample piped into head) */
	gen_count = 0;
	gen_stop_after = 2;
	cr_expect_eq(generate(&s, prompt, 2, &g, gen_emit, NULL), ST_OK);
	cr_expect_eq(gen_count, 2, "generation went on after emit asked to stop");
	gen_stop_after = 0;
	s.w[s.model.n_units - 1][3] = NAN; /* the head (or final norm): every score NaN */
	gen_count = 0;
	const int old = st_log_mute(1);
	cr_expect_eq(generate(&s, prompt, 2, &g, gen_emit, NULL), ST_FAIL);
	st_log_mute(old);
	cr_expect_eq(gen_count, 0, "a token was emitted from NaN scores");
	session_close(&s);
}

Test(generate, eos_not_emitted_nonfinite_refused)
{
	check_generate_stops(1); /* the decoder, as sample runs it */
	check_generate_stops(0); /* the windowed recompute */
}

/* The stable embedding (Dettmers et al. 2021, section 2.3): the config key
 * round-trips through config.json, the embedding is initialized
 * Xavier-uniform with a LayerNorm of gain 1 and bias 0 after it, and the
 * 8-bit optimizers keep fp32 state for the embedding while quantizing the
 * large matrices. */
Test(config, stable_embedding_round_trip_init_and_state)
{
	struct st_config cfg;
	cr_assert_eq(config_preset(&cfg, "tiny"), ST_OK);
	char path[] = "/tmp/strata-stable-XXXXXX";
	cr_assert(mkdtemp(path));
	char file[128];
	snprintf(file, sizeof file, "%s/config.json", path);
	for (int stable = 0; stable <= 1; stable++) {
		cfg.stable_embedding = stable;
		cr_assert_eq(config_save(&cfg, file), ST_OK);
		struct st_config back;
		cr_assert_eq(config_load(&back, file), ST_OK);
		cr_expect_eq(back.stable_embedding, stable, "stable_embedding %d did not round-trip", stable);
		/* with it, not a "llama" to transformers (which would drop the
		 * layer norm and load a different model without an error) */
		cJSON *j = tu_read_json(file);
		const cJSON *mt = cJSON_GetObjectItem(j, "model_type");
		const cJSON *arch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "architectures"), 0);
		cr_assert(cJSON_IsString(mt) && cJSON_IsString(arch));
		cr_expect_str_eq(mt->valuestring, stable ? "strata_llama" : "llama");
		cr_expect_str_eq(arch->valuestring, stable ? "StrataLlamaForCausalLM" : "LlamaForCausalLM");
		cJSON_Delete(j);
	}
	/* written before the model_type: "llama" with the key still loads */
	const char *body = "\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":128,"
			   "\"num_hidden_layers\":2,\"num_attention_heads\":4";
	const char *heads[] = {"\"model_type\":\"llama\",\"stable_embedding\":true",
			       /* the stable model_type without the key contradicts itself */
			       "\"model_type\":\"strata_llama\"",
			       "\"model_type\":\"strata_llama\",\"stable_embedding\":false"};
	for (int i = 0; i < 3; i++) {
		char text[512];
		snprintf(text, sizeof text, "{%s,%s}", heads[i], body);
		write_file(file, text);
		struct st_config back;
		cr_expect_eq(config_load(&back, file), i == 0 ? ST_OK : ST_FAIL, "%s", text);
		cr_expect(i > 0 || back.stable_embedding == 1);
	}
	/* a vocabulary far from the width, so that a bound with the wrong fans
	 * (3/vocab, 3/dim, 3/max) falls outside the checks below */
	cfg.vocab_size = 1024;
	struct st_model m;
	cr_assert_eq(model_build(&m, &cfg), ST_OK); /* cfg.stable_embedding == 1 */
	float *w = malloc(m.units[0].numel * sizeof *w);
	model_init_unit(&m, 0, w, 7);
	const struct st_param *emb = model_find_param(&m, "model.embed_tokens.weight");
	const struct st_param *g = model_find_param(&m, "model.embed_norm.weight");
	const struct st_param *b = model_find_param(&m, "model.embed_norm.bias");
	cr_assert(emb && g && b, "the stable embedding's parameters are missing");
	const double a = sqrt(6.0 / (cfg.vocab_size + cfg.dim));
	double sumsq = 0, maxabs = 0;
	for (size_t i = 0; i < emb->numel; i++) {
		double x = w[emb->offset + i];
		sumsq += x * x;
		maxabs = fabs(x) > maxabs ? fabs(x) : maxabs;
	}
	const double rms = sqrt(sumsq / (double)emb->numel);
	cr_expect_leq(maxabs, a, "a value outside +-sqrt(6/(vocab+dim)) = %g: %g", a, maxabs);
	/* of 262144 uniform draws the largest |x| falls short of a(1 - 1/2000)
	 * with probability e^-131: a range 0.1% too narrow fails */
	cr_expect_gt(maxabs, (1 - 1.0 / 2000) * a, "the values do not fill the Xavier range (max %.9g of %.9g)",
		     maxabs, a);
	/* uniform(-a, a) has rms a/sqrt(3); 262K samples: within 2% */
	cr_expect(fabs(rms / (a / sqrt(3.0)) - 1) < 0.02, "rms %g, uniform(-a,a) has %g", rms, a / sqrt(3.0));
	for (size_t i = 0; i < g->numel; i++) {
		cr_expect_eq(w[g->offset + i], 1.0f);
		cr_expect_eq(w[b->offset + i], 0.0f);
	}
	/* the layer norm's gain and bias are norm parameters: they decay with
	 * --decay-norms, not with --decay-embeddings */
	const struct st_optim_cfg embed_only = {.decay_embed = 1}, norms_only = {.decay_norms = 1};
	for (int k = 0; k < 2; k++) {
		const struct st_param *p = k ? b : g;
		cr_expect(p->role == ST_ROLE_NORM && !optim_param_decays(&embed_only, p) &&
				  optim_param_decays(&norms_only, p),
			  "%s: role %d, not a norm's", p->name, p->role);
	}
	struct st_optim opt;
	struct st_optim_cfg oc = {.kind = ST_OPT_ADAMW8, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
				  .quant_block = 256, .quant_min_numel = 4096};
	cr_assert_eq(optim_init(&opt, &oc, &m), ST_OK);
	const int i_emb = (int)(emb - m.params);
	const struct st_param *q = model_find_param(&m, "model.layers.0.self_attn.q_proj.weight");
	cr_expect_eq(opt.ps[i_emb].q8, 0, "the embedding's state is 8-bit");
	cr_expect_eq(opt.ps[q - m.params].q8, 1, "a large matrix's state is not 8-bit");
	optim_free(&opt);
	free(w);
	model_free(&m);
}

/* optim_step_param hands each kernel the arguments of its configuration:
 * checked against the kernels called directly with arguments written out
 * here (bias corrections 1 - beta^t of the fp32 betas, in double, the signed map for AdamW's m and SGD's
 * momentum, the unsigned one for v, weight decay only where the role decays,
 * grad_scale, SGD's first step only at t = 1), three updates each, bit for
 * bit. The kernel tests build their own arguments and the resume tests
 * compare two runs of the same code, so neither would see a wrong one here.
 * The fp32-state threshold is inclusive: a tensor of exactly
 * --quant-min-size elements is 8-bit. */
Test(optim, step_param_passes_the_kernels_their_arguments)
{
	struct st_config cfg;
	cr_assert_eq(config_preset(&cfg, "tiny"), ST_OK);
	struct st_model m;
	cr_assert_eq(model_build(&m, &cfg), ST_OK);
	const struct st_ops *ops = ops_cpu();
	const struct st_param *mat = model_find_param(&m, "model.layers.0.self_attn.q_proj.weight");
	const struct st_param *norm = model_find_param(&m, "model.layers.0.input_layernorm.weight");
	cr_assert(mat && norm);
	float map_s[256], map_u[256];
	quantmap_dynamic(map_s, 1);
	quantmap_dynamic(map_u, 0);
	const enum st_optim_kind kinds[] = {ST_OPT_ADAMW8, ST_OPT_SGD8};
	for (int k = 0; k < 2; k++) {
		struct st_optim_cfg oc = {.kind = kinds[k], .beta1 = 0.9f, .beta2 = 0.95f,
					  .eps = 1e-8f, .momentum = 0.8f, .weight_decay = 0.1f,
					  .quant_block = 256, .quant_min_numel = (long)mat->numel};
		struct st_optim o;
		cr_assert_eq(optim_init(&o, &oc, &m), ST_OK);
		const struct st_param *ps[2] = {mat, norm};
		for (int j = 0; j < 2; j++) {
			const struct st_param *p = ps[j];
			const int i = (int)(p - m.params);
			const struct st_pstate *st = &o.ps[i];
			cr_assert_eq(st->q8, j == 0, "%s: 8-bit %d (threshold = its numel, inclusive)",
				     p->name, st->q8);
			const size_t n = p->numel, nb = (n + 255) / 256;
			char *s = calloc(o.unit_bytes[p->unit] + 64, 1);
			/* SGD's first step must not read its state: garbage there
			 * (NaN absmax and moments, code 255) changes nothing */
			if (kinds[k] == ST_OPT_SGD8)
				memset(s, 0xff, o.unit_bytes[p->unit]);
			float *w = malloc(n * 4), *w_ref = malloc(n * 4), *g = malloc(n * 4);
			float *f0 = calloc(n, 4), *f1 = calloc(n, 4), *am0 = calloc(nb, 4),
			      *am1 = calloc(nb, 4);
			uint8_t *c0 = calloc(n, 1), *c1 = calloc(n, 1);
			for (size_t e = 0; e < n; e++)
				w[e] = w_ref[e] = 0.02f * sinf((float)e);
			const float wd = j == 0 ? 0.1f : 0.0f; /* norms do not decay by default */
			for (long t = 1; t <= 3; t++) {
				for (size_t e = 0; e < n; e++)
					g[e] = cosf((float)(e * (size_t)t)) * (e % 7 == 0 ? 3.0f : 0.5f);
				const float lr = 0.01f / (float)t, gs = 0.7f;
				optim_step_param(ops, &o, i, w, g, s, t, lr, gs);
				/* of the betas as configured: floats */
				const float bc1 = (float)(1.0 - pow((double)0.9f, (double)t));
				const float bc2 = (float)(1.0 - pow((double)0.95f, (double)t));
				if (kinds[k] == ST_OPT_ADAMW8 && j == 0) {
					struct st_adamw8_args a = {
						.lr = lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
						.weight_decay = wd, .grad_scale = gs, .bc1 = bc1,
						.bc2 = bc2, .block = 256, .map_m = map_s, .map_v = map_u};
					ops->adamw8_step(w_ref, c0, c1, am0, am1, g, n, &a);
				} else if (kinds[k] == ST_OPT_ADAMW8) {
					struct st_adamw_args a = {
						.lr = lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
						.weight_decay = wd, .grad_scale = gs, .bc1 = bc1,
						.bc2 = bc2};
					ops->adamw_step(w_ref, f0, f1, g, n, &a);
				} else if (j == 0) {
					struct st_sgd8_args a = {.lr = lr, .momentum = 0.8f,
								 .weight_decay = wd, .grad_scale = gs,
								 .first_step = t == 1, .block = 256,
								 .map = map_s};
					ops->sgd8_step(w_ref, c0, am0, g, n, &a);
				} else {
					struct st_sgd_args a = {.lr = lr, .momentum = 0.8f,
								.weight_decay = wd, .grad_scale = gs,
								.first_step = t == 1};
					ops->sgd_step(w_ref, f0, g, n, &a);
				}
				cr_assert(!memcmp(w, w_ref, n * 4), "%s %s t=%ld: weights differ",
					  optim_kind_name(kinds[k]), p->name, t);
				if (st->q8) {
					cr_assert(!memcmp(s + st->off[0], c0, n) &&
							  !memcmp(s + st->absmax_off[0], am0, nb * 4),
						  "%s t=%ld: first state differs", optim_kind_name(kinds[k]), t);
					cr_assert(st->n_states < 2 ||
							  (!memcmp(s + st->off[1], c1, n) &&
							   !memcmp(s + st->absmax_off[1], am1, nb * 4)),
						  "%s t=%ld: second state differs", optim_kind_name(kinds[k]), t);
				} else {
					cr_assert(!memcmp(s + st->off[0], f0, n * 4) &&
							  (st->n_states < 2 || !memcmp(s + st->off[1], f1, n * 4)),
						  "%s %s t=%ld: fp32 state differs", optim_kind_name(kinds[k]),
						  p->name, t);
				}
			}
			free(s), free(w), free(w_ref), free(g), free(f0), free(f1), free(am0), free(am1),
				free(c0), free(c1);
		}
		optim_free(&o);
	}
	model_free(&m);
}

/* Plain SGD (momentum 0) keeps no state at all, 8-bit or not; --quant-block
 * takes the powers of two from 16 to 65536 and nothing else. */
Test(optim, stateless_sgd_and_block_sizes)
{
	struct st_config cfg;
	cr_assert_eq(config_preset(&cfg, "tiny"), ST_OK);
	struct st_model m;
	cr_assert_eq(model_build(&m, &cfg), ST_OK);
	const enum st_optim_kind plain[] = {ST_OPT_SGD, ST_OPT_SGD8};
	for (int k = 0; k < 2; k++) {
		struct st_optim o;
		const struct st_optim_cfg oc = {.kind = plain[k], .quant_block = 256};
		cr_assert_eq(optim_init(&o, &oc, &m), ST_OK);
		cr_expect(o.total_bytes == 0, "%s with momentum 0: %zu state bytes",
			  optim_kind_name(plain[k]), o.total_bytes);
		optim_free(&o);
	}
	const int blocks[] = {16, 64, 65536, 0, 8, 15, 100, 131072, -256};
	for (int b = 0; b < 9; b++) {
		struct st_optim o;
		const struct st_optim_cfg oc = {.kind = ST_OPT_ADAMW8, .beta1 = 0.9f, .beta2 = 0.95f,
						.quant_block = blocks[b], .quant_min_numel = 4096};
		const int ok = optim_init(&o, &oc, &m) == ST_OK;
		cr_expect(ok == (b < 3), "--quant-block %d %s", blocks[b], ok ? "accepted" : "refused");
		if (ok)
			optim_free(&o);
	}
	model_free(&m);
}

/* The optimizer state layout: every tensor inside its unit's slab, none
 * overlapping; a unit's slab is its tensors' bytes
 * plus alignment padding only (< 64 per tensor); total_bytes is the sum of
 * the slabs; optim_param_state_bytes is the tensors' bytes, which for an
 * 8-bit AdamW parameter is 2 (numel + 4 ceil(numel / block)). */
Test(optim, state_layout_and_byte_accounting)
{
	struct st_config cfg;
	cr_assert_eq(config_preset(&cfg, "tiny"), ST_OK);
	cfg.stable_embedding = 1;
	struct st_model m;
	cr_assert_eq(model_build(&m, &cfg), ST_OK);
	const enum st_optim_kind kinds[] = {ST_OPT_ADAMW8, ST_OPT_SGD8, ST_OPT_ADAMW};
	for (int k = 0; k < 3; k++) {
		const struct st_optim_cfg oc = {.kind = kinds[k], .beta1 = 0.9f, .beta2 = 0.95f,
						.momentum = 0.9f, .quant_block = 256,
						.quant_min_numel = 4096};
		struct st_optim o;
		cr_assert_eq(optim_init(&o, &oc, &m), ST_OK);
		size_t total = 0;
		for (int u = 0; u < m.n_units; u++) {
			total += o.unit_bytes[u];
			size_t sum = 0, lo_prev = 0;
			int nt = 0;
			for (int i = m.units[u].first_param; i < m.units[u].first_param + m.units[u].n_params; i++) {
				struct st_state_tensor t[ST_STATE_TENSORS_MAX];
				const int n = optim_state_tensors(&o, i, t);
				size_t pb = 0;
				for (int j = 0; j < n; j++, nt++) {
					cr_expect(t[j].off >= lo_prev, "%s.%s overlaps the tensor before",
						  m.params[i].name, t[j].suffix);
					cr_expect(t[j].off + t[j].bytes <= o.unit_bytes[u], "%s.%s past its slab",
						  m.params[i].name, t[j].suffix);
					lo_prev = t[j].off + t[j].bytes;
					pb += t[j].bytes;
				}
				sum += pb;
				cr_expect_eq(optim_param_state_bytes(&o, i), pb, "%s: state bytes %zu, tensors %zu",
					     m.params[i].name, optim_param_state_bytes(&o, i), pb);
				if (kinds[k] == ST_OPT_ADAMW8 && o.ps[i].q8) {
					const size_t ne = m.params[i].numel, nb = (ne + 255) / 256;
					cr_expect_eq(pb, 2 * (ne + 4 * nb), "%s: %zu state bytes", m.params[i].name, pb);
				}
			}
			cr_expect(o.unit_bytes[u] >= sum && o.unit_bytes[u] < sum + 64 * (size_t)(nt + 1),
				  "%s unit %d: slab %zu bytes for %zu bytes of state in %d tensors",
				  optim_kind_name(kinds[k]), u, o.unit_bytes[u], sum, nt);
		}
		cr_expect_eq(o.total_bytes, total, "%s: total_bytes %zu, slabs %zu", optim_kind_name(kinds[k]),
			     o.total_bytes, total);
		optim_free(&o);
	}
	model_free(&m);
}

/* The state tensor with this suffix among a parameter's n. */
static const struct st_state_tensor *find_state(const struct st_state_tensor *t, int n, const char *sfx)
{
	for (int j = 0; j < n; j++)
		if (!strcmp(t[j].suffix, sfx))
			return &t[j];
	return NULL;
}

/* The state tensors carry PyTorch's names for what they hold.
 * After one step from zero state with gradient g (grad_scale 1, t = 1):
 * AdamW's exp_avg is (1 - beta1) g, exp_avg_sq (1 - beta2) g^2; SGD's
 * momentum_buffer is g. Checked through the names, dequantizing the 8-bit
 * ones. */
Test(optim, state_tensor_names_follow_their_content)
{
	struct st_config cfg;
	cr_assert_eq(config_preset(&cfg, "tiny"), ST_OK);
	struct st_model m;
	cr_assert_eq(model_build(&m, &cfg), ST_OK);
	const struct st_param *p = model_find_param(&m, "model.layers.0.self_attn.q_proj.weight");
	cr_assert(p);
	const int i = (int)(p - m.params);
	const size_t n = p->numel;
	const enum st_optim_kind kinds[] = {ST_OPT_ADAMW8, ST_OPT_ADAMW, ST_OPT_SGD8, ST_OPT_SGD};
	for (int k = 0; k < 4; k++) {
		const struct st_optim_cfg oc = {.kind = kinds[k], .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
						.momentum = 0.9f, .quant_block = 256, .quant_min_numel = 4096};
		struct st_optim o;
		cr_assert_eq(optim_init(&o, &oc, &m), ST_OK);
		char *s = calloc(o.unit_bytes[p->unit], 1);
		float *w = calloc(n, 4), *g = malloc(n * 4), *x = malloc(n * 4);
		for (size_t e = 0; e < n; e++)
			g[e] = 0.01f * sinf(0.37f * (float)e + 0.1f);
		optim_step_param(ops_cpu(), &o, i, w, g, s, 1, 1e-3f, 1.0f);
		struct st_state_tensor t[ST_STATE_TENSORS_MAX];
		const int nt = optim_state_tensors(&o, i, t);
		const int adam = kinds[k] == ST_OPT_ADAMW8 || kinds[k] == ST_OPT_ADAMW;
		const char *base[2] = {adam ? "exp_avg" : "momentum_buffer", "exp_avg_sq"};
		for (int st = 0; st < (adam ? 2 : 1); st++) {
			const int q8 = o.ps[i].q8;
			char sfx[40];
			snprintf(sfx, sizeof sfx, "%s%s", base[st], q8 ? ".codes" : "");
			const struct st_state_tensor *c = find_state(t, nt, sfx);
			cr_assert(c, "%s: no state tensor %s", optim_kind_name(kinds[k]), sfx);
			if (q8) {
				snprintf(sfx, sizeof sfx, "%s.absmax", base[st]);
				const struct st_state_tensor *a = find_state(t, nt, sfx);
				cr_assert(a, "%s: no state tensor %s", optim_kind_name(kinds[k]), sfx);
				dequant_blockwise(x, (const uint8_t *)(s + c->off), (const float *)(s + a->off), n, 256,
						  st == 1 ? o.map_unsigned : o.map_signed);
			} else
				memcpy(x, s + c->off, n * 4);
			double err = 0, mx = 0;
			for (size_t e = 0; e < n; e++) {
				const double want = !adam ? g[e] : st == 0 ? 0.1 * g[e] : 0.05 * (double)g[e] * g[e];
				err = fmax(err, fabs(x[e] - want));
				mx = fmax(mx, fabs(want));
			}
			cr_expect(err <= 0.02 * mx, "%s: the tensor named %s does not hold its moment (max error %g of %g)",
				  optim_kind_name(kinds[k]), base[st], err, mx);
		}
		free(s), free(w), free(g), free(x);
		optim_free(&o);
	}
	model_free(&m);
}

/* Every --optimizer name parses to the kind of that name, and the
 * 8-bit ones are 8-bit. */
Test(optim, optimizer_names_parse_to_their_kinds)
{
	const char *names[] = {"adamw", "sgd", "adamw8bit", "sgd8bit", "galore-adamw", "galore-adamw8bit"};
	for (int i = 0; i < 6; i++) {
		enum st_optim_kind k;
		cr_assert_eq(optim_parse_kind(&k, names[i]), ST_OK, "%s", names[i]);
		cr_expect_str_eq(optim_kind_name(k), names[i]);
		cr_expect_eq(optim_kind_is_8bit(k), strstr(names[i], "8bit") != NULL, "%s", names[i]);
	}
	enum st_optim_kind k;
	cr_expect_eq(optim_parse_kind(&k, "adamw8"), ST_FAIL);
}

/* The 8-bit options: bitsandbytes' defaults (block 256, fp32 state under
 * 4096 elements), and the bounds train_opts_validate enforces, each next to
 * a value it accepts. */
Test(trainer, eight_bit_options_validated)
{
	struct st_train_opts o;
	train_opts_defaults(&o);
	cr_expect_eq(o.quant_block, 256, "default --quant-block (bitsandbytes: 256)");
	cr_expect_eq(o.quant_min_size, 4096, "default --quant-min-size (bitsandbytes: 4096)");
	cr_assert_eq(train_opts_set(&o, "steps", "1"), ST_OK);
	cr_assert_eq(train_opts_validate(&o), ST_OK);
	const struct {
		const char *key, *val;
		int ok;
	} cases[] = {
		{"optimizer", "sgd8bit", 0},     /* momentum 0: no state to quantize */
		{"momentum", "0.9", 1},
		{"momentum", "1", 0},
		{"momentum", "0.9", 1},
		{"quant-min-size", "-1", 0},
		{"quant-min-size", "0", 1},
		{"max-skipped-steps", "-1", 0},
		{"max-skipped-steps", "0", 1},
		/* --quant-block checked whatever the optimizer, so a typo fails at once */
		{"optimizer", "adamw", 1},
		{"quant-block", "100", 0},
		{"quant-block", "8", 0},
		{"quant-block", "131072", 0},
		{"quant-block", "16", 1},
		{"quant-block", "65536", 1},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		cr_assert_eq(train_opts_set(&o, cases[i].key, cases[i].val), ST_OK);
		cr_expect_eq(train_opts_validate(&o) == ST_OK, cases[i].ok, "--%s %s %s", cases[i].key,
			     cases[i].val, cases[i].ok ? "refused" : "accepted");
	}
	/* a number a double cannot hold is out of range, not "not a number" */
	cr_expect_eq(train_opts_set(&o, "lr", "1e400"), ST_FAIL);
	cr_expect_eq(train_opts_set(&o, "lr", "1e-400"), ST_FAIL);
	/* which options a bare --flag cannot set */
	cr_expect(train_opts_needs_value("momentum") && train_opts_needs_value("quant-block") &&
		  train_opts_needs_value("optimizer"));
	cr_expect(!train_opts_needs_value("galore-per-layer") && !train_opts_needs_value("no-such"),
		  "a boolean, or an unknown option (train_opts_set names it), needs no value");
}

/* GaLore's per-layer updates keep no full-model gradient buffer: every layer
 * unit shares one gradient slab (the largest layer's), so the gradient bytes
 * are the embed's, the head's and one layer's. */
Test(store, per_layer_gradients_share_one_slab)
{
	struct st_config cfg;
	cr_assert_eq(config_preset(&cfg, "tiny"), ST_OK);
	struct st_session s;
	cr_assert_eq(session_create(&s, ops_cpu(), &cfg, ST_GRADS_SHARED_LAYERS), ST_OK);
	const struct st_model *m = &s.model;
	size_t g_bytes = 0, layer_max = 0, all = 0;
	int first = -1;
	for (int u = 0; u < m->n_units; u++) {
		const struct st_slab *sl = store_slab(&s.store, u, ST_SLAB_G);
		all += m->units[u].numel * sizeof(float);
		if (m->units[u].kind == ST_UNIT_LAYER) {
			layer_max = m->units[u].numel * sizeof(float) > layer_max ? m->units[u].numel * sizeof(float)
										   : layer_max;
			if (first < 0)
				first = u;
			else
				cr_expect_eq(sl->shared_from, first, "layer unit %d has its own gradient slab", u);
			cr_expect_eq(store_acquire(&s.store, u, ST_SLAB_G), store_acquire(&s.store, first, ST_SLAB_G));
		}
		if (sl->shared_from < 0)
			g_bytes += sl->bytes;
	}
	const size_t want = (m->units[0].numel + m->units[m->n_units - 1].numel) * sizeof(float) + layer_max;
	cr_expect_eq(g_bytes, want, "gradient bytes %zu, want %zu (full model: %zu)", g_bytes, want, all);
	cr_expect_lt(g_bytes, all / 2);
	session_close(&s);
}

/* st_first_nonfinite, which keeps inf and NaN out of checkpoints and runs:
 * the first bad index wherever it sits (first or last element, the second
 * 4096-value chunk, a partial last chunk), and the largest finite floats
 * are not bad. */
Test(util, first_nonfinite)
{
	const size_t sizes[] = {1, 5, 4096, 4097, 10000};
	float *x = malloc(10000 * sizeof *x);
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		const size_t n = sizes[k];
		for (size_t i = 0; i < n; i++)
			x[i] = (float)i - 2000.0f;
		x[0] = FLT_MAX;
		x[n - 1] = -FLT_MAX;
		cr_expect_eq(st_first_nonfinite(x, n), -1, "n %zu: FLT_MAX is finite", n);
		const size_t at[] = {0, n / 2, n - 1};
		const float bad[] = {NAN, INFINITY, -INFINITY};
		for (int a = 0; a < 3; a++)
			for (int b = 0; b < 3; b++) {
				const float keep = x[at[a]];
				x[at[a]] = bad[b];
				cr_expect_eq(st_first_nonfinite(x, n), (long)at[a], "n %zu: %g at %zu", n,
					     (double)bad[b], at[a]);
				x[at[a]] = keep;
			}
	}
	/* two bad values: the first is reported */
	x[7000] = NAN;
	x[5000] = INFINITY;
	cr_expect_eq(st_first_nonfinite(x, 10000), 5000);
	cr_expect_eq(st_first_nonfinite(x, 0), -1);
	free(x);
}
