/* UTF-8 validity, for text strata writes into JSON or shards (GGUF import,
 * prepare) and for tests; and bytes shown in messages. */
#ifndef ST_UTF8_H
#define ST_UTF8_H

#include <stddef.h>

/* The length of the well-formed UTF-8 sequence at s (at most n bytes), or 0
 * (no overlong forms, surrogates or code points past U+10FFFF). */
size_t st_utf8_len(const unsigned char *s, size_t n);
/* The offset of the first byte of s[0, n) that is not well-formed UTF-8, or
 * -1 when all of it is. */
long st_utf8_bad(const char *s, size_t n);
/* Bytes at the end of s[0, n) that begin a UTF-8 character without ending
 * it (a lead byte and fewer continuation bytes than it announces): 0 to 3. */
size_t st_utf8_incomplete_tail(const unsigned char *s, size_t n);
/* text[0, len) as printable ASCII for a message, into out (n bytes, cut
 * short to fit): other bytes, a NUL among them, as \xNN (a token of a
 * byte-level vocabulary may be part of a UTF-8 character). */
void st_printable(char *out, size_t n, const char *text, size_t len);

#endif
