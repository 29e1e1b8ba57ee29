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
	if (errno == ERANGE || !isfinite(d))
		return ST_PARSE_RANGE;
	*out = d;
	return ST_PARSE_OK;
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
	/* decimal forms only: strtod would also take 0x10, inf and nan */
	if (!*s || s[strspn(s, "+-0123456789.eE")] != '\0')
		return ST_PARSE_NOT_INT;
	const double d = strtod(s, &end);
	if (end == s || *end)
		return ST_PARSE_NOT_INT;
	if (errno == ERANGE && fabs(d) > 1) /* overflow; underflow is a fraction */
		return ST_PARSE_RANGE;
	if (errno || d != floor(d))
		return ST_PARSE_NOT_INT;
	if (fabs(d) >= 9223372036854775808.0) /* 2^63: beyond long */
		return ST_PARSE_RANGE;
	*out = (long)d;
	return ST_PARSE_OK;
}
