/* Byte-level BPE from tokenizer.json: loading; see bpe.h (encoding is in
 * bpe_encode.c). */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "io/bpe.h"
#include "io/bpe_impl.h"
#include "io/fsutil.h"
#include "io/regex_ws.h"
#include "io/tokenizer.h"
#include "util/check.h"

/* GPT-2's pre-tokenizer regex, as the ByteLevel pre-tokenizer applies it */
static const char *GPT2_PATTERN =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- building the tables ---------------------------------------------------- */

static int smap_init(struct str_map *m, size_t n)
{
	m->cap = 16;
	while (m->cap < 2 * n + 16)
		m->cap *= 2;
	m->keys = st_calloc(m->cap, sizeof *m->keys);
	m->lens = st_calloc(m->cap, sizeof *m->lens);
	m->vals = st_calloc(m->cap, sizeof *m->vals);
	return m->keys && m->lens && m->vals ? ST_OK : ST_FAIL;
}

static void smap_put(struct str_map *m, const char *k, size_t n, uint32_t v)
{
	for (size_t i = fnv(k, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1))
		if (!m->keys[i] || (m->lens[i] == n && !memcmp(m->keys[i], k, n))) {
			m->keys[i] = k;
			m->lens[i] = n;
			m->vals[i] = v;
			return;
		}
}

static int pmap_init(struct pair_map *m, size_t n)
{
	m->cap = 16;
	while (m->cap < 2 * n + 16)
		m->cap *= 2;
	m->keys = st_calloc(m->cap, sizeof *m->keys);
	m->rank = st_calloc(m->cap, sizeof *m->rank);
	m->merged = st_calloc(m->cap, sizeof *m->merged);
	return m->keys && m->rank && m->merged ? ST_OK : ST_FAIL;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the rest for 256, 257, ... in byte order. */
static void byte_alphabet(struct st_bpe *b, int cp_to_byte[512])
{
	int n = 0;
	for (int c = 0; c < 512; c++)
		cp_to_byte[c] = -1;
	for (int x = 0; x < 256; x++) {
		int printable = (x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae);
		int cp = printable ? x : 256 + n++;
		cp_to_byte[cp] = x;
		if (cp < 0x80) {
			b->byte_char[x][0] = (char)cp;
			b->byte_char_len[x] = 1;
		} else {
			b->byte_char[x][0] = (char)(0xc0 | (cp >> 6));
			b->byte_char[x][1] = (char)(0x80 | (cp & 0x3f));
			b->byte_char_len[x] = 2;
		}
	}
}

/* A vocabulary string in GPT-2's alphabet back to bytes; -1 if it is not. */
static long unmap(const char *s, size_t n, const int cp_to_byte[512], char *out)
{
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		unsigned c = (unsigned char)s[i];
		unsigned cp;
		if (c < 0x80) {
			cp = c;
			i++;
		} else if ((c & 0xe0) == 0xc0 && i + 1 < n) {
			cp = ((c & 0x1f) << 6) | ((unsigned char)s[i + 1] & 0x3f);
			i += 2;
		} else {
			return -1;
		}
		if (cp >= 512 || cp_to_byte[cp] < 0)
			return -1;
		out[k++] = (char)cp_to_byte[cp];
	}
	return (long)k;
}


/* The trie of the added tokens whose normalized flag is `normalized`. */
static int build_trie(struct st_bpe *b, int normalized)
{
	struct added_trie *t = &b->trie[normalized];
	size_t bytes = 0;
	for (int i = 0; i < b->n_added; i++)
		bytes += b->added[i].normalized == normalized ? b->added[i].len : 0;
	t->tok = st_malloc((bytes + 1) * sizeof *t->tok);
	if (!t->tok || pmap_init(&t->map, bytes) != ST_OK)
		return ST_FAIL;
	uint32_t nodes = 1;
	t->tok[0] = -1;
	for (int i = 0; i < b->n_added; i++) {
		const struct added *a = &b->added[i];
		if (a->normalized != normalized)
			continue;
		t->starts[(unsigned char)a->content[0]] = 1;
		uint32_t node = 0;
		for (size_t j = 0; j < a->len; j++) {
			const uint64_t key = trie_key(node, a->content[j]);
			const size_t slot = pmap_slot(&t->map, key);
			if (!t->map.keys[slot]) {
				t->map.keys[slot] = key;
				t->map.merged[slot] = nodes;
				t->tok[nodes++] = -1;
			}
			node = t->map.merged[slot];
		}
		t->tok[node] = i; /* texts are distinct (bpe_load) */
	}
	return ST_OK;
}


static int compile_re(struct st_bpe *b, const char *pattern, int literal, const char *path)
{
	ST_CHECK(b->n_re < ST_BPE_STAGES, "strata reads byte-level BPE tokenizers with up to 4 pre-tokenizer splits",
		 "%s: too many pre-tokenizer stages", path);
	int err;
	PCRE2_SIZE off;
	char *rewritten = literal ? NULL : regex_unicode_whitespace(pattern);
	if (!literal && !rewritten)
		return ST_FAIL;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)(rewritten ? rewritten : pattern), PCRE2_ZERO_TERMINATED,
				       /* PCRE2_LITERAL takes no PCRE2_UCP (an error) and needs none */
				       PCRE2_UTF | PCRE2_MATCH_INVALID_UTF |
					       (literal ? PCRE2_LITERAL : PCRE2_UCP),
				       &err, &off, NULL);
	if (!re && rewritten) { /* the error and its offset in the pattern as the file has it */
		pcre2_code *as_given = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
						     PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_UCP,
						     &err, &off, NULL);
		if (as_given) {
			pcre2_code_free(as_given);
			ST_ERROR(NULL, "internal: %s: the pre-tokenizer regex compiles, but not with "
				       "\\s as Unicode's White_Space: %s", path, rewritten);
			free(rewritten);
			return ST_FAIL;
		}
	}
	free(rewritten);
	if (!re) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(err, msg, sizeof msg);
		ST_ERROR("the tokenizer's pre-tokenizer pattern must be a PCRE-compatible regex",
			 "%s: cannot compile the pre-tokenizer regex at offset %zu: %s", path, (size_t)off,
			 (char *)msg);
		return ST_FAIL;
	}
	/* faster where available; optional. Partial: bpe_encode_part */
	pcre2_jit_compile(re, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
	uint32_t behind = 0;
	if (pcre2_pattern_info(re, PCRE2_INFO_MAXLOOKBEHIND, &behind) == 0 && behind)
		b->looks_back = 1;
	b->re[b->n_re++] = re;
	return ST_OK;
}

static int is_true(const cJSON *o, const char *key, int def)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

static const char *type_of(const cJSON *o)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
	return cJSON_IsString(t) ? t->valuestring : "?";
}

/* The first normalizer in norm that changes text, or NULL: none, null, or a
 * Sequence of none changes nothing (DeepSeek-V3's files, and files others
 * derive from them, carry {"type": "Sequence", "normalizers": []}, which the
 * tokenizers library applies as no normalizer). */
static const cJSON *active_normalizer(const cJSON *norm)
{
	if (!norm || cJSON_IsNull(norm))
		return NULL;
	const cJSON *seq = cJSON_GetObjectItemCaseSensitive(norm, "normalizers"), *it;
	if (strcmp(type_of(norm), "Sequence") || !cJSON_IsArray(seq))
		return norm;
	cJSON_ArrayForEach(it, seq)
		if (active_normalizer(it))
			return active_normalizer(it);
	return NULL;
}

/* One pre-tokenizer of the sequence as regex stages. */
static int load_stage(struct st_bpe *b, const cJSON *pt, int last, const char *path)
{
	const char *hint = "strata reads byte-level BPE tokenizers: Split (Isolated), Digits and "
			   "ByteLevel pre-tokenizers, ByteLevel last";
	const char *type = type_of(pt);
	if (!strcmp(type, "ByteLevel")) {
		ST_CHECK(last, hint, "%s: ByteLevel is not the last pre-tokenizer", path);
		b->add_prefix_space = is_true(pt, "add_prefix_space", 0);
		b->bl_stage = b->n_re;
		return is_true(pt, "use_regex", 1) ? compile_re(b, GPT2_PATTERN, 0, path) : ST_OK;
	}
	ST_CHECK(!last, hint, "%s: the last pre-tokenizer is %s, not ByteLevel", path, type);
	if (!strcmp(type, "Digits")) /* char::is_numeric: \p{N}, one by one or in runs */
		return compile_re(b, is_true(pt, "individual_digits", 0) ? "\\p{N}" : "\\p{N}+", 0, path);
	ST_CHECK(!strcmp(type, "Split"), hint, "%s: unsupported pre_tokenizer %s", path, type);
	const cJSON *behavior = cJSON_GetObjectItemCaseSensitive(pt, "behavior");
	ST_CHECK(cJSON_IsString(behavior) && !strcmp(behavior->valuestring, "Isolated") &&
			 !is_true(pt, "invert", 0),
		 hint, "%s: unsupported Split behavior (only Isolated, not inverted)", path);
	const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
	const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
	const cJSON *str = cJSON_GetObjectItemCaseSensitive(pat, "String");
	ST_CHECK(cJSON_IsString(re) || cJSON_IsString(str), hint, "%s: a Split without a pattern", path);
	return cJSON_IsString(re) ? compile_re(b, re->valuestring, 0, path)
				  : compile_re(b, str->valuestring, 1, path);
}

static int load_pre_tokenizer(struct st_bpe *b, const cJSON *pt, const char *path)
{
	ST_CHECK(cJSON_IsObject(pt), "strata reads byte-level BPE tokenizers", "%s: no pre_tokenizer",
		 path);
	if (strcmp(type_of(pt), "Sequence"))
		return load_stage(b, pt, 1, path);
	const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers"), *it;
	ST_CHECK(cJSON_IsArray(seq), "strata reads byte-level BPE tokenizers",
		 "%s: a pre_tokenizer Sequence whose \"pretokenizers\" is not a list", path);
	const int n = cJSON_GetArraySize(seq);
	ST_CHECK(n > 0, "strata reads byte-level BPE tokenizers", "%s: an empty pre_tokenizer sequence",
		 path);
	int i = 0;
	cJSON_ArrayForEach(it, seq)
		ST_TRY(load_stage(b, it, ++i == n, path));
	return ST_OK;
}

/* The texts the tables point into copied out of the parsed file, which is
 * then freed: its tree (a node per vocabulary entry and merge, about 60 MiB
 * for a 131072-token vocabulary) stayed for the tokenizer's life. */
static int own_strings(struct st_bpe *b)
{
	size_t bytes = 0;
	for (size_t i = 0; i < b->vocab.cap; i++)
		bytes += b->vocab.keys[i] ? b->vocab.lens[i] + 1 : 0;
	for (int i = 0; i < b->n_added; i++)
		bytes += b->added[i].len + 1;
	for (int i = 0; i < b->n_vocab; i++)
		bytes += b->raw[i] ? b->raw_len[i] + 1 : 0;
	char *at = b->strings = st_malloc(bytes ? bytes : 1);
	if (!at)
		return ST_FAIL;
	/* each id's bytes too, one block for all (a malloc each before) */
	for (int i = 0; i < b->n_vocab; i++)
		if (b->raw[i]) {
			memcpy(at, b->raw[i], b->raw_len[i]);
			at[b->raw_len[i]] = '\0';
			free(b->raw[i]);
			b->raw[i] = at;
			at += b->raw_len[i] + 1;
		}
	for (size_t i = 0; i < b->vocab.cap; i++)
		if (b->vocab.keys[i]) {
			memcpy(at, b->vocab.keys[i], b->vocab.lens[i]);
			at[b->vocab.lens[i]] = '\0';
			b->vocab.keys[i] = at;
			at += b->vocab.lens[i] + 1;
		}
	for (int i = 0; i < b->n_added; i++) {
		memcpy(at, b->added[i].content, b->added[i].len + 1);
		b->added[i].content = at;
		at += b->added[i].len + 1;
	}
	cJSON_Delete(b->json);
	b->json = NULL;
	malloc_trim(0); /* the tree's many small blocks back to the system */
	return ST_OK;
}

int bpe_load(struct st_bpe **out, const char *path)
{
	*out = NULL;
	cJSON *root;
	ST_TRY(fs_read_json(path, &root, "give the tokenizer.json of a Hugging Face model"));
	struct st_bpe *b = st_calloc(1, sizeof *b);
	if (!b) {
		cJSON_Delete(root);
		return ST_FAIL;
	}
	b->json = root;
	*out = b;
	const char **vstr = NULL; /* per id, the vocabulary's text (below) */
	int *at_id = NULL;        /* per id, the added token listed with it (below) */
	struct str_map by_text = {0};
	const char *hint = "strata reads byte-level BPE tokenizers (GPT-2, LLaMA-3, SmolLM style) without a normalizer";
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
	const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
	const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
	int rc = ST_OK;
	/* a model without "type" is read by the tokenizers library as the
	 * model its fields make: a vocab object and a merges list, BPE */
	const int untyped = cJSON_IsObject(model) && !cJSON_GetObjectItemCaseSensitive(model, "type");
	if (!cJSON_IsObject(model) || (strcmp(type_of(model), "BPE") && !untyped) ||
	    !cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
		ST_ERROR(hint, "%s: the model is not a BPE model with a vocab and merges (type %s)", path,
			 cJSON_IsObject(model) ? type_of(model) : "missing");
		rc = ST_FAIL;
	} else if (active_normalizer(norm)) {
		ST_ERROR(hint, "%s: normalizer %s is not supported", path,
			 type_of(active_normalizer(norm)));
		rc = ST_FAIL;
	} else if (is_true(model, "byte_fallback", 0)) {
		ST_ERROR(hint, "%s: byte_fallback (SentencePiece-style BPE) is not supported", path);
		rc = ST_FAIL;
	}
	if (rc != ST_OK) {
		bpe_free(b);
		*out = NULL;
		return rc;
	}
	b->ignore_merges = is_true(model, "ignore_merges", 0);
	if (load_pre_tokenizer(b, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), path) !=
	    ST_OK)
		goto fail;

	/* ids: the vocabulary's and the added tokens', whole numbers below the
	 * number of entries plus a margin (ids may have gaps, not huge ones) */
	const double id_max = (double)cJSON_GetArraySize(vocab) +
			      (double)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "added_tokens")) +
			      65536.0;
	int max_id = -1;
	const cJSON *it;
	/* settings that change how text is cut, which strata does not implement */
	const char *unsupported[] = {"continuing_subword_prefix", "end_of_word_suffix", "dropout", NULL};
	for (int i = 0; unsupported[i]; i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, unsupported[i]);
		/* none: null, "", or a dropout of 0 (the tokenizers library drops
		 * nothing then) */
		if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !*v->valuestring) &&
		    !(i == 2 && cJSON_IsNumber(v) && v->valuedouble == 0)) {
			ST_ERROR(hint, "%s: the BPE model's %s is not supported", path, unsupported[i]);
			goto fail;
		}
	}
	cJSON_ArrayForEach(it, vocab)
	{
		if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > id_max ||
		    it->valuedouble != (double)(int)it->valuedouble) {
			ST_ERROR(hint, "%s: vocab entry '%s' has no valid id", path, it->string);
			goto fail;
		}
		if ((int)it->valuedouble > max_id)
			max_id = (int)it->valuedouble;
	}
	const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
	cJSON_ArrayForEach(it, added)
	{
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
		const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
		if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > id_max ||
		    id->valuedouble != (double)(int)id->valuedouble || !cJSON_IsString(content) ||
		    !*content->valuestring) {
			ST_ERROR(hint, "%s: an added token without a valid id or content", path);
			goto fail;
		}
		if (is_true(it, "lstrip", 0) || is_true(it, "rstrip", 0) || is_true(it, "single_word", 0)) {
			ST_ERROR(hint, "%s: added token '%s' uses lstrip, rstrip or single_word, which strata "
				       "does not implement", path, content->valuestring);
			goto fail;
		}
		if ((int)id->valuedouble > max_id)
			max_id = (int)id->valuedouble;
		b->n_added++;
	}
	b->n_vocab = max_id + 1;
	b->raw = st_calloc((size_t)b->n_vocab, sizeof *b->raw);
	b->raw_len = st_calloc((size_t)b->n_vocab, sizeof *b->raw_len);
	b->added = st_calloc((size_t)(b->n_added + 1), sizeof *b->added);
	b->is_added = st_calloc((size_t)b->n_vocab, 1);
	if (!b->raw || !b->raw_len || !b->added || !b->is_added ||
	    smap_init(&b->vocab, (size_t)cJSON_GetArraySize(vocab)) != ST_OK ||
	    pmap_init(&b->merges, (size_t)cJSON_GetArraySize(merges)) != ST_OK)
		goto fail;
	cJSON_ArrayForEach(it, added)
		b->is_added[(int)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble] = 1;
	int cp_to_byte[512];
	byte_alphabet(b, cp_to_byte);
	/* the vocabulary's text of each id: one per id (of two entries sharing
	 * one, encoding would give both and decoding the last), and an added
	 * token may take an id only as the same token */
	vstr = st_calloc((size_t)b->n_vocab, sizeof *vstr);
	if (!vstr)
		goto fail;
	cJSON_ArrayForEach(it, vocab)
	{
		const size_t n = strlen(it->string);
		const int id = (int)it->valuedouble;
		if (vstr[id]) {
			ST_ERROR(hint, "%s: vocab entries '%s' and '%s' share id %d", path, vstr[id],
				 it->string, id);
			goto fail;
		}
		vstr[id] = it->string;
		char *raw = st_malloc(n + 1);
		if (!raw)
			goto fail;
		long k = unmap(it->string, n, cp_to_byte, raw);
		if (k < 0) {
			free(raw);
			/* an added token's text stands for itself (its bytes come from
			 * added_tokens below); anything else must be in the alphabet */
			if (b->is_added[id]) {
				smap_put(&b->vocab, it->string, n, (uint32_t)id);
				continue;
			}
			ST_ERROR(hint, "%s: vocab entry '%s' is not in the byte-level alphabet", path,
				 it->string);
			goto fail;
		}
		free(b->raw[id]);
		b->raw[id] = raw;
		b->raw_len[id] = (size_t)k;
		smap_put(&b->vocab, it->string, n, (uint32_t)id);
	}
	for (int x = 0; x < 256; x++) {
		b->byte_id[x] = smap_get(&b->vocab, b->byte_char[x], (size_t)b->byte_char_len[x]);
		if (b->byte_id[x] < 0) {
			ST_ERROR(hint, "%s: byte 0x%02x has no token (not a byte-level vocabulary)", path, x);
			goto fail;
		}
	}
	int rank = 0;
	cJSON_ArrayForEach(it, merges)
	{
		/* "a b" (older files) or ["a", "b"] */
		char small[1024], *buf = small;
		const char *l, *r;
		size_t ln, rn;
		if (cJSON_IsString(it)) {
			const char *sp = strchr(it->valuestring, ' ');
			if (!sp) {
				ST_ERROR(hint, "%s: merge %d ('%s') is not two tokens", path, rank,
					 it->valuestring);
				goto fail;
			}
			l = it->valuestring;
			ln = (size_t)(sp - l);
			r = sp + 1;
			rn = strlen(r);
		} else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
			   cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
			   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
			l = cJSON_GetArrayItem(it, 0)->valuestring;
			r = cJSON_GetArrayItem(it, 1)->valuestring;
			ln = strlen(l);
			rn = strlen(r);
		} else {
			ST_ERROR(hint, "%s: merge %d is neither \"a b\" nor [a, b]", path, rank);
			goto fail;
		}
		int a = smap_get(&b->vocab, l, ln), c = smap_get(&b->vocab, r, rn), m = -1;
		if (ln + rn >= sizeof small) /* a long merge (rare): its own buffer */
			buf = st_malloc(ln + rn);
		if (buf) {
			memcpy(buf, l, ln);
			memcpy(buf + ln, r, rn);
			m = smap_get(&b->vocab, buf, ln + rn);
		}
		if (buf != small)
			free(buf);
		if (a < 0 || c < 0 || m < 0) {
			ST_ERROR(hint, "%s: merge %d (%.*s + %.*s) names tokens not in the vocabulary",
				 path, rank, (int)ln, l, (int)rn, r);
			goto fail;
		}
		uint64_t key = (((uint64_t)a << 32) | (uint32_t)c) + 1;
		size_t slot = pmap_slot(&b->merges, key);
		/* a pair listed twice keeps its last rank: the Hugging Face library
		 * builds its merge map in file order */
		b->merges.keys[slot] = key;
		b->merges.rank[slot] = (uint32_t)rank;
		b->merges.merged[slot] = (uint32_t)m;
		rank++;
	}
	int k = 0, added_max = -1;
	const int vocab_len = cJSON_GetArraySize(vocab);
	/* the added token listed at each id and with each text so far, to find
	 * a second in one look each */
	at_id = st_malloc((size_t)b->n_vocab * sizeof *at_id);
	if (!at_id || smap_init(&by_text, (size_t)b->n_added) != ST_OK)
		goto fail;
	for (int i = 0; i < b->n_vocab; i++)
		at_id[i] = -1;
	cJSON_ArrayForEach(it, added)
	{
		const char *content = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
		const int id = (int)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
		/* one id per text and one text per id: of two, the tokenizers
		 * library keeps one (which, depends on its version and the vocab) */
		const int same_text = smap_get(&by_text, content, strlen(content));
		const int j = at_id[id] >= 0 ? at_id[id] : same_text;
		if (j >= 0) {
			ST_ERROR("remove one of the two entries from added_tokens",
				 "%s: added tokens '%s' (id %d) and '%s' (id %d) share %s", path,
				 b->added[j].content, (int)b->added[j].id, content, id,
				 (int)b->added[j].id == id ? "an id" : "their text");
			goto fail;
		}
		/* the vocabulary's token of that id spelled either way: its text
		 * (an added token listed there as itself) or its bytes */
		if (vstr[id] && strcmp(vstr[id], content) != 0 &&
		    !(b->raw[id] && b->raw_len[id] == strlen(content) &&
		      !memcmp(b->raw[id], content, b->raw_len[id]))) {
			ST_ERROR("give the added token an id of its own",
				 "%s: added token '%s' has id %d, which the vocabulary gives to '%s'", path,
				 content, id, vstr[id]);
			goto fail;
		}
		/* The tokenizers library does not read the listed ids: it gives an
		 * added token the vocabulary's id of its text, else the id after the
		 * vocabulary and the added tokens before it (AddedVocabulary::
		 * add_tokens), and a Hugging Face model trained with this file saw
		 * those. A file listing others (edited by hand) is refused, as the
		 * library's warning is easy to miss. */
		int lib = smap_get(&b->vocab, content, strlen(content));
		if (lib < 0)
			lib = added_max >= vocab_len ? added_max + 1 : vocab_len;
		if (lib != id) {
			ST_ERROR("give the id the library gives, or let the library write the file (it "
				 "writes the ids it uses)",
				 "%s: added token '%s' is listed with id %d, but the tokenizers library "
				 "gives it %d (the vocabulary's id of its text, else the next after the "
				 "vocabulary and the added tokens before it; it does not read the ids listed)",
				 path, content, id, lib);
			goto fail;
		}
		added_max = id > added_max ? id : added_max;
		at_id[id] = k;
		smap_put(&by_text, content, strlen(content), (uint32_t)k);
		/* normalized: absent (the library requires it), as the library's
		 * AddedToken::from sets it, the opposite of special */
		const int normalized = is_true(it, "normalized", !is_true(it, "special", 0));
		b->added[k++] = (struct added){content, strlen(content), (uint32_t)id, normalized};
		/* decoded as the library's ByteLevel decoder does any token: text
		 * whose every character is in the byte alphabet stands for those
		 * bytes ("Ġthe" is " the"), any other for its own UTF-8 */
		const size_t clen = strlen(content);
		char *raw = st_malloc(clen + 1);
		if (!raw)
			goto fail;
		const long nb = unmap(content, clen, cp_to_byte, raw);
		if (nb < 0)
			memcpy(raw, content, clen + 1);
		free(b->raw[id]);
		b->raw[id] = raw;
		b->raw_len[id] = nb < 0 ? clen : (size_t)nb;
	}
	free(vstr);
	free(at_id);
	free(by_text.keys), free(by_text.lens), free(by_text.vals);
	vstr = NULL;
	at_id = NULL;
	by_text = (struct str_map){0};
	if (build_trie(b, 0) != ST_OK || build_trie(b, 1) != ST_OK || own_strings(b) != ST_OK)
		goto fail;
	return ST_OK;
fail:
	free(vstr);
	free(at_id);
	free(by_text.keys), free(by_text.lens), free(by_text.vals);
	bpe_free(b);
	*out = NULL;
	return ST_FAIL;
}

void bpe_free(struct st_bpe *b)
{
	if (!b)
		return;
	for (int i = 0; b->raw && !b->strings && i < b->n_vocab; i++)
		free(b->raw[i]); /* in strings once loaded */
	free(b->raw);
	free(b->raw_len);
	free(b->added);
	free(b->is_added);
	for (int t = 0; t < 2; t++) {
		free(b->trie[t].map.keys), free(b->trie[t].map.rank), free(b->trie[t].map.merged);
		free(b->trie[t].tok);
	}
	free(b->vocab.keys);
	free(b->vocab.lens);
	free(b->vocab.vals);
	free(b->merges.keys);
	free(b->merges.rank);
	free(b->merges.merged);
	for (int i = 0; i < b->n_re; i++)
		pcre2_code_free(b->re[i]);
	cJSON_Delete(b->json);
	free(b->strings);
	free(b);
}

int bpe_vocab_size(const struct st_bpe *b) { return b->n_vocab; }

int bpe_token_id(const struct st_bpe *b, const char *content)
{
	for (int i = 0; i < b->n_added; i++)
		if (!strcmp(b->added[i].content, content))
			return (int)b->added[i].id;
	return -1;
}

int bpe_is_added(const struct st_bpe *b, int id)
{
	return id >= 0 && id < b->n_vocab && b->is_added[id];
}

const char *bpe_token_bytes(const struct st_bpe *b, uint32_t id, size_t *len)
{
	if (id >= (uint32_t)b->n_vocab || !b->raw[id])
		return NULL;
	*len = b->raw_len[id];
	return b->raw[id];
}

size_t bpe_max_token_len(const struct st_bpe *b)
{
	size_t m = 1;
	for (int i = 0; i < b->n_vocab; i++)
		if (b->raw[i] && b->raw_len[i] > m)
			m = b->raw_len[i];
	return m;
}
