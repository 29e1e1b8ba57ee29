/* Numbers from option values, the one rule every option reader uses
 * (cli/args.c for the commands, trainer/options.c for train's options and
 * --config files). */
#ifndef ST_PARSE_H
#define ST_PARSE_H

#include <stddef.h>

enum st_parse { ST_PARSE_OK, ST_PARSE_NOT_INT, ST_PARSE_RANGE };

/* 2^53: a double (a JSON number, to its readers) holds every whole number
 * up to it, and not every one past it */
#define ST_EXACT_INT_MAX 9007199254740992.0

/* A decimal whole number: digits with an optional sign, read exactly over
 * the whole range of long (strtoll), or a decimal form with a point or an
 * exponent that is whole (1e6, 2.5e3), read through a double. Anything else
 * (0x10, inf, 1.5, blanks) is ST_PARSE_NOT_INT; a value beyond long is
 * ST_PARSE_RANGE. */
enum st_parse st_parse_whole(const char *s, long *out);

/* A decimal real (digits, a point, an exponent; not 0x1p-3, inf or nan):
 * ST_PARSE_NOT_INT when it is not one, ST_PARSE_RANGE when a double cannot
 * hold it (an overflow, or an underflow to 0 or below the smallest normal;
 * *out then holds what strtod made of it). */
enum st_parse st_parse_real(const char *s, double *out);

/* Whether `typed` is probably a slip for `name`: at most one edit (a letter
 * added, dropped, changed, or two neighbours swapped) for names of up to 5
 * letters, two for longer ones, '_' counting as '-'. For "did you mean"
 * hints on unknown options. */
int st_is_near(const char *typed, const char *name);
/* v in the fewest digits that read back as it (-0.1, not
 * -0.10000000000000001), into buf, for messages; buf returned. */
const char *st_shortest(char *buf, size_t n, double v);

#endif
