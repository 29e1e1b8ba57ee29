/* Logging and checked allocation: the only place strata writes diagnostics. */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/check.h"

static _Thread_local int muted;
/* The last error of this thread, said or muted: a caller that muted a
 * step it can do without (caching the profile) still names the cause. */
static _Thread_local char last[512];

int st_log_mute(int m)
{
	int old = muted;
	muted = m;
	return old;
}

const char *st_log_last_error(void) { return last; }

/* The kind of the first error said in the process: 0 none yet, 1 any
 * error, 2 a usage error. Muted errors do not count: a muted check that
 * fails is a question asked, not the command's failure. */
static int first_said;

static void say(int usage, const char *file, int line, const char *hint, const char *fmt,
		va_list ap)
{
	va_list again;
	va_copy(again, ap);
	vsnprintf(last, sizeof last, fmt, ap);
	if (!muted) {
		int none = 0;
		__atomic_compare_exchange_n(&first_said, &none, usage ? 2 : 1, 0, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
		fputs("strata: error: ", stderr);
		vfprintf(stderr, fmt, again);
		fprintf(stderr, " [%s:%d]\n", file, line);
		if (hint && *hint)
			fprintf(stderr, "  hint: %s\n", hint);
	}
	va_end(again);
}

void st_log_error(const char *file, int line, const char *hint, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	say(0, file, line, hint, fmt, ap);
	va_end(ap);
}

void st_log_usage_error(const char *file, int line, const char *hint, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	say(1, file, line, hint, fmt, ap);
	va_end(ap);
}

int st_log_exit_status(void) { return __atomic_load_n(&first_said, __ATOMIC_RELAXED) == 2 ? 2 : 1; }

void st_log_warn(const char *fmt, ...)
{
	va_list ap;
	fputs("strata: warning: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void st_log_info(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void *st_malloc_(size_t bytes, const char *file, int line)
{
	void *p = malloc(bytes ? bytes : 1);
	if (!p)
		st_log_error(file, line, "lower the batch size or model size, or add memory",
			     "out of memory allocating %zu bytes", bytes);
	return p;
}

void *st_calloc_(size_t n, size_t size, const char *file, int line)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		st_log_error(file, line, "lower the batch size or model size, or add memory",
			     "out of memory allocating %zu x %zu bytes", n, size);
	return p;
}

void *st_aligned_alloc_(size_t bytes, const char *file, int line)
{
	void *p = NULL;
	size_t rounded = (bytes + 63) & ~(size_t)63;
	if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) {
		st_log_error(file, line, "lower the batch size or model size, or add memory",
			     "out of memory allocating %zu aligned bytes", bytes);
		return NULL;
	}
	return p;
}
