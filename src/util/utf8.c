/* UTF-8 validity; see utf8.h. */
#include <stdio.h>

#include "util/utf8.h"

/* The length of the well-formed UTF-8 sequence at s (at most n bytes), or 0. */
size_t st_utf8_len(const unsigned char *s, size_t n)
{
	const unsigned char c = s[0];
	size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
	if (!k || k > n || (k == 2 && c < 0xc2) || (k == 4 && c > 0xf4))
		return 0;
	for (size_t i = 1; i < k; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if (k == 3) { /* no overlong forms, no surrogates */
		const unsigned cp = (c & 0x0fu) << 12 | (s[1] & 0x3fu) << 6 | (s[2] & 0x3fu);
		if (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
	}
	if (k == 4) {
		const unsigned cp = (c & 0x07u) << 18 | (s[1] & 0x3fu) << 12;
		if (cp < 0x10000 || cp > 0x10ffff)
			return 0;
	}
	return k;
}

long st_utf8_bad(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		const size_t k = st_utf8_len((const unsigned char *)s + i, n - i);
		if (!k)
			return (long)i;
		i += k;
	}
	return -1;
}

void st_printable(char *out, size_t n, const char *text, size_t len)
{
	size_t o = 0;
	for (size_t i = 0; i < len && o + 5 < n; i++) {
		const unsigned char c = (unsigned char)text[i];
		if (c >= 0x20 && c < 0x7f && c != '\\')
			out[o++] = (char)c;
		else
			o += (size_t)snprintf(out + o, n - o, "\\x%02x", c);
	}
	out[o] = '\0';
}

size_t st_utf8_incomplete_tail(const unsigned char *s, size_t n)
{
	for (size_t k = 1; k <= 3 && k <= n; k++) {
		const unsigned char c = s[n - k];
		if ((c & 0xc0) == 0x80)
			continue; /* a continuation byte: look further back */
		const size_t want = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 1;
		return c < 0xf5 && want > k ? k : 0;
	}
	return 0;
}
