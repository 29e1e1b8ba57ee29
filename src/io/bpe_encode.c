/* Byte-level BPE: encoding text into ids with the tables bpe.c loads; see
 * bpe.h. */
#include <stdlib.h>
#include <string.h>

#include "io/bpe.h"
#include "io/bpe_impl.h"
#include "io/tokenizer.h"
#include "util/check.h"

/* The longest token of t that text starts with (its index), or -1. *open:
 * whether the search ran into the text's end, so that more text could give
 * a longer token, or one where there is none. */
static int longest_added(const struct added_trie *t, const char *text, size_t len, int *open)
{
	int hit = -1;
	*open = 0;
	if (!len || !t->starts[(unsigned char)text[0]])
		return -1;
	uint32_t node = 0;
	for (size_t j = 0; j < len; j++) {
		const size_t slot = pmap_slot(&t->map, trie_key(node, text[j]));
		if (!t->map.keys[slot])
			return hit;
		node = t->map.merged[slot];
		if (t->tok[node] >= 0)
			hit = t->tok[node]; /* deeper: longer */
	}
	*open = 1;
	return hit;
}

/* Scratch for encoding one text: BPE symbols and their links, the merge
 * heap, the mapped piece, one match data per pre-tokenizer stage. */
struct merge_cand {
	uint32_t rank, pos, a, b; /* pair (a, b) starting at symbol pos */
};

/* Scratch space of one encode call, sized by the longest piece so far (not
 * by the text: a whole corpus file goes through one call). */
struct enc {
	uint32_t *sym;
	int32_t *nxt, *prv;
	struct merge_cand *heap;
	size_t heap_cap;
	char *mapped;
	size_t cap;  /* bytes of a piece the arrays hold */
	int failed;  /* out of memory: the call returns ST_ENCODE_FAILED */
	pcre2_match_data *md[ST_BPE_STAGES];
};

/* A text that may go on past its end (bpe_encode_part): the pieces that
 * more text cannot change are encoded, and where they end is said. */
struct part {
	int last;    /* the text ends here: everything is encoded */
	unsigned fresh; /* in: bit k, the text starts one of stage k's texts
			 * (split_from); out: the same for text + used */
	size_t used; /* out: the bytes encoded */
};

/* Room for a piece of n bytes; 0 (and e->failed) when memory runs out. */
static int enc_reserve(struct enc *e, size_t n)
{
	if (n + 2 <= e->cap)
		return 1;
	if (n > INT32_MAX - 2) { /* positions are int32 */
		e->failed = 1;
		return 0;
	}
	size_t cap = e->cap ? 2 * e->cap : 4096;
	if (cap < n + 2)
		cap = n + 2;
	void *p[5] = {realloc(e->sym, cap * sizeof *e->sym), NULL, NULL, NULL, NULL};
	if (p[0])
		e->sym = p[0];
	p[1] = p[0] ? realloc(e->nxt, cap * sizeof *e->nxt) : NULL;
	if (p[1])
		e->nxt = p[1];
	p[2] = p[1] ? realloc(e->prv, cap * sizeof *e->prv) : NULL;
	if (p[2])
		e->prv = p[2];
	p[3] = p[2] ? realloc(e->heap, 3 * cap * sizeof *e->heap) : NULL;
	if (p[3])
		e->heap = p[3];
	p[4] = p[3] ? realloc(e->mapped, 2 * cap) : NULL;
	if (!p[4]) {
		e->failed = 1;
		return 0;
	}
	e->mapped = p[4];
	e->cap = cap;
	e->heap_cap = 3 * cap;
	return 1;
}

static int cand_less(const struct merge_cand *x, const struct merge_cand *y)
{
	return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void heap_push(struct enc *e, size_t *n, struct merge_cand c)
{
	if (*n >= e->heap_cap)
		return; /* cannot happen: at most 3 candidates per symbol are pushed */
	size_t i = (*n)++;
	while (i && cand_less(&c, &e->heap[(i - 1) / 2])) {
		e->heap[i] = e->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	e->heap[i] = c;
}

static struct merge_cand heap_pop(struct enc *e, size_t *n)
{
	struct merge_cand top = e->heap[0], last = e->heap[--(*n)];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && cand_less(&e->heap[c + 1], &e->heap[c]))
			c++;
		if (!cand_less(&e->heap[c], &last))
			break;
		e->heap[i] = e->heap[c];
		i = c;
	}
	if (*n)
		e->heap[i] = last;
	return top;
}

/* The candidate merge of symbols at pos and its successor, if any. */
static void push_pair(const struct st_bpe *b, struct enc *e, size_t *hn, int32_t pos)
{
	if (pos < 0 || e->nxt[pos] < 0)
		return;
	const uint32_t a = e->sym[pos], c = e->sym[e->nxt[pos]];
	const size_t slot = pmap_slot(&b->merges, (((uint64_t)a << 32) | c) + 1);
	if (b->merges.keys[slot])
		heap_push(e, hn, (struct merge_cand){b->merges.rank[slot], (uint32_t)pos, a, c});
}

/* One pre-tokenized piece: bytes -> ids, appended at out; returns the count.
 * Merges go lowest rank first, leftmost on ties, as Hugging Face's BPE
 * does; a heap of candidate pairs over a linked list of symbols keeps long
 * pieces (a run of 100 KB of one character) at O(n log n). */
static size_t encode_piece(const struct st_bpe *b, uint32_t *out, const unsigned char *p, size_t n,
			   struct enc *e)
{
	if (!n || e->failed || !enc_reserve(e, n))
		return 0;
	if (b->ignore_merges) { /* a piece that is a token stays one */
		size_t k = 0;
		for (size_t i = 0; i < n; i++) {
			memcpy(e->mapped + k, b->byte_char[p[i]], (size_t)b->byte_char_len[p[i]]);
			k += (size_t)b->byte_char_len[p[i]];
		}
		int id = smap_get(&b->vocab, e->mapped, k);
		if (id >= 0) {
			out[0] = (uint32_t)id;
			return 1;
		}
	}
	for (size_t i = 0; i < n; i++) {
		e->sym[i] = (uint32_t)b->byte_id[p[i]];
		e->prv[i] = (int32_t)i - 1;
		e->nxt[i] = i + 1 < n ? (int32_t)i + 1 : -1;
	}
	size_t hn = 0;
	for (size_t i = 0; i + 1 < n; i++)
		push_pair(b, e, &hn, (int32_t)i);
	while (hn) {
		struct merge_cand c = heap_pop(e, &hn);
		const int32_t l = (int32_t)c.pos, r = e->nxt[l];
		/* stale: the left symbol merged away (its slot is reused only by
		 * itself), or either side changed since the candidate was pushed */
		if (r < 0 || e->sym[l] != c.a || e->sym[r] != c.b || e->prv[l] == -2)
			continue;
		const size_t slot = pmap_slot(&b->merges, (((uint64_t)c.a << 32) | c.b) + 1);
		e->sym[l] = b->merges.merged[slot];
		e->nxt[l] = e->nxt[r];
		if (e->nxt[r] >= 0)
			e->prv[e->nxt[r]] = l;
		e->prv[r] = -2; /* gone */
		e->nxt[r] = -1;
		push_pair(b, e, &hn, e->prv[l]);
		push_pair(b, e, &hn, l);
	}
	size_t m = 0;
	for (int32_t i = 0; i >= 0; i = e->nxt[i])
		out[m++] = e->sym[i];
	return m;
}

/* Text through pre-tokenizer stages level.. (each an Isolated split: the
 * matches and the gaps between them are pieces), then each piece through
 * BPE. ByteLevel's prefix space goes on the pieces that reach its stage.
 *
 * With p not last, text may go on past len. The regex then runs with
 * PCRE2_PARTIAL_HARD, which returns a match only when finding it looked at
 * nothing past len (else PCRE2_ERROR_PARTIAL, at the first place a match
 * might start), so each match returned is the one the whole text gives,
 * and the gap before it is whole. The last gap goes on at least to where
 * the partial match starts (to len when none can): what of it is there goes
 * down a stage the same way, and p->used says how far the pieces reach.
 * p->fresh, bit k: the text given to stage k starts one of its texts (a
 * piece of stage k - 1; for stage 0, a run between added tokens), so that
 * it takes the prefix space where that is stage k's; not so for a text
 * that goes on from an earlier part, last or not. Without p the text is
 * whole and starts at every stage. */
static size_t split_from(const struct st_bpe *b, uint32_t *out, const char *text, size_t len,
			 int level, struct enc *e, struct part *p)
{
	const int last = !p || p->last;
	if (p)
		p->used = last ? len : 0;
	if (!len || e->failed)
		return 0;
	char *prefixed = NULL;
	size_t shift = 0; /* the prefix space's byte */
	if (level == b->bl_stage && b->add_prefix_space && text[0] != ' ' &&
	    (!p || (p->fresh >> level & 1))) {
		prefixed = malloc(len + 1);
		if (!prefixed) {
			e->failed = 1;
			return 0;
		}
		prefixed[0] = ' ';
		memcpy(prefixed + 1, text, len);
		text = prefixed;
		len++;
		shift = 1;
	}
	size_t n = 0;
	if (level >= b->n_re || level >= ST_BPE_STAGES) { /* n_re < ST_BPE_STAGES: for gcc */
		/* one piece: whole only at the text's end */
		n = last ? encode_piece(b, out, (const unsigned char *)text, len, e) : 0;
		free(prefixed);
		return n;
	}
	size_t pos = 0, prev = 0;
	/* a text that goes on from an earlier part does not start a line (^) */
	const uint32_t opts = last ? 0 : PCRE2_PARTIAL_HARD;
	const uint32_t bol = p && !(p->fresh >> level & 1) ? PCRE2_NOTBOL : 0;
	/* A gap at the text's start may go on from an earlier part (p->fresh
	 * says where); every other piece, a match included, is a new one */
	struct part first_gap = {.last = 1, .fresh = p ? p->fresh : ~0u};
	size_t gap_end = len; /* not last: where the open gap is known to reach */
	int open = 0;
	while (pos < len && !e->failed) {
		int rc = pcre2_match(b->re[level], (PCRE2_SPTR)text, len, pos, opts | bol, e->md[level],
				     NULL);
		if (!last && rc < 0) {
			/* PARTIAL: a match may start at ovector[0]; NOMATCH: none
			 * before len. An error (a match limit) is met again at the
			 * same place with more text, where the whole text's rest is
			 * one gap: nothing past prev is taken until the last part. */
			gap_end = rc == PCRE2_ERROR_PARTIAL ? pcre2_get_ovector_pointer(e->md[level])[0]
				  : rc == PCRE2_ERROR_NOMATCH ? len
							      : prev;
			open = 1;
			break;
		}
		if (rc < 0) {
			if (rc != PCRE2_ERROR_NOMATCH) /* a match limit: say so, keep the rest whole */
				st_log_warn("tokenizer: pre-tokenizer regex failed (PCRE2 error %d) on a "
					    "%zu-byte piece; it is encoded without further splitting", rc, len);
			break; /* no more matches: the rest is a gap */
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md[level]);
		size_t s = ov[0], end = ov[1];
		if (s > prev)
			n += split_from(b, out + n, text + prev, s - prev, level + 1, e,
					prev ? NULL : &first_gap);
		if (end > s)
			n += split_from(b, out + n, text + s, end - s, level + 1, e, NULL);
		prev = end;
		if (end == s) { /* an empty match: step over one character */
			pos = end + 1;
			while (pos < len && ((unsigned char)text[pos] & 0xc0) == 0x80)
				pos++;
		} else {
			pos = end;
		}
	}
	/* not last, the loop ended before len (an empty match stepped past the
	 * last character): the gap from prev goes on */
	open |= !last && prev < len;
	if (open) {
		/* the gap's first gap_end - prev bytes, down a stage: a new
		 * piece of this stage there if any came before it */
		const unsigned above = ~0u << (level + 1);
		struct part sub = {.fresh = prev ? p->fresh | above : p->fresh};
		n += split_from(b, out + n, text + prev, gap_end > prev ? gap_end - prev : 0, level + 1,
				e, &sub);
		const size_t done = prev + sub.used; /* bytes of text, prefix included */
		if (done <= shift) { /* nothing, or the prefix space alone: no start */
			n = 0;
		} else {
			p->used = done - shift;
			p->fresh = (p->fresh & ~(~0u << level)) | (sub.fresh & above);
		}
		free(prefixed);
		return n;
	}
	if (prev < len)
		n += split_from(b, out + n, text + prev, len - prev, level + 1, e,
				prev ? NULL : &first_gap);
	if (p && !last) { /* every match whole, to len */
		p->used = len - shift;
		p->fresh = (p->fresh & ~(~0u << level)) | (~0u << (level + 1));
	}
	free(prefixed);
	return n;
}

/* Added tokens first, leftmost and then longest, as the tokenizers library
 * cuts them: those of trie t, then in the text between them those of the
 * next trie; what is left goes through the pre-tokenizer and BPE. For a
 * text that may go on (p->last 0), the scan stops where a token could run
 * past the end: the run of text before it goes on as not last either, and
 * p->used says how much was encoded. */
static size_t encode_added(const struct st_bpe *b, int t, uint32_t *out, const char *text,
			   size_t len, struct enc *e, struct part *p)
{
	if (t == 2)
		return split_from(b, out, text, len, 0, e, p);
	size_t n = 0, start = 0, end = len;
	unsigned fresh = p->fresh; /* the run from start: the text's own start */
	for (size_t i = 0; i < len;) {
		int open;
		const int hit = longest_added(&b->trie[t], text + i, len - i, &open);
		if (open && !p->last) {
			end = i;
			break;
		}
		if (hit < 0) {
			i++;
			continue;
		}
		struct part whole = {.last = 1, .fresh = fresh};
		n += encode_added(b, t + 1, out + n, text + start, i - start, e, &whole);
		out[n++] = b->added[hit].id;
		i += b->added[hit].len;
		start = i;
		fresh = ~0u; /* a run after an added token starts at every stage */
	}
	struct part rest = {.last = p->last && end == len, .fresh = fresh};
	n += encode_added(b, t + 1, out + n, text + start, end - start, e, &rest);
	p->used = start + rest.used;
	p->fresh = rest.fresh;
	return n;
}

size_t bpe_encode_part(const struct st_bpe *b, uint32_t *out, const char *text, size_t len,
		       int last, unsigned *fresh, size_t *used)
{
	struct enc e = {0};
	int ok = 1;
	for (int i = 0; i < b->n_re && ok; i++)
		ok = (e.md[i] = pcre2_match_data_create_from_pattern(b->re[i], NULL)) != NULL;
	e.failed = !ok;
	struct part p = {.last = last, .fresh = *fresh};
	/* a regex that looks behind a match's start would see the part's start
	 * as the text's: such a text is encoded whole, at its last part */
	size_t n = ok && (last || !b->looks_back) ? encode_added(b, 0, out, text, len, &e, &p) : 0;
	if (e.failed) {
		ST_ERROR("free some memory, or split the text into smaller files",
			 "tokenizer: out of memory encoding %zu bytes of text", len);
		n = ST_ENCODE_FAILED;
	}
	*used = p.used;
	*fresh = p.fresh;
	free(e.sym);
	free(e.nxt);
	free(e.prv);
	free(e.heap);
	free(e.mapped);
	for (int i = 0; i < b->n_re; i++)
		if (e.md[i])
			pcre2_match_data_free(e.md[i]);
	return n;
}

size_t bpe_encode(const struct st_bpe *b, uint32_t *out, const char *text, size_t len)
{
	unsigned fresh = ~0u;
	size_t used;
	return bpe_encode_part(b, out, text, len, 1, &fresh, &used);
}
