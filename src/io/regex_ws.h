/* Pre-tokenizer regexes as the tokenizers library reads them: its engine
 * (Oniguruma) takes \s as Unicode's White_Space. PCRE2's \s under
 * PCRE2_UCP is \p{Z}, \h and \v, and its \h keeps U+180E, which Unicode
 * 6.3 made a format character: "\u180e's" was cut before the apostrophe,
 * where the library cuts after it. */
#ifndef STRATA_REGEX_WS_H
#define STRATA_REGEX_WS_H

/* pattern, for PCRE2_UCP, with \s meaning White_Space and \S its
 * complement, inside character classes and out; malloc'd, NULL when out of
 * memory. A pattern that turns on extended mode ((?x...)), whose comments
 * this does not follow, is returned unchanged (copied). */
char *regex_unicode_whitespace(const char *pattern);

#endif
