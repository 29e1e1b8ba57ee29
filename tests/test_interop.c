/* Interop with llama.cpp's GGUF files: import every supported tensor type
 * against the reference the `gguf` package writes (scripts/ggufref.py into
 * tests/data/gguf: its own dequantization, un-permuted, under Hugging Face
 * names), the tokenizer rebuilt from tokenizer.ggml.* against the Hugging
 * Face tokenizers library's ids, an imported model fine-tuned through the
 * binary, and damaged files refused with clear errors. */
#define _GNU_SOURCE /* memmem */
#include <cJSON.h>
#include <math.h>
#include <unistd.h>

#include "cliutil.h"
#include "jsonutil.h"
#include "io/fsutil.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "model/hf.h"
#include "util/check.h"

static char out[1 << 16];

static void import_to(char *dir, size_t n, const char *type)
{
	cu_tmpdir(dir, n, "gguf");
	char gguf[256];
	snprintf(gguf, sizeof gguf, "tests/data/gguf/model-%s.gguf", type);
	int rc = cu_run(out, sizeof out, "%s import --gguf %s --out %s/m --force", cu_bin(), gguf, dir);
	cr_assert_eq(rc, 0, "import of %s failed: %s", type, out);
	strcat(dir, "/m");
}

/* strata eval's mean loss of model on one window of seq_len from a shard. */
static double eval_loss(const char *model, const char *shard, int seq_len)
{
	int rc = cu_run(out, sizeof out, "%s eval --model %s --data %s --seq-len %d --micro-batch 1 --json",
			cu_bin(), model, shard, seq_len);
	cr_assert_eq(rc, 0, "eval of %s failed: %s", model, out);
	const char *p = strstr(out, "\"loss\": ");
	cr_assert(p, "no loss from eval of %s: %s", model, out);
	return atof(p + 8);
}

/* Every tensor of the imported model equals the reference, bit for bit. */
static void check_type(const char *type)
{
	char dir[300], ref[256];
	import_to(dir, sizeof dir, type);
	struct st_weight_files wf;
	cr_assert_eq(weights_open(&wf, dir), ST_OK);
	snprintf(ref, sizeof ref, "tests/data/gguf/expected-%s.safetensors", type);
	struct st_safetensors sf;
	cr_assert_eq(safetensors_open(&sf, ref), ST_OK);
	cr_assert_eq(wf.sf[0].n, sf.n, "%s: %d tensors, want %d", type, wf.sf[0].n, sf.n);
	for (int i = 0; i < sf.n; i++) {
		const struct st_tensor_info *want = &sf.tensors[i];
		const struct st_tensor_info *got = safetensors_find(&wf.sf[0], want->name);
		cr_assert(got, "%s: %s missing", type, want->name);
		size_t n = (size_t)tensor_numel(want);
		cr_assert_eq((size_t)tensor_numel(got), n, "%s: %s has another size", type, want->name);
		float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
		cr_assert_eq(safetensors_read_f32(&wf.sf[0], got, a), ST_OK);
		cr_assert_eq(safetensors_read_f32(&sf, want, b), ST_OK);
		cr_expect_eq(memcmp(a, b, n * sizeof *a), 0, "%s: %s differs from the reference", type,
			     want->name);
		free(a);
		free(b);
	}
	safetensors_close(&sf);
	weights_close(&wf);
}

Test(gguf, import_f32) { check_type("F32"); }
Test(gguf, import_f16) { check_type("F16"); }
Test(gguf, import_bf16) { check_type("BF16"); }
Test(gguf, import_q8_0) { check_type("Q8_0"); }
Test(gguf, import_q4_0) { check_type("Q4_0"); }
Test(gguf, import_q4_1) { check_type("Q4_1"); }
Test(gguf, import_q5_0) { check_type("Q5_0"); }
Test(gguf, import_q5_1) { check_type("Q5_1"); }
/* A file laid out like llama-quantize's Q4_K_M / Q5_K_M: ffn_down (rows of
 * 256) in Q6_K, Q4_K and Q5_K, the other matrices (rows of 32) in its
 * fallbacks Q5_0, Q5_1 and Q8_0. */
Test(gguf, import_k_quants) { check_type("Kmix"); }

/* Every quantized type read through the C API against the gguf package's
 * dequantization of random block bytes (blocks.gguf: one tensor per type, 3
 * rows of 512, finite normal fp16 scales; scripts/ggufref.py): bit for bit.
 * Random bytes reach what a quantizer seldom writes: negative scales and
 * every pattern of quants, packed scales and high bits. */
Test(gguf, dequantize_random_blocks)
{
	struct st_gguf g;
	cr_assert_eq(gguf_open(&g, "tests/data/gguf/blocks.gguf"), ST_OK);
	struct st_safetensors sf;
	cr_assert_eq(safetensors_open(&sf, "tests/data/gguf/expected-blocks.safetensors"), ST_OK);
	const char *types[] = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"};
	for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
		const struct st_gguf_tensor *t = gguf_tensor(&g, types[k]);
		const struct st_tensor_info *want = safetensors_find(&sf, types[k]);
		cr_assert(t && want, "%s missing", types[k]);
		cr_assert_str_eq(ggml_type_name(t->type), types[k]);
		cr_assert(t->ne[0] == 512 && t->ne[1] == 3 && tensor_numel(want) == 1536);
		float *a = malloc(1536 * sizeof *a), *b = malloc(1536 * sizeof *b);
		cr_assert_eq(gguf_read_f32(&g, t, a), ST_OK);
		cr_assert_eq(safetensors_read_f32(&sf, want, b), ST_OK);
		int i = 0;
		while (i < 1536 && !memcmp(&a[i], &b[i], sizeof *a))
			i++;
		cr_expect_eq(i, 1536, "%s: value %d is %.9g, the gguf package's %.9g", types[k], i,
			     (double)a[i < 1536 ? i : 0], (double)b[i < 1536 ? i : 0]);
		free(a);
		free(b);
	}
	safetensors_close(&sf);
	gguf_close(&g);
}

/* tokenizer.ggml.add_bos_token true: the tokenizer.json has Llama 3's
 * TemplateProcessing post-processor putting <bos> before every encoding (as
 * llama.cpp does; transformers encoded without it), false: none, absent:
 * llama.cpp's default for the file's pre-tokenizer (llama-bpe here: true);
 * strata's own loader reads the file either way (prepare). */
Test(gguf, add_bos_token_post_processor)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "ggufbos");
	for (int v = 0; v <= 2; v++) { /* 2: no key, and llama-bpe's default (true) */
		int rc = cu_run(out, sizeof out,
				"{ python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/b%d.gguf set "
				"tokenizer.ggml.add_bos_token 7 %d && if [ %d = 2 ]; then cp "
				"tests/data/gguf/model-F32.gguf %s/b%d.gguf; fi && %s import --gguf %s/b%d.gguf --out %s/m%d && "
				"python3 -c \"import json, sys; t = json.load(open(sys.argv[1])); p = t['post_processor']; "
				"bos = [a['content'] for a in t['added_tokens'] if a['id'] == %d][0]; "
				"print('none' if p is None else '%%s %%s %%s %%s' %% (p['type'], "
				"p['single'][0]['SpecialToken']['id'] == bos, p['special_tokens'][bos]['ids'], "
				"p['single'][1]['Sequence']['id']))\" %s/m%d/tokenizer.json && "
				"echo 'hello there' > %s/h.txt && %s prepare --input %s/h.txt --tokenizer %s/m%d "
				"--out %s/d%d --val-fraction 0; }",
				dir, v, v & 1, v, dir, v, cu_bin(), dir, v, dir, v, 0, dir, v, dir, cu_bin(), dir, dir, v,
				dir, v);
		cr_expect_eq(rc, 0, "%s", out);
		cr_expect(strstr(out, v ? "TemplateProcessing True [0] A" : "none\n"), "add_bos_token %d: %s",
			  v, out);
	}
	/* add_eos_token true puts <eos> after each sequence, as llama.cpp
	 * does (it was ignored): <bos> A <eos>, with add_bos_token false A
	 * <eos>; the pair repeats it for B */
	for (int b = 0; b <= 1; b++) {
		int rc = cu_run(out, sizeof out,
				"{ python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/e%d0.gguf set "
				"tokenizer.ggml.add_bos_token 7 %d && python3 tests/gguf_edit.py %s/e%d0.gguf "
				"%s/e%d.gguf set tokenizer.ggml.add_eos_token 7 1 && %s import --gguf %s/e%d.gguf "
				"--out %s/me%d && python3 -c \"import json, sys; t = json.load(open(sys.argv[1])); "
				"p = t['post_processor']; name = lambda e: next(iter(e.values()))['id']; "
				"print(' '.join(map(name, p['single'])), '|', ' '.join(map(name, p['pair'])), '|', "
				"sorted((k, v['ids']) for k, v in p['special_tokens'].items()))\" "
				"%s/me%d/tokenizer.json; }",
				dir, b, b, dir, b, dir, b, cu_bin(), dir, b, dir, b, dir, b);
		cr_expect(rc == 0 && strstr(out, b ? "<|begin_of_text|> A <|end_of_text|> | <|begin_of_text|> A "
						     "<|end_of_text|> <|begin_of_text|> B <|end_of_text|> | "
						     "[('<|begin_of_text|>', [0]), ('<|end_of_text|>', [1])]"
						   : "A <|end_of_text|> | A <|end_of_text|> B <|end_of_text|> | "
						     "[('<|end_of_text|>', [1])]"),
			  "add_bos_token %d, add_eos_token 1: %s", b, out);
	}
	/* either flag of another type is refused, as llama.cpp refuses it */
	int rc = cu_run(out, sizeof out,
			"python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/x.gguf set "
			"tokenizer.ggml.add_eos_token 4 1 && %s import --gguf %s/x.gguf --out %s/mx",
			dir, cu_bin(), dir, dir);
	cr_expect(rc != 0 && strstr(out, "tokenizer.ggml.add_eos_token is not a bool"), "%s", out);
}

/* tokenizer.chat_template is carried into tokenizer_config.json as
 * chat_template (transformers' apply_chat_template refused the import: the
 * template was dropped); a file without one writes none. */
Test(gguf, chat_template_carried)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "ggufchat");
	int rc = cu_run(out, sizeof out,
			"{ python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/c.gguf set "
			"tokenizer.chat_template 8 '{%% for m in messages %%}<|user|>{{ m.content }}{%% endfor %%}' && "
			"%s import --gguf %s/c.gguf --out %s/mc && %s import --gguf "
			"tests/data/gguf/model-F32.gguf --out %s/mp && python3 -c \"import json, sys; "
			"a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2])); "
			"print(repr(a['chat_template']), 'chat_template' in b)\" %s/mc/tokenizer_config.json "
			"%s/mp/tokenizer_config.json; }",
			dir, cu_bin(), dir, dir, cu_bin(), dir, dir, dir);
	cr_expect(rc == 0 && strstr(out, "'{% for m in messages %}<|user|>{{ m.content }}{% endfor %}' "
					 "False"),
		  "%s", out);
	/* a template that is not UTF-8 (a Latin-1 byte) is said and left out:
	 * it made a tokenizer_config.json transformers could not read */
	rc = cu_run(out, sizeof out,
		    "{ python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/l.gguf set "
		    "tokenizer.chat_template 8 \"$(printf 'caf\\351 {{ x }}')\" && "
		    "%s import --gguf %s/l.gguf --out %s/ml && python3 -c \"import json, sys; "
		    "print('chat_template' in json.load(open(sys.argv[1], encoding='utf-8')))\" "
		    "%s/ml/tokenizer_config.json; }",
		    dir, cu_bin(), dir, dir, dir);
	cr_expect(rc == 0 && strstr(out, "tokenizer.chat_template is not UTF-8 text (byte 0xe9 at 3): "
					 "not carried into tokenizer_config.json") &&
			  strstr(out, "False"),
		  "%s", out);
}

/* The end tokens llama.cpp stops a generation at go into
 * generation_config.json's eos_token_id, after <eos>, for transformers'
 * generate and strata sample (both ran on past them): an EOT or EOM id the
 * file names (a control token; an ordinary one warned and left out), or
 * without one a control token spelled as llama.cpp's EOT texts; a file
 * with <eos> alone writes none. */
Test(gguf, end_tokens_carried)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "ggufend");
	const char *show = "python3 -c \"import json, sys; print(json.load(open(sys.argv[1]))"
			   "['eos_token_id'])\"";
	int rc = cu_run(out, sizeof out,
			"{ python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/e.gguf set "
			"tokenizer.ggml.eot_token_id 4 0 && %s import --gguf %s/e.gguf --out %s/me && "
			"%s %s/me/generation_config.json; }",
			dir, cu_bin(), dir, dir, show, dir);
	cr_expect(rc == 0 && strstr(out, "[1, 0]"), "%s", out);
	rc = cu_run(out, sizeof out,
		    "{ python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/o.gguf set "
		    "tokenizer.ggml.eom_token_id 4 100 && %s import --gguf %s/o.gguf --out %s/mo && "
		    "test ! -e %s/mo/generation_config.json; }",
		    dir, cu_bin(), dir, dir, dir);
	cr_expect(rc == 0 && strstr(out, "tokenizer.ggml.eom_token_id is not the id of a control "
					 "token: left out"),
		  "%s", out);
	/* no EOT named: a control token spelled <|eot_id|> (token 0 renamed
	 * here) is taken for one, as llama.cpp takes it */
	rc = cu_run(out, sizeof out,
		    "{ python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/t.gguf rename-token 0 "
		    "'<|eot_id|>' && %s import --gguf %s/t.gguf --out %s/mt && %s "
		    "%s/mt/generation_config.json; }",
		    dir, cu_bin(), dir, dir, show, dir);
	cr_expect(rc == 0 && strstr(out, "[1, 0]"), "%s", out);
	/* <eos> alone: none written */
	rc = cu_run(out, sizeof out, "{ %s import --gguf tests/data/gguf/model-F32.gguf --out %s/mp && "
				     "test ! -e %s/mp/generation_config.json; }",
		    cu_bin(), dir, dir);
	cr_expect_eq(rc, 0, "%s", out);
}

/* Files named for what they are: one part of a split model (the usual
 * download of a large one: its first part was "missing a tensor", its
 * second "unsupported architecture 'missing'"), a big-endian file (it was
 * "GGUF version 50331648"), and an add_bos_token that is no bool (read as
 * false, without a word; llama.cpp refuses it). */
Test(gguf, split_big_endian_and_mistyped_files_named)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "ggufnamed");
	int rc = cu_run(out, sizeof out,
			"{ python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/a.gguf set "
			"split.count 2 3 && python3 tests/gguf_edit.py %s/a.gguf %s/s.gguf set split.no 2 1 "
			"&& %s import --gguf %s/s.gguf --out %s/ms; }",
			dir, dir, dir, cu_bin(), dir, dir);
	cr_expect(rc != 0 && strstr(out, "/s.gguf is part 2 of 3 of a split model") &&
			  strstr(out, "llama-gguf-split --merge"),
		  "%s", out);
	rc = cu_run(out, sizeof out,
		    "{ python3 -c \"import sys; b = bytearray(open(sys.argv[1], 'rb').read()); "
		    "b[4:8] = b[4:8][::-1]; open(sys.argv[2], 'wb').write(b)\" "
		    "tests/data/gguf/model-F32.gguf %s/be.gguf && %s import --gguf %s/be.gguf --out %s/mb; }",
		    dir, cu_bin(), dir, dir);
	cr_expect(rc != 0 && strstr(out, "/be.gguf is a big-endian GGUF file (version 3"), "%s", out);
	rc = cu_run(out, sizeof out,
		    "{ python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/u.gguf set "
		    "tokenizer.ggml.add_bos_token 0 1 && %s import --gguf %s/u.gguf --out %s/mu; }",
		    dir, cu_bin(), dir, dir);
	cr_expect(rc != 0 && strstr(out, "tokenizer.ggml.add_bos_token is not a bool") &&
			  cu_run(NULL, 0, "test ! -e %s/mu/config.json", dir) == 0,
		  "%s", out);
}

/* A copy of blocks.gguf with one field of tensor `name`'s info replaced:
 * its first dimension (rows) or its ggml type. */
static void blocks_patch(const char *dst, const char *name, int field_is_type, uint64_t value)
{
	size_t n;
	char *d = NULL;
	cr_assert_eq(fs_read_file("tests/data/gguf/blocks.gguf", &d, &n), ST_OK);
	char key[64];
	const uint64_t len = strlen(name);
	memcpy(key, &len, 8);
	memcpy(key + 8, name, len);
	char *info = memmem(d, n, key, 8 + len); /* name, u32 n_dims, u64 ne[2], u32 type */
	cr_assert(info, "no tensor %s", name);
	char *at = info + 8 + len + 4 + (field_is_type ? 16 : 0);
	memcpy(at, &value, field_is_type ? 4 : 8);
	cr_assert_eq(fs_write_file_atomic(dst, d, n), ST_OK);
	free(d);
}

/* A type strata does not read is named, with the ones it does; a
 * quantized row that is not whole blocks (256 for the K-quants) is damage. */
Test(gguf, unreadable_types_and_partial_blocks)
{
	char dir[256], path[512];
	cu_tmpdir(dir, sizeof dir, "ggufblocks");
	snprintf(path, sizeof path, "%s/x.gguf", dir);
	const struct {
		const char *tensor;
		int is_type;
		uint64_t value;
		const char *needle;
	} cases[] = {
		{"Q4_K", 1, 10, "tensor 'Q4_K' has ggml type 10 (Q2_K); strata reads F32, F16, BF16, "
				"Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K"},
		{"Q4_K", 1, 23, "has ggml type 23 (IQ4_XS)"},
		{"Q4_K", 1, 99, "has ggml type 99 (unknown)"},
		{"Q4_K", 0, 480, "Q4_K tensor 'Q4_K' has rows of 480 (not whole blocks of 256)"},
		{"Q6_K", 0, 128, "Q6_K tensor 'Q6_K' has rows of 128 (not whole blocks of 256)"},
		{"Q5_1", 0, 48, "Q5_1 tensor 'Q5_1' has rows of 48 (not whole blocks of 32)"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		blocks_patch(path, cases[i].tensor, cases[i].is_type, cases[i].value);
		int rc = cu_run(out, sizeof out, "%s import --gguf %s --out %s/o", cu_bin(), path, dir);
		cr_expect(rc != 0 && strstr(out, cases[i].needle), "case %zu: %s", i, out);
	}
}

/* The tokenizer of model directory dir (vocab tokens) gives the ids of
 * reference file ref (n_texts texts). */
static void check_ids(const char *dir, int vocab, const char *ref, int n_texts)
{
	struct st_tokenizer tk;
	cr_assert_eq(tokenizer_load(&tk, dir), ST_OK);
	cr_expect_eq(tk.vocab_size, vocab);
	cJSON *root = tu_read_json(ref);
	const cJSON *s;
	int n_s = 0;
	cJSON_ArrayForEach(s, root)
	{
		const char *t = cJSON_GetObjectItem(s, "text")->valuestring;
		const cJSON *want = cJSON_GetObjectItem(s, "ids");
		uint32_t ids[1024];
		size_t n = tokenizer_encode(&tk, ids, t, strlen(t));
		int same = n == (size_t)cJSON_GetArraySize(want);
		for (size_t i = 0; same && i < n; i++)
			same = ids[i] == (uint32_t)cJSON_GetArrayItem(want, (int)i)->valuedouble;
		cr_expect(same, "%s: ids differ for \"%s\"", ref, t);
		n_s++;
	}
	cr_expect_eq(n_s, n_texts);
	cJSON_Delete(root);
	tokenizer_free(&tk);
}

/* The tokenizer rebuilt from tokenizer.ggml.* gives the library's ids. */
Test(gguf, tokenizer_from_metadata)
{
	char dir[300];
	import_to(dir, sizeof dir, "Q8_0");
	check_ids(dir, 320, "tests/data/gguf/tokens.json", 3);
}

/* tokenizer.ggml.pre = smollm is llama.cpp's digits-one-by-one split before
 * GPT-2's regex, SmolLM's own pre-tokenizer: the ids of model-smollm.gguf's
 * tokenizer are the library's for it (tokens-smollm.json). The tokenizer
 * merges digits, so its last text gets other ids under GPT-2's regex alone
 * and under the llama-bpe pre-tokenizer (checked by scripts/ggufref.py).
 * Another pre-tokenizer (tekken,
 * qwen2), llama.cpp's default (the key missing, or "default") and "gpt2"
 * (no name of llama.cpp's, which runs it as default) import the weights and
 * config, with no tokenizer.json and a warning saying where one must come
 * from: import used to refuse the first two, and gave the last ones GPT-2's
 * regex, which llama.cpp does not split with. */
Test(gguf, pre_tokenizers)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "ggufpre");
	int rc = cu_run(out, sizeof out,
			"%s import --gguf tests/data/gguf/model-smollm.gguf --out %s/smol", cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(!strstr(out, "warning"), "%s", out);
	char path[512];
	snprintf(path, sizeof path, "%s/smol", dir);
	check_ids(path, 323, "tests/data/gguf/tokens-smollm.json", 4);
	rc = cu_run(out, sizeof out, "%s import --gguf tests/data/gguf/model-F32.gguf --out %s/plain",
		    cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	const struct {
		const char *make, *needle;
	} cases[] = {
		{"python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/x.gguf set tokenizer.ggml.pre 8 "
		 "tekken",
		 "pre-tokenizer 'tekken' is not one strata rebuilds (it rebuilds llama-bpe, gpt-2 and smollm)"},
		{"python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/x.gguf set tokenizer.ggml.pre 8 "
		 "qwen2",
		 "pre-tokenizer 'qwen2' is not one strata rebuilds"},
		{"python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/x.gguf set tokenizer.ggml.pre 8 "
		 "default",
		 "pre-tokenizer 'default' (llama.cpp's own, splitting punctuation runs first) is not one"},
		{"python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/x.gguf set tokenizer.ggml.pre 8 "
		 "gpt2",
		 "pre-tokenizer 'gpt2' is not one strata rebuilds"},
		/* the key renamed (same length: the file's layout stays) */
		{"sed 's/tokenizer.ggml.pre/tokenizer.ggml.prX/' tests/data/gguf/model-F32.gguf > %s/x.gguf",
		 "no tokenizer.ggml.pre (llama.cpp then splits text with its 'default' pre-tokenizer"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char make[512];
		snprintf(make, sizeof make, cases[i].make, dir);
		rc = cu_run(out, sizeof out, "%s && %s import --gguf %s/x.gguf --out %s/o%zu", make,
			    cu_bin(), dir, dir, i);
		cr_expect_eq(rc, 0, "case %zu refused: %s", i, out);
		cr_expect(strstr(out, cases[i].needle), "case %zu: %s", i, out);
		cr_expect(strstr(out, "no tokenizer.json written; copy the original model's "
				      "tokenizer.json (and tokenizer_config.json) into the output directory"),
			  "case %zu: %s", i, out);
		rc = cu_run(out, sizeof out,
			    "test -s %s/o%zu/config.json && cmp %s/o%zu/model.safetensors "
			    "%s/plain/model.safetensors && test ! -e %s/o%zu/tokenizer.json && "
			    "test ! -e %s/o%zu/tokenizer_config.json",
			    dir, i, dir, i, dir, dir, i, dir, i);
		cr_expect_eq(rc, 0, "case %zu: not the model's weights and config alone", i);
	}
}

/* A tokenizer the import cannot rebuild (not byte-level BPE) writes no
 * tokenizer.json; one left from an earlier model in the directory is named
 * in a warning, since prepare and sample would read it, and so are that
 * model's other tokenizer files (transformers reads them). A byte-level one
 * also gets a tokenizer_config.json naming its <bos> and <eos> (from
 * tokenizer.json alone transformers has none: generate never ends). */
Test(gguf, other_tokenizer_over_an_earlier_one)
{
	char dir[300];
	import_to(dir, sizeof dir, "F32");
	char path[400];
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	cJSON *tc = tu_read_json(path);
	cr_assert(tc, "no tokenizer_config.json written");
	cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(tc, "bos_token")), "<|begin_of_text|>");
	cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(tc, "eos_token")), "<|end_of_text|>");
	cr_expect_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(tc, "tokenizer_class")),
			 "PreTrainedTokenizerFast");
	cJSON_Delete(tc);
	int rc = cu_run(out, sizeof out, "echo '{}' > %s/generation_config.json && "
			"echo '{{ x }}' > %s/chat_template.jinja && "
			"sed 's/gpt2/spmx/' tests/data/gguf/model-F32.gguf > %s/x.gguf && "
			"%s import --gguf %s/x.gguf --out %s --force", dir, dir, dir, cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "tokenizer 'spmx' is not byte-level BPE: no tokenizer.json written"), "%s", out);
	cr_expect(strstr(out, "/m/tokenizer.json was there before this import and is kept"), "%s", out);
	cr_expect(strstr(out, "/m/tokenizer_config.json was there before this import and is kept: "
			      "remove it if it is not this model's (transformers would read it)"),
		  "%s", out);
	cr_expect(strstr(out, "/m/generation_config.json was there before"), "%s", out);
	/* transformers 5 reads a chat_template.jinja before tokenizer_config.json's */
	cr_expect(strstr(out, "/m/chat_template.jinja was there before"), "%s", out);
	rc = cu_run(out, sizeof out, "rm %s/tokenizer.json %s/tokenizer_config.json "
			"%s/generation_config.json %s/chat_template.jinja && %s import --gguf %s/x.gguf "
			"--out %s --force",
		    dir, dir, dir, dir, cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(!strstr(out, "was there before"), "%s", out);
}

/* An imported model, its tokenizer, and the trainer: prepare, fine-tune,
 * evaluate and sample. */
Test(gguf, imported_model_fine_tunes, .timeout = 300)
{
	char dir[300];
	import_to(dir, sizeof dir, "Q4_0");
	char work[256];
	cu_tmpdir(work, sizeof work, "gguftrain");
	char path[512];
	snprintf(path, sizeof path, "%s/text.txt", work);
	cu_write_text(path, 100000, 5);
	int rc = cu_run(out, sizeof out,
			"%s prepare --input %s --out %s/data --tokenizer %s && "
			"%s train --model %s --data %s/data --out %s/run --steps 6 --micro-batch 4 --seq-len 32 "
			"--lr 3e-3 --eval-interval 6 --eval-tokens 1024 --progress lines && "
			"%s sample --model %s/run --prompt 'the lord' --tokens 8",
			cu_bin(), path, work, dir, cu_bin(), dir, work, work, cu_bin(), work);
	cr_assert_eq(rc, 0, "fine-tuning the imported model failed: %s", out);
	cr_expect(strstr(out, "the lord"), "no sample: %s", out);
	/* the checkpoint is a complete model directory: its tokenizer came along */
	snprintf(path, sizeof path, "%s/run/latest/tokenizer.json", work);
	cr_expect(fs_exists(path), "the checkpoint has no tokenizer.json");
	/* the held-out loss fell from step 0 to step 6 */
	rc = cu_run(out, sizeof out, "grep val_loss %s/run/metrics.jsonl", work);
	double first = 0, last = 0;
	const char *p = strstr(out, "\"val_loss\": ");
	cr_assert(p, "no evaluations: %s", out);
	first = atof(p + 12);
	for (const char *q = p; (q = strstr(q + 1, "\"val_loss\": "));)
		last = atof(q + 12);
	cr_expect_lt(last, first, "held-out loss did not fall: %g -> %g", first, last);
}

/* llama.cpp itself (llama-cpp-python with an fp32 KV cache,
 * scripts/llamacpp_ref.py) computed the mean next-token loss of
 * tests/data/gguf/seq.bin with each GGUF file; strata imports the same file
 * and evaluates the same window. The model is initialized with std 0.25, so
 * its predictions are far from uniform and any mistake in RoPE, the q/k
 * un-permutation or GQA moves the loss by percents. Relative tolerance: 1e-6
 * for F32 (both engines compute in fp32: summation order only; measured
 * 1.3e-7), 1e-3 for F16, BF16 and Q8_0 and 2e-3 for Q4_0 and Q4_1, where
 * llama.cpp's dot products round the activations as well (to F16, BF16,
 * Q8_0 / Q8_1; measured 5e-5 to 1.1e-3). */
Test(gguf, loss_matches_llama_cpp, .timeout = 120)
{
	cJSON *root = tu_read_json("tests/data/gguf/llamacpp.json");
	const cJSON *it;
	int n = 0;
	cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "losses"))
	{
		char dir[300];
		import_to(dir, sizeof dir, it->string);
		const double got = eval_loss(dir, "tests/data/gguf/seq.bin", 48), want = it->valuedouble;
		const char *q = it->string;
		const double tol = !strcmp(q, "F32")                      ? 1e-6
				   : !strcmp(q, "Q4_0") || !strcmp(q, "Q4_1") ? 2e-3
									       : 1e-3;
		cr_expect(fabs(got - want) <= tol * want, "%s: strata loss %.6f, llama.cpp %.6f (rel. %.2g > %.0g)",
			  q, got, want, fabs(got - want) / want, tol);
		n++;
	}
	cr_expect_eq(n, 6);
	cJSON_Delete(root);
}

/* What strata writes, transformers reads: scripts/hf_ref.py loaded the model
 * directories in tests/data/hfref (written by strata init: untied, and tied
 * with sharded weights) with LlamaForCausalLM in float32 and computed the
 * mean next-token loss of seq.bin; strata's loss on the same window agrees
 * to fp32 rounding (1e-6 relative). */
Test(hf, transformers_reads_what_strata_writes, .timeout = 120)
{
	cJSON *root = tu_read_json("tests/data/hfref/ref.json");
	const cJSON *it;
	int n = 0;
	cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "models"))
	{
		char model[256];
		snprintf(model, sizeof model, "tests/data/hfref/%s", it->string);
		const double got = eval_loss(model, "tests/data/hfref/seq.bin", 48);
		const double want = cJSON_GetObjectItem(it, "loss")->valuedouble;
		cr_expect(fabs(got - want) <= 1e-6 * want, "%s: strata loss %.7f, transformers %.7f",
			  it->string, got, want);
		n++;
	}
	cr_expect_eq(n, 2);
	cJSON_Delete(root);
}

/* The round trip through llama.cpp: a model strata wrote
 * (tests/data/hfref/untied), converted to GGUF by llama.cpp's own
 * convert_hf_to_gguf.py (scripts/llamacpp_convert.py), imported back by
 * strata: every weight is bit-identical to the original. */
Test(hf, llama_cpp_converts_what_strata_writes)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "roundtrip");
	int rc = cu_run(out, sizeof out,
			"%s import --gguf tests/data/hfref/untied-llamacpp-f32.gguf --out %s/m", cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	char path[512];
	snprintf(path, sizeof path, "%s/m", dir);
	struct st_weight_files a, b;
	cr_assert_eq(weights_open(&a, path), ST_OK);
	cr_assert_eq(weights_open(&b, "tests/data/hfref/untied"), ST_OK);
	cr_assert_eq(a.sf[0].n, b.sf[0].n);
	for (int i = 0; i < b.sf[0].n; i++) {
		const struct st_tensor_info *want = &b.sf[0].tensors[i];
		const struct st_tensor_info *got = safetensors_find(&a.sf[0], want->name);
		cr_assert(got, "%s missing after the round trip", want->name);
		cr_expect_eq(got->end - got->begin, want->end - want->begin);
		cr_expect_eq(memcmp(safetensors_data(&a.sf[0], got), safetensors_data(&b.sf[0], want),
				    want->end - want->begin), 0, "%s changed in the round trip", want->name);
	}
	weights_close(&a);
	weights_close(&b);
}

/* A Hugging Face directory holding only PyTorch weights (pytorch_model.bin,
 * or its shards and their index) is named as such, with how to convert
 * them (it was "has neither model.safetensors nor ..."); other .bin files
 * (transformers' training_args.bin) are no weights, and keep that message. */
Test(hf, pytorch_weights_named)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "ptbin");
	const struct {
		const char *files, *needle;
	} cases[] = {
		{"pytorch_model.bin", "holds PyTorch weights (pytorch_model.bin), which strata does not "
				      "read: it reads model.safetensors or the shards"},
		{"pytorch_model-00001-of-00002.bin pytorch_model-00002-of-00002.bin "
		 "pytorch_model.bin.index.json",
		 "holds PyTorch weights (pytorch_model"},
		{"training_args.bin", "has neither model.safetensors nor model.safetensors.index.json"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		int rc = cu_run(out, sizeof out,
				"mkdir %s/m%zu && cp tests/data/hfref/untied/config.json %s/m%zu/ && "
				"cd %s/m%zu && for f in %s; do echo x > $f; done",
				dir, i, dir, i, dir, i, cases[i].files);
		cr_assert_eq(rc, 0, "%s", out);
		rc = cu_run(out, sizeof out, "%s eval --model %s/m%zu --data tests/data/hfref/seq.bin",
			    cu_bin(), dir, i);
		cr_expect(rc != 0 && strstr(out, cases[i].needle), "%s: %s", cases[i].files, out);
		cr_expect(!strstr(out, "PyTorch") == (i == 2), "%s: %s", cases[i].files, out);
	}
	int rc = cu_run(out, sizeof out, "%s eval --model %s/m0 --data tests/data/hfref/seq.bin",
			cu_bin(), dir);
	cr_expect(rc != 0 && strstr(out, "hint: convert them to safetensors first, e.g. in Python "
					 "with transformers: AutoModelForCausalLM.from_pretrained(DIR)"
					 ".save_pretrained(OUT)"),
		  "%s", out);
	/* a link whose target is gone (an interrupted Hugging Face cache
	 * download), as the single file or a shard: named as such (it read as
	 * "neither model.safetensors nor ...") */
	rc = cu_run(out, sizeof out,
		    "mkdir %s/l1 %s/l2 && cp tests/data/hfref/untied/config.json %s/l1/ && "
		    "cp tests/data/hfref/untied/config.json %s/l2/ && "
		    "ln -s ../blobs/0a1b2c %s/l1/model.safetensors && ln -s ../blobs/3d4e5f "
		    "%s/l2/model-00001-of-00001.safetensors && echo '{\"weight_map\": "
		    "{\"lm_head.weight\": \"model-00001-of-00001.safetensors\"}}' > "
		    "%s/l2/model.safetensors.index.json",
		    dir, dir, dir, dir, dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	for (int i = 1; i <= 2; i++) {
		rc = cu_run(out, sizeof out, "%s eval --model %s/l%d --data tests/data/hfref/seq.bin", cu_bin(),
			    dir, i);
		cr_expect(rc != 0 && strstr(out, i == 1 ? "/l1/model.safetensors is a link to ../blobs/0a1b2c, "
							  "which does not exist"
							: "/l2/model-00001-of-00001.safetensors is a link to "
							  "../blobs/3d4e5f, which does not exist"),
			  "%s", out);
	}
	/* plan too (it planned from config.json alone, as for no weights) */
	rc = cu_run(out, sizeof out, "%s plan --model %s/l1", cu_bin(), dir);
	cr_expect(rc != 0 && strstr(out, "/l1/model.safetensors is a link to ../blobs/0a1b2c"), "%s", out);
}

/* An import reads the file's tensors a slice at a time and drops each
 * slice's mapped pages, so it holds its buffers (the largest unit and the
 * largest tensor in fp32) and not the file: a 395 MiB F32 file of 8 layers
 * of width 1024 (tests/big_gguf.py) peaks within those buffers + 64 MiB
 * (73 MiB; it peaked at 457 MiB, the whole file resident by the end, found
 * by a helper's audit), writing every tensor. */
Test(gguf, import_does_not_hold_the_file, .timeout = 180)
{
	char dir[256], cmd[2048];
	cu_tmpdir(dir, sizeof dir, "ggufbig");
	int rc = cu_run(out, sizeof out,
			"python3 tests/big_gguf.py tests/data/gguf/model-F32.gguf %s/big.gguf 1024 2816 8 8",
			dir);
	cr_assert_eq(rc, 0, "%s", out);
	snprintf(cmd, sizeof cmd, "%s import --gguf %s/big.gguf --out %s/m", cu_bin(), dir, dir);
	int status;
	const size_t rss = cu_peak_rss(cmd, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", cmd);
	const double unit = (4.0 * 1024 * 1024 + 3.0 * 1024 * 2816 + 2 * 1024) * 4,
		     param = 1024.0 * 2816 * 4;
	cr_log_info("import of a 395 MiB file: peak RSS %.1f MiB", rss / 1048576.0);
	cr_expect_leq((double)rss, unit + param + (64u << 20),
		      "the import peaked at %.1f MiB, over its buffers (%.1f MiB) + 64", rss / 1048576.0,
		      (unit + param) / 1048576.0);
	rc = cu_run(out, sizeof out,
		    "python3 -c \"import json, struct; f = open('%s/m/model.safetensors', 'rb'); "
		    "n = struct.unpack('<Q', f.read(8))[0]; h = json.loads(f.read(n)); "
		    "print(len([k for k in h if k != '__metadata__']))\"",
		    dir);
	cr_expect(rc == 0 && atoi(out) == 3 + 9 * 8, "tensors written: %s", out);
}

/* Damaged files: each a clear error naming the problem. */
Test(gguf, bad_files)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "ggufbad");
	const char *src = "tests/data/gguf/model-Q8_0.gguf";
	struct {
		const char *what, *make, *needle;
	} cases[] = {
		{"truncated", "head -c 60000 %s > %s/x.gguf", "past the end"},
		{"cut in the metadata", "head -c 300 %s > %s/x.gguf", "past the end"},
		{"not GGUF", "printf 'GGML0000000000000000000000000' > %s/x.gguf; : %s", "not a GGUF file"},
		{"version 9", "cp %s %s/x.gguf && printf '\\x09' | dd of=%s/x.gguf bs=1 seek=4 conv=notrunc 2>/dev/null",
		 "version 9"},
		{"another architecture", "sed 's/llama/gemm2/' %s > %s/x.gguf", "unsupported architecture"},
		/* a NUL in the name, shown (it read as 'llam') */
		{"a NUL in the architecture",
		 "python3 -c \"import sys; d = open(sys.argv[1], 'rb').read(); "
		 "k = d.index(b'general.architecture') + 20 + 12; "
		 "open(sys.argv[2] + '/x.gguf', 'wb').write(d[:k] + b'llam\\x00' + d[k + 5:])\" %s %s",
		 "unsupported architecture 'llam\\x00'"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char cmd[1024];
		if (strstr(cases[i].make, "dd of"))
			snprintf(cmd, sizeof cmd, cases[i].make, src, dir, dir);
		else if (!strncmp(cases[i].make, "printf", 6))
			snprintf(cmd, sizeof cmd, cases[i].make, dir, src);
		else
			snprintf(cmd, sizeof cmd, cases[i].make, src, dir);
		cr_assert_eq(cu_run(NULL, 0, "%s", cmd), 0, "%s: cannot make the file", cases[i].what);
		int rc = cu_run(out, sizeof out, "%s import --gguf %s/x.gguf --out %s/o%zu", cu_bin(), dir,
				dir, i);
		cr_expect_neq(rc, 0, "%s: accepted", cases[i].what);
		cr_expect(strstr(out, cases[i].needle), "%s: message lacks '%s': %s", cases[i].what,
			  cases[i].needle, out);
	}
}

/* A copy of src with the 4-byte value of metadata key `key` (a u32 or f32)
 * replaced by bits; the key's type must be `type`. */
static void gguf_patch(const char *src, const char *dst, const char *key, uint32_t type,
		       uint32_t bits)
{
	size_t n;
	char *d = NULL;
	cr_assert_eq(fs_read_file(src, &d, &n), ST_OK);
	const size_t kl = strlen(key);
	char *k = memmem(d, n, key, kl);
	cr_assert(k, "%s: no key %s", src, key);
	uint32_t t;
	memcpy(&t, k + kl, 4);
	cr_assert_eq(t, type, "%s: %s has type %u", src, key, t);
	memcpy(k + kl + 4, &bits, 4);
	cr_assert_eq(fs_write_file_atomic(dst, d, n), ST_OK);
	free(d);
}

/* A copy of src with a u32 metadata key added after the header, and a
 * string key "p" padding the insert to a multiple of the 32-byte alignment,
 * so that the tensor data, placed relative to the aligned end of the
 * header, keeps its offsets. */
static void gguf_add_u32(const char *src, const char *dst, const char *key, uint32_t val)
{
	size_t n;
	char *d = NULL;
	cr_assert_eq(fs_read_file(src, &d, &n), ST_OK);
	cr_assert(n > 24 && !memcmp(d, "GGUF", 4));
	char add[256];
	size_t k = 0;
	const uint64_t kl = strlen(key), pl = 1;
	const uint32_t U32 = 4, STR = 8;
	memcpy(add + k, &kl, 8), k += 8;
	memcpy(add + k, key, kl), k += kl;
	memcpy(add + k, &U32, 4), k += 4;
	memcpy(add + k, &val, 4), k += 4;
	const uint64_t sl = (32 - (k + 8 + 1 + 4 + 8) % 32) % 32;
	memcpy(add + k, &pl, 8), k += 8;
	add[k++] = 'p';
	memcpy(add + k, &STR, 4), k += 4;
	memcpy(add + k, &sl, 8), k += 8;
	memset(add + k, 'x', sl), k += sl;
	cr_assert_eq(k % 32, 0);
	uint64_t kv;
	memcpy(&kv, d + 16, 8);
	kv += 2;
	memcpy(d + 16, &kv, 8);
	FILE *f = fopen(dst, "wb");
	cr_assert(f);
	cr_assert(fwrite(d, 1, 24, f) == 24 && fwrite(add, 1, k, f) == k &&
		  fwrite(d + 24, 1, n - 24, f) == n - 24);
	fclose(f);
	free(d);
}

/* llama.rope.dimension_count: the head size imports; another (partial
 * rotary embedding, which strata's RoPE over whole heads is not) is refused
 * naming both. A file without the norm's epsilon imports with 1e-5, warned
 * (llama.cpp refuses it). A key given twice and a tensor name holding a NUL
 * are refused. The test file's heads are 16 wide. */
Test(gguf, rope_dimensions_repeats_nul_and_missing_epsilon)
{
	char dir[256], path[512];
	cu_tmpdir(dir, sizeof dir, "ggufrope");
	snprintf(path, sizeof path, "%s/x.gguf", dir);
	gguf_add_u32("tests/data/gguf/model-F32.gguf", path, "llama.rope.dimension_count", 16);
	int rc = cu_run(out, sizeof out, "%s import --gguf %s --out %s/whole", cu_bin(), path, dir);
	cr_expect(rc == 0, "%s", out);
	char a[512], b[512];
	snprintf(a, sizeof a, "%s/whole/model.safetensors", dir);
	rc = cu_run(out, sizeof out, "%s import --gguf tests/data/gguf/model-F32.gguf --out %s/plain",
		    cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	snprintf(b, sizeof b, "%s/plain/model.safetensors", dir);
	cr_expect(cu_files_equal(a, b), "the added keys changed the weights read");
	gguf_add_u32("tests/data/gguf/model-F32.gguf", path, "llama.rope.dimension_count", 8);
	rc = cu_run(out, sizeof out, "%s import --gguf %s --out %s/partial", cu_bin(), path, dir);
	cr_expect(rc != 0 && strstr(out, "llama.rope.dimension_count is 8, not the head size 16"),
		  "%s", out);
	/* a key given twice (llama.cpp refuses it; the first would count) */
	gguf_add_u32("tests/data/gguf/model-F32.gguf", path, "llama.block_count", 1);
	rc = cu_run(out, sizeof out, "%s import --gguf %s --out %s/twice", cu_bin(), path, dir);
	cr_expect(rc != 0 && strstr(out, "metadata key 'llama.block_count' is given twice"), "%s", out);
	/* a tensor name cut by a NUL ("output_norm\0weight") */
	rc = cu_run(out, sizeof out, "sed 's/output_norm.weight/output_norm\\x00weight/' "
			"tests/data/gguf/model-F32.gguf > %s/nul.gguf && %s import --gguf %s/nul.gguf "
			"--out %s/nul", dir, cu_bin(), dir, dir);
	cr_expect(rc != 0 && strstr(out, "tensor name 'output_norm...' holds a NUL"), "%s", out);
	/* the tokenizer against the embedding: more tokens than its 320 rows,
	 * or an empty token (tests/gguf_edit.py rewrites the file) */
	rc = cu_run(out, sizeof out, "python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf "
			"%s/same.gguf extend-tokens 0 && %s import --gguf %s/same.gguf --out %s/same",
		    dir, cu_bin(), dir, dir);
	cr_expect(rc == 0, "a rewritten but unchanged file: %s", out);
	rc = cu_run(out, sizeof out, "python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf "
			"%s/more.gguf extend-tokens 100 && %s import --gguf %s/more.gguf --out %s/more",
		    dir, cu_bin(), dir, dir);
	cr_expect(rc != 0 && strstr(out, "420 tokens in tokenizer.ggml.tokens, more than the 320 rows"),
		  "%s", out);
	rc = cu_run(out, sizeof out, "python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf "
			"%s/empty.gguf empty-token && %s import --gguf %s/empty.gguf --out %s/empty",
		    dir, cu_bin(), dir, dir);
	cr_expect(rc != 0 && strstr(out, "token 319 is empty"), "%s", out);
	/* an epsilon the model could not be loaded with (2.0) */
	gguf_patch("tests/data/gguf/model-F32.gguf", path, "llama.attention.layer_norm_rms_epsilon", 6,
		   0x40000000);
	rc = cu_run(out, sizeof out, "%s import --gguf %s --out %s/eps2", cu_bin(), path, dir);
	cr_expect(rc != 0 && strstr(out, "rms_norm_eps must be in (0, 1)"), "%s", out);
	/* the epsilon's key renamed (same length: the file's layout stays) */
	rc = cu_run(out, sizeof out, "sed 's/layer_norm_rms_epsilon/layer_norm_rms_epsilox/' "
			"tests/data/gguf/model-F32.gguf > %s/noeps.gguf && { %s import --gguf %s/noeps.gguf "
			"--out %s/noeps 2>&1; } && grep -qE '\"rms_norm_eps\":[[:space:]]*1e-05' %s/noeps/config.json",
		    dir, cu_bin(), dir, dir, dir);
	cr_expect(rc == 0 && strstr(out, "has no llama.attention.layer_norm_rms_epsilon: using 1e-5"),
		  "%s", out);
}

/* Metadata out of range is an error naming the key, not a default: a NaN
 * RoPE base taken for 10000 would import another model than the file's. */
Test(gguf, bad_metadata)
{
	char dir[256], path[512];
	cu_tmpdir(dir, sizeof dir, "ggufmeta");
	snprintf(path, sizeof path, "%s/x.gguf", dir);
	const uint32_t U32 = 4, F32 = 6;
	struct {
		const char *key;
		uint32_t type, bits;
		const char *needle;
	} cases[] = {
		{"llama.rope.freq_base", F32, 0x7fc00000, "llama.rope.freq_base is not a positive finite"},
		{"llama.rope.freq_base", F32, 0xbf800000, "llama.rope.freq_base is not a positive finite"},
		{"llama.attention.layer_norm_rms_epsilon", F32, 0x7f800000,
		 "layer_norm_rms_epsilon is not a positive finite"},
		{"llama.attention.head_count_kv", U32, 0, "head_count_kv is not a size"},
		/* the default head size (64 / 128) rounds to 0: said as such */
		{"llama.attention.head_count", U32, 128,
		 "head_count 128 does not divide llama.embedding_length 64"},
		/* 16M layers: refused before the model's bookkeeping is sized by it */
		{"llama.block_count", U32, 16777215, "num_hidden_layers is 16777215; strata takes at most"},
		{"llama.context_length", U32, 1u << 24, "llama.context_length is not a size"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		gguf_patch("tests/data/gguf/model-Q8_0.gguf", path, cases[i].key, cases[i].type,
			   cases[i].bits);
		int rc = cu_run(out, sizeof out, "%s import --gguf %s --out %s/o%zu", cu_bin(), path,
				dir, i);
		cr_expect_neq(rc, 0, "%s = %#x: accepted", cases[i].key, cases[i].bits);
		cr_expect(strstr(out, cases[i].needle), "%s = %#x: message lacks '%s': %s",
			  cases[i].key, cases[i].bits, cases[i].needle, out);
	}
	/* A NaN weight (the F32 file's last 4 bytes) and a duplicate token
	 * ('"' made '!') would import and then fail every load: refused at the
	 * import, with no config.json left, so the next import needs no --force. */
	const struct {
		const char *make, *needle;
	} damaged[] = {
		{"cp tests/data/gguf/model-F32.gguf %s && printf '\\000\\000\\300\\177' | "
		 "dd of=%s bs=1 seek=418108 conv=notrunc",
		 "tensor model.layers.1.mlp.down_proj.weight holds nan at element 6143"},
		{"cp tests/data/gguf/model-F32.gguf %s && printf '!' | dd of=%s bs=1 seek=673 conv=notrunc",
		 "tokenizer.ggml.tokens and 62 merges does not load (the error above"},
		/* the hint is one import can follow */
		{"cp tests/data/gguf/model-F32.gguf %s && printf '!' | dd of=%s bs=1 seek=673 conv=notrunc",
		 "hint: the file's tokenizer is damaged: convert the model again with a current llama.cpp"},
	};
	for (size_t i = 0; i < sizeof damaged / sizeof *damaged; i++) {
		cr_assert_eq(cu_run(NULL, 0, damaged[i].make, path, path), 0);
		int rc = cu_run(out, sizeof out, "%s import --gguf %s --out %s/d%zu", cu_bin(), path,
				dir, i);
		cr_expect_neq(rc, 0, "damage %zu: accepted", i);
		cr_expect(strstr(out, damaged[i].needle), "damage %zu: %s", i, out);
		cr_expect_eq(cu_run(NULL, 0, "test ! -e %s/d%zu/config.json -a ! -e %s/d%zu/tokenizer.json",
				    dir, i, dir, i),
			     0, "damage %zu: a failed import left a model", i);
	}
	/* Metadata that imported silently as another model (tests/gguf_edit.py
	 * adds or replaces the key): a general.alignment of another type (read
	 * as 32, every tensor shifted); a RoPE scaling factor without a type
	 * (llama.cpp runs it as linear scaling); keys of the wrong type; token
	 * kinds that are not integers (control tokens became ordinary ones); a
	 * token holding a NUL (cut short in tokenizer.json). */
	const struct {
		const char *edit, *needle;
	} edits[] = {
		{"set general.alignment 10 64", "general.alignment is of GGUF type 10, not UINT32 (4)"},
		{"set general.alignment 8 64", "general.alignment is of GGUF type 8, not UINT32"},
		{"set llama.rope.scale_linear 6 4.0",
		 "llama.rope.scale_linear is 4 with no llama.rope.scaling.type: llama.cpp runs this model "
		 "with linear RoPE scaling"},
		{"set llama.rope.scaling.factor 6 2.0", "llama.rope.scaling.factor is 2 with no"},
		{"set llama.rope.scaling.factor 8 2", "llama.rope.scaling.factor is not a number"},
		{"set llama.rope.scaling.type 4 1", "llama.rope.scaling.type is not a string"},
		{"set llama.rope.dimension_count 8 16", "llama.rope.dimension_count is not a count"},
		{"string-types", "tokenizer.ggml.token_type is not a list of 320 integers, one per token"},
		{"nul-token", "token 319 is holding a NUL byte"},
		/* tokenizer.json then held bytes the tokenizers library refuses */
		{"latin1-token", "token 319 is not UTF-8 text"},
		{"set llama.expert_count 8 four", "llama.expert_count is not a number"}, /* read "is 0" */
		/* imported as if the values had the keys' size */
		{"set llama.attention.value_length 4 8",
		 "llama.attention.value_length 8 differs from the key length 16"},
		/* read as no pre-tokenizer named */
		{"set tokenizer.ggml.pre 4 1", "tokenizer.ggml.pre is not a string (llama.cpp refuses it too)"},
		/* any power of two is an alignment, as llama.cpp takes (2^17 was
		 * "not a power of two"); this file's offsets are not aligned to it */
		{"set general.alignment 4 131072", "tensor 'output_norm.weight' is not aligned to 131072 bytes"},
	};
	for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
		int rc = cu_run(out, sizeof out,
				"python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/e%zu.gguf %s && "
				"%s import --gguf %s/e%zu.gguf --out %s/e%zu",
				dir, i, edits[i].edit, cu_bin(), dir, i, dir, i);
		cr_expect(rc != 0 && strstr(out, edits[i].needle), "%s: %d %s", edits[i].edit, rc, out);
	}
	/* a factor of 1 is no scaling, a UINT32 alignment of 64 is read, a
	 * value length equal to the key length, and no context length (warned:
	 * 2048, where it went unsaid) */
	const char *fine[] = {"set llama.rope.scaling.factor 6 1.0", "set general.alignment 4 64",
			      "set llama.attention.value_length 4 16", "del llama.context_length"};
	for (size_t i = 0; i < sizeof fine / sizeof *fine; i++) {
		int rc = cu_run(out, sizeof out,
				"python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/f%zu.gguf %s && "
				"%s import --gguf %s/f%zu.gguf --out %s/f%zu",
				dir, i, fine[i], cu_bin(), dir, i, dir, i);
		cr_expect_eq(rc, 0, "%s: %s", fine[i], out);
		cr_expect(!strstr(out, "warning") == (i != 3), "%s: %s", fine[i], out);
	}
	cr_expect(strstr(out, "has no llama.context_length: using 2048 positions"), "%s", out);
	/* scale_linear is read only without scaling.factor, as llama.cpp does */
	int rc = cu_run(out, sizeof out,
			"python3 tests/gguf_edit.py tests/data/gguf/model-F32.gguf %s/g1.gguf set "
			"llama.rope.scaling.factor 6 1.0 && python3 tests/gguf_edit.py %s/g1.gguf %s/g2.gguf "
			"set llama.rope.scale_linear 6 4.0 && %s import --gguf %s/g2.gguf --out %s/g2",
			dir, dir, dir, cu_bin(), dir, dir);
	cr_expect_eq(rc, 0, "a stale scale_linear beside a factor of 1: %s", out);
	/* the same value in range imports */
	gguf_patch("tests/data/gguf/model-Q8_0.gguf", path, "llama.rope.freq_base", F32, 0x461c4000);
	rc = cu_run(out, sizeof out, "%s import --gguf %s --out %s/ok", cu_bin(), path, dir);
	cr_assert_eq(rc, 0, "%s", out);
	snprintf(path, sizeof path, "%s/ok/config.json", dir);
	cJSON *c;
	cr_assert_eq(fs_read_json(path, &c, NULL), ST_OK);
	cr_expect_eq(cJSON_GetObjectItem(c, "rope_theta")->valuedouble, 10000.0);
	cJSON_Delete(c);
}
