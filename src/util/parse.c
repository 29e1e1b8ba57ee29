/* See parse.h. */
#include "util/parse.h"

#include <errno.h>
#include <math.h>
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
