/* Finding inf and NaN in fp32 arrays: the checks that keep a diverged or
 * damaged state out of checkpoints and out of a run (trainer/checkpoint.c,
 * model/hf.c). */
#ifndef ST_FINITE_H
#define ST_FINITE_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>

/* Index of the first inf or NaN among x[0..n), or -1. One vectorized pass
 * per 4096 values; only a chunk that has one is searched again. */
static inline long st_first_nonfinite(const float *x, size_t n)
{
	for (size_t i0 = 0; i0 < n; i0 += 4096) {
		const size_t i1 = n - i0 < 4096 ? n : i0 + 4096;
		int bad = 0;
		for (size_t i = i0; i < i1; i++) /* NaN compares false */
			bad |= !(fabsf(x[i]) <= FLT_MAX);
		if (bad)
			for (size_t i = i0; i < i1; i++)
				if (!(fabsf(x[i]) <= FLT_MAX))
					return (long)i;
	}
	return -1;
}

/* v as a JSON number in printf format fmt, or null where it is inf or NaN
 * (which JSON has no spelling for: printf's "inf" or "-nan" made
 * metrics.jsonl and eval --json unreadable). buf of n bytes is returned. */
static inline const char *st_json_num(char *buf, size_t n, const char *fmt, double v)
{
	if (!isfinite(v))
		return "null";
	snprintf(buf, n, fmt, v);
	return buf;
}

#endif
