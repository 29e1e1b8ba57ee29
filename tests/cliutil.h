/* Running the strata binary from tests: commands, captured output, temp dirs. */
#ifndef ST_CLIUTIL_H
#define ST_CLIUTIL_H

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* The CLI under test. Runs plan with a fixed hardware profile
 * (tests/data/profiles/ci.json), not a per-user cache, so the planner's
 * choices do not depend on the machine or on who ran before. */
static inline const char *cu_bin(void)
{
	setenv("STRATA_PROFILE", "tests/data/profiles/ci.json", 0);
	const char *b = getenv("STRATA_BIN");
	return b ? b : "build/strata";
}

/* Run a shell command (printf-style); output (stdout+stderr) into out (may be
 * NULL); returns the exit status, or 128+signal when killed. */
static inline int cu_run(char *out, size_t out_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static inline int cu_run(char *out, size_t out_len, const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
	FILE *p = popen(cmd, "r");
	cr_assert(p, "popen failed for %s", cmd);
	size_t n = 0;
	char tmp[4096];
	size_t got;
	while ((got = fread(tmp, 1, sizeof tmp, p)) > 0) {
		if (out && n + 1 < out_len) {
			size_t c = got < out_len - 1 - n ? got : out_len - 1 - n;
			memcpy(out + n, tmp, c);
			n += c;
		}
	}
	if (out)
		out[n] = '\0';
	int st = pclose(p);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return WEXITSTATUS(st);
}

/* Temporary directories made by cu_tmpdir, removed when the test process
 * exits (Criterion runs each test in its own process). Some hold hundreds of
 * MB (the offload tests' models and swap files): left behind, repeated runs
 * filled the build machine's disk. A directory with a file system still
 * mounted in it keeps that part (rm --one-file-system). */
static char cu_tmp_dirs[16][256];
static int cu_tmp_n;

static inline void cu_tmp_cleanup(void)
{
	for (int i = 0; i < cu_tmp_n; i++) {
		char cmd[320];
		snprintf(cmd, sizeof cmd, "rm -rf --one-file-system '%.255s'", cu_tmp_dirs[i]);
		if (system(cmd) != 0)
			fprintf(stderr, "note: could not remove %s\n", cu_tmp_dirs[i]);
	}
	cu_tmp_n = 0;
}

/* A fresh temporary directory, removed at exit (above). */
static inline void cu_tmpdir(char *buf, size_t n, const char *tag)
{
	snprintf(buf, n, "/tmp/strata-test-%s-XXXXXX", tag);
	cr_assert(mkdtemp(buf), "mkdtemp failed");
	if (cu_tmp_n == 0)
		atexit(cu_tmp_cleanup);
	if (cu_tmp_n < 16 && strlen(buf) < sizeof cu_tmp_dirs[0])
		strcpy(cu_tmp_dirs[cu_tmp_n++], buf);
}

/* Deterministic pseudo-English text of about `bytes` bytes. */
static inline void cu_write_text(const char *path, size_t bytes, unsigned seed)
{
	static const char *words[] = {"the", "and", "of", "to", "in", "a", "that", "he", "shall",
				      "unto", "for", "his", "lord", "they", "be", "is", "with",
				      "not", "all", "thou", "thy", "was", "god", "said", "which"};
	FILE *f = fopen(path, "w");
	cr_assert(f);
	size_t n = 0;
	unsigned s = seed;
	while (n < bytes) {
		s = s * 1103515245u + 12345u;
		const char *w = words[(s >> 16) % 25];
		n += (size_t)fprintf(f, "%s%s", w, (s >> 8) % 11 == 0 ? ".\n" : " ");
	}
	fclose(f);
}

/* A tiny model (2 layers, GQA, width 64) in dir/init and prepared synthetic
 * text in dir/data. */
static inline void cu_setup_run(const char *dir, const char *extra_init)
{
	static char log[1 << 14];
	char path[512];
	snprintf(path, sizeof path, "%s/text.txt", dir);
	cu_write_text(path, 200000, 1);
	int rc = cu_run(log, sizeof log, "%s prepare --input %s/text.txt --out %s/data", cu_bin(),
			dir, dir);
	cr_assert_eq(rc, 0, "prepare failed: %s", log);
	rc = cu_run(log, sizeof log,
		    "printf '{\"vocab_size\":258,\"hidden_size\":64,\"intermediate_size\":96,"
		    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
		    "\"max_position_embeddings\":128}' > %s/cfg.json && %s init --config %s/cfg.json --out %s/init %s",
		    dir, cu_bin(), dir, dir, extra_init);
	cr_assert_eq(rc, 0, "init failed: %s", log);
}

static inline int cu_files_equal(const char *a, const char *b)
{
	return cu_run(NULL, 0, "cmp -s %s %s", a, b) == 0;
}

/* A safetensors file read whole: its header as a string, without the
 * "strata_step" metadata pair (a checkpoint's step, in its weight files) or
 * the padding after the JSON, and where its data starts. NULL if unreadable. */
static inline char *cu_st_read(const char *path, char **header, size_t *data_at, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *b = NULL;
	long n = -1;
	if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 8 && fseek(f, 0, SEEK_SET) == 0)
		b = malloc((size_t)n);
	if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
		free(b);
		b = NULL;
	}
	if (f)
		fclose(f);
	uint64_t h = 0;
	if (b)
		memcpy(&h, b, 8);
	if (!b || h > (uint64_t)n - 8 || !(*header = strndup(b + 8, (size_t)h))) {
		free(b);
		return NULL;
	}
	char *close = strrchr(*header, '}');
	if (close)
		close[1] = '\0';
	char *k = strstr(*header, "\"strata_step\":\""), *e = k ? strchr(k + 15, '"') : NULL;
	if (e && e[1] == ',')
		memmove(k, e + 2, strlen(e + 2) + 1);
	*data_at = 8 + (size_t)h;
	*len = (size_t)n;
	return b;
}

/* The same tensors in two safetensors files: equal but for a strata_step
 * pair (and the header padding its length changes). */
static inline int cu_weights_equal(const char *a, const char *b)
{
	char *ha = NULL, *hb = NULL;
	size_t da = 0, db = 0, na = 0, nb = 0;
	char *x = cu_st_read(a, &ha, &da, &na), *y = cu_st_read(b, &hb, &db, &nb);
	const int same = x && y && !strcmp(ha, hb) && na - da == nb - db && !memcmp(x + da, y + db, na - da);
	free(x);
	free(y);
	free(x ? ha : NULL);
	free(y ? hb : NULL);
	return same;
}

/* Two checkpoint directories hold the same weights and optimizer state,
 * byte for byte (the weights' step aside); `what` says what was compared,
 * for the message. */
static inline void cu_expect_same_state(const char *ckpt_a, const char *ckpt_b, const char *what)
{
	const char *files[] = {"model.safetensors", "optimizer.safetensors"};
	char a[1024], b[1024];
	for (int i = 0; i < 2; i++) {
		snprintf(a, sizeof a, "%s/%s", ckpt_a, files[i]);
		snprintf(b, sizeof b, "%s/%s", ckpt_b, files[i]);
		cr_expect(i ? cu_files_equal(a, b) : cu_weights_equal(a, b), "%s: %s differs", what,
			  files[i]);
	}
}

/* Run a command (exec'd by sh, so the measured process is the command) and
 * return its peak resident set in bytes; *status gets its wait status. */
static inline size_t cu_peak_rss(const char *cmd, int *status)
{
	char full[8192];
	snprintf(full, sizeof full, "exec %s > /dev/null 2>&1", cmd);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", full, (char *)NULL);
		_exit(127);
	}
	struct rusage ru;
	cr_assert_eq(wait4(pid, status, 0, &ru), pid);
	return (size_t)ru.ru_maxrss * 1024;
}

#endif
