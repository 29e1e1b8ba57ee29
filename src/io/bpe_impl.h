/* The byte-level BPE tokenizer's tables, shared by its loader (bpe.c) and
 * its encoder (bpe_encode.c); private to them. See bpe.h. */
#ifndef ST_BPE_IMPL_H
#define ST_BPE_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cJSON.h>
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---- hash tables ---------------------------------------------------------- */

static inline uint64_t fnv(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
	return h;
}

/* string -> id, open addressing (keys are the token strings as in the file) */
struct str_map {
	const char **keys;
	size_t *lens;
	uint32_t *vals;
	size_t cap;
};

static inline int smap_get(const struct str_map *m, const char *k, size_t n)
{
	for (size_t i = fnv(k, n) & (m->cap - 1); m->keys[i]; i = (i + 1) & (m->cap - 1))
		if (m->lens[i] == n && !memcmp(m->keys[i], k, n))
			return (int)m->vals[i];
	return -1;
}

/* (left id, right id) -> (rank, merged id) */
struct pair_map {
	uint64_t *keys; /* (a << 32 | b) + 1; 0 = empty */
	uint32_t *rank, *merged;
	size_t cap;
};

static inline size_t pmap_slot(const struct pair_map *m, uint64_t key)
{
	size_t i = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & (m->cap - 1);
	while (m->keys[i] && m->keys[i] != key)
		i = (i + 1) & (m->cap - 1);
	return i;
}

/* A key of an added-token trie (struct added_trie): the child of node by byte. */
static inline uint64_t trie_key(uint32_t node, char byte)
{
	return ((uint64_t)node << 8 | (unsigned char)byte) + 1;
}

/* ---- the tokenizer -------------------------------------------------------- */

#define ST_BPE_STAGES 4

struct added {
	const char *content;
	size_t len;
	uint32_t id;
	int normalized; /* matched in the text between the others (bpe_encode) */
};

/* Added tokens as a byte trie, for the longest one at a text position in
 * as many steps as it has bytes (a scan of every token with the text's
 * byte took minutes with 10^4 tokens sharing one). Node 0 is the root. */
struct added_trie {
	struct pair_map map;        /* (node << 8 | byte) + 1 -> child node, in .merged */
	int32_t *tok;               /* per node: the added token ending there (index), or -1 */
	unsigned char starts[256];  /* 1 where some token of the trie starts with that byte */
};

struct st_bpe {
	cJSON *json;             /* the file, while it loads (NULL after) */
	char *strings;           /* then the vocabulary's and the added tokens' texts,
				  * which vocab's keys and added's contents point into */
	int n_vocab;
	char **raw;              /* per id: its bytes (decoded alphabet, or an added token's text) */
	size_t *raw_len;
	struct str_map vocab;
	struct pair_map merges;
	struct added *added;
	int n_added;
	unsigned char *is_added; /* per id: 1 for an added token's */
	/* as the tokenizers library matches them: those with normalized false
	 * first, then those with normalized true in the text between */
	struct added_trie trie[2];
	int byte_id[256];        /* id of each byte's single-character token */
	char byte_char[256][3];  /* GPT-2's alphabet: each byte as a printable character (UTF-8) */
	int byte_char_len[256];
	int ignore_merges, add_prefix_space;
	/* pre-tokenizer stages, each an Isolated split by a regex (Split, Digits,
	 * ByteLevel's own regex), applied in order; ByteLevel's prefix space is
	 * added to the pieces that reach stage bl_stage */
	pcre2_code *re[ST_BPE_STAGES];
	int n_re, bl_stage;
	/* a stage's regex looks behind where a match starts (a lookbehind,
	 * \b, \A): a text in parts cannot be cut (bpe_encode_part) */
	int looks_back;
};

#endif
