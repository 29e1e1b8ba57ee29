/* Running the strata binary from tests: commands, captured output, temp dirs. */
#ifndef ST_CLIUTIL_H
#define ST_CLIUTIL_H

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

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

/* Two checkpoint directories hold the same weights and optimizer state,
 * byte for byte; `what` says what was compared, for the message. */
static inline void cu_expect_same_state(const char *ckpt_a, const char *ckpt_b, const char *what)
{
	const char *files[] = {"model.safetensors", "optimizer.safetensors"};
	char a[1024], b[1024];
	for (int i = 0; i < 2; i++) {
		snprintf(a, sizeof a, "%s/%s", ckpt_a, files[i]);
		snprintf(b, sizeof b, "%s/%s", ckpt_b, files[i]);
		cr_expect(cu_files_equal(a, b), "%s: %s differs", what, files[i]);
	}
}

#endif
