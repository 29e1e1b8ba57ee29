/* Error reporting and checked calls.
 *
 * Library code never exits: a failing call prints one message naming what went
 * wrong, where (file:line), and what the user can do, then returns ST_FAIL up
 * to the CLI, which decides the exit status. The macros keep that pattern to
 * one line at each call site. */
#ifndef ST_CHECK_H
#define ST_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define ST_OK 0
#define ST_FAIL (-1)

void st_log_error(const char *file, int line, const char *hint, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void st_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Errors of this thread are not printed while muted (> 0): the planner tries
 * candidate plans whose failures are expected. Returns the previous value. */
int st_log_mute(int muted);
/* The message of this thread's last error, printed or muted ("" if none):
 * for a caller that goes on without the failed step and says why. */
const char *st_log_last_error(void);
void st_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A command-line error: an unknown option, an option without its value, a
 * value that is not a number or out of its range, options missing or that
 * cannot go together (from flags, a --config file or a run's saved options).
 * Said as st_log_error says an error; when it is the first error said in
 * the process, the CLI exits 2, the status a shell tool gives a usage error,
 * where every other failure exits 1 (st_log_exit_status). */
void st_log_usage_error(const char *file, int line, const char *hint, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The failing exit status: 2 when the first error said was a usage error. */
int st_log_exit_status(void);

/* Report an error with a hint for the user (hint may be NULL). */
#define ST_ERROR(hint, ...) st_log_error(__FILE__, __LINE__, (hint), __VA_ARGS__)
#define ST_USAGE_ERROR(hint, ...) st_log_usage_error(__FILE__, __LINE__, (hint), __VA_ARGS__)

/* If cond is false: report (with report, ST_ERROR or ST_USAGE_ERROR) and
 * return ST_FAIL from the enclosing function. */
#define ST_CHECK_AS(report, cond, hint, ...)                                               \
	do {                                                                               \
		if (!(cond)) {                                                             \
			report((hint), __VA_ARGS__);                                       \
			return ST_FAIL;                                                    \
		}                                                                          \
	} while (0)
#define ST_CHECK(cond, hint, ...) ST_CHECK_AS(ST_ERROR, cond, hint, __VA_ARGS__)
/* ST_CHECK for a command-line error (st_log_usage_error). */
#define ST_CHECK_USAGE(cond, hint, ...) ST_CHECK_AS(ST_USAGE_ERROR, cond, hint, __VA_ARGS__)

/* Propagate a failure from a callee that already reported it. */
#define ST_TRY(expr)                                                                       \
	do {                                                                               \
		if ((expr) != ST_OK)                                                       \
			return ST_FAIL;                                                    \
	} while (0)

/* Allocation that reports the size asked for; returns NULL on failure. */
void *st_malloc_(size_t bytes, const char *file, int line);
void *st_calloc_(size_t n, size_t size, const char *file, int line);
/* 64-byte aligned (cache line / AVX-512); free with free(). */
void *st_aligned_alloc_(size_t bytes, const char *file, int line);
#define st_malloc(b) st_malloc_((b), __FILE__, __LINE__)
#define st_calloc(n, s) st_calloc_((n), (s), __FILE__, __LINE__)
#define st_aligned_alloc(b) st_aligned_alloc_((b), __FILE__, __LINE__)

#endif
