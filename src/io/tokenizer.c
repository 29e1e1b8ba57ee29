/* Tokenizers; see tokenizer.h. The byte-level tokenizer: every byte of the
 * UTF-8 input is one token, so encoding is lossless for any text (multi-byte
 * characters become several tokens) and decoding concatenates bytes; <bos> =
 * 256 and <eos> = 257 decode to nothing. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/bpe.h"
#include "io/fsutil.h"
#include "io/tokenizer.h"
#include "util/utf8.h"
#include "util/check.h"

void tokenizer_byte(struct st_tokenizer *tk)
{
	memset(tk, 0, sizeof *tk);
	strcpy(tk->name, "byte");
	tk->vocab_size = ST_BYTE_VOCAB;
	tk->bos_id = ST_BYTE_BOS;
	tk->eos_id = ST_BYTE_EOS;
}

/* The first of names that the tokenizer has, or -1. */
static int find_special(const struct st_bpe *b, const char *const *names)
{
	for (int i = 0; names[i]; i++) {
		int id = bpe_token_id(b, names[i]);
		if (id >= 0)
			return id;
	}
	return -1;
}

/* An end token from a JSON number: added to end_ids where it is an added
 * token of tk not there already. An ordinary token there (an id written
 * for another tokenizer, as strata's presets carry the byte tokenizer's)
 * would stop sampling at a piece of text: left out, and said where from is
 * given (transformers' generate stops at any id listed). */
static void add_end_id(struct st_tokenizer *tk, const cJSON *v, const char *from)
{
	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= tk->vocab_size)
		return;
	if (!bpe_is_added(tk->bpe, (int)v->valuedouble)) {
		size_t len = 0;
		const char *text = bpe_token_bytes(tk->bpe, (uint32_t)v->valuedouble, &len);
		char shown[96] = "";
		st_printable(shown, sizeof shown, text ? text : "", text ? len : 0);
		if (from)
			st_log_warn("%s: end token %d is '%s', an ordinary token of the tokenizer, not "
				    "one of its added tokens: sample does not stop at it (transformers' "
				    "generate would)",
				    from, (int)v->valuedouble, shown);
		return;
	}
	for (int i = 0; i < tk->n_end; i++)
		if (tk->end_ids[i] == (int)v->valuedouble)
			return;
	if (tk->n_end < ST_MAX_END_IDS)
		tk->end_ids[tk->n_end++] = (int)v->valuedouble;
}

/* dir/name parsed, or NULL where there is none or it does not parse (said,
 * naming what it would have been read for): the files beside a tokenizer
 * that only refine it. */
static cJSON *read_beside(const char *dir, const char *name, const char *what)
{
	char path[4300];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (!fs_exists(path))
		return NULL;
	cJSON *root = NULL;
	const int old = st_log_mute(1);
	const int rc = fs_read_json(path, &root, NULL);
	st_log_mute(old);
	if (rc != ST_OK) {
		st_log_warn("%s is not read for %s: %s", path, what, st_log_last_error());
		return NULL;
	}
	return root;
}

/* generation_config.json's end tokens beside config.json's: transformers'
 * generate stops at its eos_token_id list (Llama 3 Instruct's names
 * <|eot_id|> there and not in config.json; a GGUF import writes one), and
 * sample stops where generate does (it ran on past <|eot_id|>). The added
 * tokens among them join end_ids after <eos>; one that does not parse is
 * warned and left out. */
static void gen_end_ids(struct st_tokenizer *tk, const char *model_dir)
{
	cJSON *root = read_beside(model_dir, "generation_config.json", "its end tokens");
	if (!root)
		return;
	const cJSON *ends = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
	if (tk->n_end == 0 && tk->eos_id >= 0 && ends) /* <eos> first, as config.json's */
		tk->end_ids[tk->n_end++] = tk->eos_id;
	char path[4300];
	snprintf(path, sizeof path, "%s/generation_config.json", model_dir);
	const cJSON *list = cJSON_IsArray(ends) ? ends : NULL, *e;
	cJSON_ArrayForEach(e, list)
		add_end_id(tk, e, path);
	if (cJSON_IsNumber(ends))
		add_end_id(tk, ends, path);
	if (tk->eos_id < 0 && tk->n_end > 0)
		tk->eos_id = tk->end_ids[0]; /* no <eos> in config.json: the list's first */
	cJSON_Delete(root);
}

int tokenizer_model_ids(struct st_tokenizer *tk, const char *model_dir)
{
	if (!tk->bpe)
		return ST_OK; /* the byte tokenizer's ids are its own */
	char cpath[4200];
	snprintf(cpath, sizeof cpath, "%s/config.json", model_dir);
	/* read as every JSON file is (a key twice, or more after the object,
	 * refused: the model's readers would take another id) */
	cJSON *root = NULL;
	if (!fs_exists(cpath))
		return ST_OK;
	ST_TRY(fs_read_json(cpath, &root, "fix the model's config.json"));
	const char *keys[2] = {"bos_token_id", "eos_token_id"};
	int *ids[2] = {&tk->bos_id, &tk->eos_id};
	/* several end tokens: the first is <eos> (what prepare ends an example
	 * with); sample stops at any of them that is an added token */
	const cJSON *ends = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
	if (ends)
		tk->n_end = 0; /* this config.json's list, not another's read before */
	const cJSON *list = cJSON_IsArray(ends) ? ends : NULL, *e;
	int nth = 0;
	cJSON_ArrayForEach(e, list) /* the first: warned as <eos> below */
		add_end_id(tk, e, nth++ ? cpath : NULL);
	for (int k = tk->bos_from_tok_config ? 1 : 0; k < 2; k++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[k]);
		if (cJSON_IsArray(v)) /* several end tokens: the first */
			v = cJSON_GetArrayItem(v, 0);
		if (k == 0 && cJSON_IsNull(v)) { /* a model without a <bos> (Qwen2's) */
			*ids[k] = -1;
			continue;
		}
		if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= tk->vocab_size)
			continue;
		const int id = (int)v->valuedouble;
		/* an id written for another tokenizer (strata init's presets carry
		 * the byte tokenizer's 256 and 257) names an ordinary token here:
		 * <eos> would end texts at a letter */
		if (!bpe_is_added(tk->bpe, id)) {
			size_t len = 0, olen = 0;
			const char *text = bpe_token_bytes(tk->bpe, (uint32_t)id, &len);
			const char *own =
				*ids[k] >= 0 ? bpe_token_bytes(tk->bpe, (uint32_t)*ids[k], &olen) : NULL;
			char shown[96] = "", use[160] = "none";
			st_printable(shown, sizeof shown, text ? text : "", text ? len : 0);
			if (own) {
				char o[96];
				st_printable(o, sizeof o, own, olen);
				snprintf(use, sizeof use, "'%s' (id %d)", o, *ids[k]);
			}
			st_log_warn("%s: %s %d is '%s', an ordinary token of the tokenizer, not one of "
				    "its added tokens: using %s",
				    cpath, keys[k], id, shown, use);
			continue;
		}
		*ids[k] = id;
	}
	cJSON_Delete(root);
	gen_end_ids(tk, model_dir);
	return ST_OK;
}

/* dir/tokenizer_config.json's bos_token and eos_token (a text, an object
 * with its "content", or null for none): the tokens transformers' tokenizer
 * takes for <bos> and <eos>. Without the file, the names strata knows
 * stand in; they picked <|im_start|> as the <bos> of SmolLM2's and Qwen2's
 * vocabularies, whose files name <|endoftext|> or none, and none for GPT-2,
 * whose file names <|endoftext|>. */
static void tok_config_ids(struct st_tokenizer *tk, const char *dir)
{
	cJSON *root = read_beside(dir, "tokenizer_config.json", "its <bos> and <eos>");
	if (!root)
		return;
	char path[4300]; /* for the messages */
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	const char *keys[2] = {"bos_token", "eos_token"};
	int *ids[2] = {&tk->bos_id, &tk->eos_id};
	for (int k = 0; k < 2; k++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[k]);
		if (cJSON_IsObject(v))
			v = cJSON_GetObjectItemCaseSensitive(v, "content");
		if (!v || !(cJSON_IsNull(v) || cJSON_IsString(v)))
			continue; /* absent, or not a token: the names stand */
		const int id = cJSON_IsNull(v) ? -1 : bpe_token_id(tk->bpe, v->valuestring);
		if (cJSON_IsString(v) && id < 0) {
			st_log_warn("%s: %s '%s' is not an added token of the tokenizer: left out", path, keys[k],
				    v->valuestring);
			continue;
		}
		*ids[k] = id;
		tk->bos_from_tok_config |= k == 0;
	}
	cJSON_Delete(root);
}

/* Whether dir/config.json is a model's (an object with model_type,
 * architectures or vocab_size): a tokenizer.json given as a file reads the
 * one beside it only then, and a config.json that does not parse is no
 * model's, said and left out (an unrelated project's config.json beside a
 * bare "tokenizer.json" stopped prepare). */
static int model_config_beside(const char *dir)
{
	char path[4300];
	snprintf(path, sizeof path, "%s/config.json", dir);
	if (!fs_exists(path))
		return 0;
	cJSON *root = NULL;
	const int old = st_log_mute(1);
	const int rc = fs_read_json(path, &root, NULL);
	st_log_mute(old);
	if (rc != ST_OK) {
		st_log_warn("%s beside the tokenizer is not read for its <bos> and <eos>: %s", path,
			    st_log_last_error());
		return 0;
	}
	const int model = cJSON_GetObjectItemCaseSensitive(root, "model_type") ||
			  cJSON_GetObjectItemCaseSensitive(root, "architectures") ||
			  cJSON_GetObjectItemCaseSensitive(root, "vocab_size");
	cJSON_Delete(root);
	return model;
}

int tokenizer_load(struct st_tokenizer *tk, const char *name_or_path)
{
	if (!strcmp(name_or_path, "byte")) {
		tokenizer_byte(tk);
		return ST_OK;
	}
	memset(tk, 0, sizeof *tk);
	char path[4200], conf[4200];
	if (fs_is_dir(name_or_path))
		snprintf(path, sizeof path, "%s/tokenizer.json", name_or_path);
	else
		snprintf(path, sizeof path, "%s", name_or_path);
	snprintf(conf, sizeof conf, "%s/config.json", name_or_path);
	if (fs_is_dir(name_or_path) && !fs_exists(path) && fs_exists(conf)) {
		/* a model directory without one reads bytes, as --model reads it
		 * (strata init writes byte-vocabulary models): so where its
		 * vocabulary is the byte tokenizer's */
		cJSON *root = NULL;
		ST_TRY(fs_read_json(conf, &root, NULL));
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "vocab_size");
		const double vocab = cJSON_IsNumber(v) ? v->valuedouble : -1;
		cJSON_Delete(root);
		ST_CHECK(vocab == ST_BYTE_VOCAB,
			 "give the tokenizer.json the model was trained with (or copy it into the "
			 "directory)",
			 "%s has no tokenizer.json, and its vocabulary (%.0f) is not the byte "
			 "tokenizer's (%d)",
			 name_or_path, vocab, ST_BYTE_VOCAB);
		tokenizer_byte(tk);
		return ST_OK;
	}
	ST_CHECK(fs_exists(path), "give --tokenizer byte, a tokenizer.json, or a model directory with one",
		 "no tokenizer at %s", path);
	ST_TRY(bpe_load(&tk->bpe, path));
	tk->vocab_size = bpe_vocab_size(tk->bpe);
	static const char *bos[] = {"<|begin_of_text|>", "<s>", "<bos>", "<|im_start|>", NULL};
	static const char *eos[] = {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>",
				    "<|im_end|>", NULL};
	tk->bos_id = find_special(tk->bpe, bos);
	tk->eos_id = find_special(tk->bpe, eos);
	/* a model directory's config.json knows which ones the model uses
	 * (LLaMA-3-Instruct ends turns with <|eot_id|>, not <|end_of_text|>);
	 * a tokenizer.json named as a file in one reads it too (prepare's
	 * examples ended with <|end_of_text|> given the file and <|eot_id|>
	 * given its directory, under the same tokenizer name), where the
	 * config.json beside it is a model's */
	char dir[4200];
	snprintf(dir, sizeof dir, "%s", name_or_path);
	const int given_dir = fs_is_dir(dir);
	if (!given_dir) {
		char *slash = strrchr(dir, '/');
		if (slash)
			*slash = '\0';
		else
			snprintf(dir, sizeof dir, ".");
	}
	tok_config_ids(tk, dir);
	if ((given_dir || model_config_beside(dir)) && tokenizer_model_ids(tk, dir) != ST_OK) {
		bpe_free(tk->bpe);
		tk->bpe = NULL;
		return ST_FAIL;
	}
	/* the name shards record: which tokenizer.json exactly (path is still
	 * its path, whether given as a file or as a model directory) */
	tokenizer_file_name(path, tk->name);
	return ST_OK;
}

int tokenizer_file_name(const char *path, char name[25])
{
	char *text = NULL;
	size_t len = 0;
	const int old = st_log_mute(1);
	const int rc = fs_read_file(path, &text, &len);
	st_log_mute(old);
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (size_t i = 0; rc == ST_OK && i < len; i++)
		h = (h ^ (unsigned char)text[i]) * 0x100000001b3ull;
	free(text);
	snprintf(name, 25, "bpe-%016llx", (unsigned long long)h);
	return rc;
}

void tokenizer_free(struct st_tokenizer *tk)
{
	bpe_free(tk->bpe);
	tk->bpe = NULL;
}

size_t tokenizer_encode(const struct st_tokenizer *tk, uint32_t *out, const char *text,
			size_t len)
{
	if (tk->bpe)
		return bpe_encode(tk->bpe, out, text, len);
	const unsigned char *b = (const unsigned char *)text;
	for (size_t i = 0; i < len; i++)
		out[i] = b[i];
	return len;
}

size_t tokenizer_encode_part(const struct st_tokenizer *tk, uint32_t *out, const char *text,
			     size_t len, int last, unsigned *fresh, size_t *used)
{
	if (!last) { /* a character cut at the end waits whole for the next part:
		      * PCRE2 would take its first bytes for an invalid character */
		size_t j = len;
		while (j > 0 && len - j < 4 && ((unsigned char)text[j - 1] & 0xc0) == 0x80)
			j--;
		if (j > 0) {
			const unsigned char c = (unsigned char)text[j - 1];
			const size_t k = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
			if (c >= 0xc0 && c < 0xf8 && j - 1 + k > len)
				len = j - 1;
		}
	}
	if (tk->bpe)
		return bpe_encode_part(tk->bpe, out, text, len, last, fresh, used);
	*used = len;
	*fresh = 0;
	return tokenizer_encode(tk, out, text, len);
}

size_t tokenizer_decode_one(const struct st_tokenizer *tk, char *buf, size_t cap, uint32_t id)
{
	if (tk->bpe) {
		size_t n = 0;
		const char *s = bpe_token_bytes(tk->bpe, id, &n);
		if (!s)
			return 0;
		n = n < cap ? n : cap;
		memcpy(buf, s, n);
		return n;
	}
	/* Specials and ids outside the vocabulary (a model with a larger vocab
	 * than the tokenizer can still sample them) produce no text. */
	if (id >= 256 || !cap)
		return 0;
	buf[0] = (char)(unsigned char)id;
	return 1;
}

size_t tokenizer_max_token_len(const struct st_tokenizer *tk)
{
	return tk->bpe ? bpe_max_token_len(tk->bpe) : 1;
}
