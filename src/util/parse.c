/* See parse.h. */
#include "util/parse.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum st_parse st_parse_real(const char *s, double *out)
{
	if (!*s || s[strspn(s, "+-0123456789.eE")] != '\0')
		return ST_PARSE_NOT_INT;
	char *end;
	errno = 0;
	const double d = strtod(s, &end);
	if (end == s || *end)
		return ST_PARSE_NOT_INT;
	*out = d; /* also when out of range: what strtod made of it */
	return errno == ERANGE || !isfinite(d) ? ST_PARSE_RANGE : ST_PARSE_OK;
}

enum st_parse st_parse_whole(const char *s, long *out)
{
	const char *digits = s + (*s == '+' || *s == '-');
	char *end;
	errno = 0;
	if (*digits && digits[strspn(digits, "0123456789")] == '\0') {
		/* digits alone: exact (through a double, 2^53 + 1 would read as 2^53) */
		const long v = strtol(s, &end, 10);
		if (errno == ERANGE)
			return ST_PARSE_RANGE;
		*out = v;
		return ST_PARSE_OK;
	}
	/* a decimal form: 1e6, 2.5e3 */
	double d = 0;
	const enum st_parse r = st_parse_real(s, &d);
	if (r == ST_PARSE_RANGE) /* an overflow; an underflow is a fraction */
		return fabs(d) > 1 ? ST_PARSE_RANGE : ST_PARSE_NOT_INT;
	if (r != ST_PARSE_OK || d != floor(d))
		return ST_PARSE_NOT_INT;
	if (fabs(d) >= 9223372036854775808.0) /* 2^63: beyond long */
		return ST_PARSE_RANGE;
	*out = (long)d;
	return ST_PARSE_OK;
}

/* The optimal string alignment distance (Levenshtein plus swaps of
 * neighbours), '_' and '-' alike; option names are short, so beyond 63
 * letters a name is simply not near. */
int st_is_near(const char *typed, const char *name)
{
	const size_t n = strlen(typed), m = strlen(name);
	if (n > 63 || m > 63 || n == 0)
		return 0;
	int d[64][64];
	for (size_t i = 0; i <= n; i++)
		d[i][0] = (int)i;
	for (size_t j = 0; j <= m; j++)
		d[0][j] = (int)j;
	for (size_t i = 1; i <= n; i++)
		for (size_t j = 1; j <= m; j++) {
			const char a = typed[i - 1] == '_' ? '-' : typed[i - 1];
			const char b = name[j - 1];
			int v = d[i - 1][j - 1] + (a != b);
			if (d[i - 1][j] + 1 < v)
				v = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a == name[j - 2] &&
			    (typed[i - 2] == '_' ? '-' : typed[i - 2]) == b && d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	return d[n][m] <= (m <= 5 ? 1 : 2);
}

const char *st_shortest(char *buf, size_t n, double v)
{
	for (int p = 1; p <= 17; p++) {
		snprintf(buf, n, "%.*g", p, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	return buf;
}
