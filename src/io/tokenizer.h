/* Tokenizers behind one interface: the byte-level tokenizer (ids 0..255 are
 * the bytes of UTF-8 text, 256 is <bos>, 257 is <eos>; vocab 258), and a
 * Hugging Face tokenizer.json with byte-level BPE (io/bpe.h). */
#ifndef ST_TOKENIZER_H
#define ST_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define ST_BYTE_VOCAB 258
#define ST_BYTE_BOS 256
#define ST_BYTE_EOS 257

struct st_bpe;

#define ST_MAX_END_IDS 8

struct st_tokenizer {
	char name[25];       /* recorded in shards: "byte", or "bpe-" + a hash of tokenizer.json */
	int vocab_size;
	int bos_id, eos_id;  /* -1 when the tokenizer has none */
	/* bos_id is tokenizer_config.json's bos_token (null: none), which
	 * transformers' tokenizer uses: config.json's bos_token_id does not
	 * replace it */
	int bos_from_tok_config;
	/* every end token a model's config.json lists (eos_token_id, a list in
	 * Llama 3.1 Instruct's: <|end_of_text|>, <|eom_id|>, <|eot_id|>) that is
	 * an added token; 0 of them: eos_id alone. sample stops at any. */
	int end_ids[ST_MAX_END_IDS], n_end;
	struct st_bpe *bpe;  /* NULL for the byte tokenizer */
};

void tokenizer_byte(struct st_tokenizer *tk);
/* "byte", a tokenizer.json, or a model directory holding one. */
int tokenizer_load(struct st_tokenizer *tk, const char *name_or_path);
/* The <bos> and <eos> a model directory's config.json names (bos_token_id,
 * eos_token_id), where they are added tokens of tk (an ordinary token is
 * warned and not used); tokenizer_load does this for the directory it is
 * given, sample for the --model directory whatever --tokenizer is. */
int tokenizer_model_ids(struct st_tokenizer *tk, const char *model_dir);
void tokenizer_free(struct st_tokenizer *tk);
/* The name shards record for the tokenizer.json at path ("bpe-" + a hash of
 * its bytes) into name; ST_FAIL (no message) when it cannot be read. */
int tokenizer_file_name(const char *path, char name[25]);
/* The most ids len bytes of text can become. */
static inline size_t tokenizer_max_ids(size_t len) { return 2 * len + 1; }
/* Encode len bytes of text into out (tokenizer_max_ids(len) ids); returns the
 * count, or ST_ENCODE_FAILED when memory ran out (an error was said). */
#define ST_ENCODE_FAILED ((size_t)-1)
size_t tokenizer_encode(const struct st_tokenizer *tk, uint32_t *out, const char *text,
			size_t len);
/* A text that comes in parts (a file read a window at a time): the ids of
 * the first *used bytes of text, those that no text after len can change,
 * so that the parts' ids joined are tokenizer_encode's of the whole text.
 * With last, text ends at len and all of it is encoded. *fresh: ~0u at the
 * text's start, then as this call leaves it, for the next part, which
 * starts at text + *used (the bytes past it given again, and more). A part
 * may encode nothing (*used 0): the next must then be longer. A UTF-8
 * character cut at len waits for the next part, so *used ends between
 * characters unless last. out needs
 * room for tokenizer_max_ids(len). Returns the count, or ST_ENCODE_FAILED. */
size_t tokenizer_encode_part(const struct st_tokenizer *tk, uint32_t *out, const char *text,
			     size_t len, int last, unsigned *fresh, size_t *used);
/* The text of one id into buf (at most cap bytes; a longer token is cut);
 * returns the bytes written (0 for the byte tokenizer's specials and for ids
 * outside the vocabulary). */
size_t tokenizer_decode_one(const struct st_tokenizer *tk, char *buf, size_t cap, uint32_t id);
/* The most bytes one id decodes to: a buffer of this size holds any token
 * whole (a vocabulary may hold tokens longer than any fixed buffer). */
size_t tokenizer_max_token_len(const struct st_tokenizer *tk);

#endif
