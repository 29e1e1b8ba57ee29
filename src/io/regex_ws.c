/* \s as Unicode's White_Space for PCRE2; see regex_ws.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/regex_ws.h"
#include "util/check.h"

/* White_Space's members in a class: \t-\r, U+0085 and \p{Z} (U+0020,
 * U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000).
 * PCRE2's \S is the complement of them and U+180E, so White_Space's
 * complement is \S with U+180E. */
#define WS_MEMBERS "\\t-\\r\\x{85}\\p{Z}"
#define NON_WS_MEMBERS "\\S\\x{180E}"

/* Whether the option group at p ("(?x)", "(?ix:", "(?^x)") turns on x:
 * only option letters between "(?" and ')' or ':', an x before any '-'. A
 * lookaround, a named group or a comment is no option group. */
static int option_group_sets_x(const char *p)
{
	int x = 0, off = 0;
	for (const char *c = p + 2; *c; c++) {
		if (*c == ')' || *c == ':')
			return x;
		if (*c == '-')
			off = 1;
		else if (*c == 'x')
			x |= !off;
		else if (!strchr("imnsJU^", *c))
			return 0;
	}
	return 0;
}

/* Whether the pattern sets extended mode anywhere: an option group outside
 * classes, escapes and \Q...\E (as the rewrite below scans them). */
static int sets_extended(const char *p)
{
	int in_class = 0, quoted = 0;
	for (size_t i = 0; p[i]; i++) {
		if (quoted) {
			quoted = !(p[i] == '\\' && p[i + 1] == 'E');
		} else if (p[i] == '\\' && p[i + 1]) {
			quoted = p[i + 1] == 'Q';
			i += p[i + 1] == 'c' && p[i + 2] ? 2 : 1;
		} else if (p[i] == '[' && !in_class) {
			in_class = 1;
			i += p[i + 1] == '^';
			i += p[i + 1] == ']';
		} else if (p[i] == ']' && in_class) {
			in_class = 0;
		} else if (!in_class && p[i] == '(' && p[i + 1] == '?' && option_group_sets_x(p + i)) {
			return 1;
		}
	}
	return 0;
}

/* A POSIX class name at p ("[:alpha:]", "[:^digit:]"): its length, else 0. */
static size_t posix_class(const char *p)
{
	if (p[0] != '[' || p[1] != ':')
		return 0;
	size_t k = 2 + (p[2] == '^');
	while ((p[k] >= 'a' && p[k] <= 'z'))
		k++;
	return p[k] == ':' && p[k + 1] == ']' && k > 2 ? k + 2 : 0;
}

char *regex_unicode_whitespace(const char *pattern)
{
	const size_t n = strlen(pattern);
	char *out = st_malloc(n * sizeof "[" NON_WS_MEMBERS "]" + 1), *o = out;
	if (!out || sets_extended(pattern)) {
		if (out)
			memcpy(out, pattern, n + 1);
		return out;
	}
	int in_class = 0, quoted = 0;
	for (size_t i = 0; i < n; i++) {
		const char c = pattern[i], next = pattern[i + 1];
		if (quoted) { /* \Q...\E: literal text */
			quoted = !(c == '\\' && next == 'E');
		} else if (c == '\\' && (next == 's' || next == 'S')) {
			const char *members = next == 's' ? WS_MEMBERS : NON_WS_MEMBERS;
			o += sprintf(o, in_class ? "%s" : "[%s]", members);
			i++;
			continue;
		} else if (c == '\\' && next) {
			/* an escape: its next character is not a class bracket, nor
			 * (\c) the next one's backslash */
			quoted = next == 'Q';
			const size_t len = next == 'c' && pattern[i + 2] ? 3 : 2;
			memcpy(o, pattern + i, len);
			o += len;
			i += len - 1;
			continue;
		} else if (c == '(' && !in_class && next == '?' && pattern[i + 2] == '#') {
			const char *end = strchr(pattern + i, ')'); /* (?#comment) */
			const size_t len = end ? (size_t)(end + 1 - (pattern + i)) : n - i;
			memcpy(o, pattern + i, len);
			o += len;
			i += len - 1;
			continue;
		} else if (c == '[' && !in_class) {
			in_class = 1;
			*o++ = c;
			if (next == '^')
				*o++ = pattern[++i];
			if (pattern[i + 1] == ']') /* first in a class: a literal ] */
				*o++ = pattern[++i];
			continue;
		} else if (c == '[' && in_class && posix_class(pattern + i)) {
			const size_t len = posix_class(pattern + i);
			memcpy(o, pattern + i, len);
			o += len;
			i += len - 1;
			continue;
		} else if (c == ']' && in_class) {
			in_class = 0;
		}
		*o++ = c;
	}
	*o = '\0';
	return out;
}
