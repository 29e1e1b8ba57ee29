/* Offload directories; see offdirs.h. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "io/fsutil.h"
#include "store/io.h"
#include "store/store.h"
#include "trainer/offdirs.h"
#include "util/check.h"

#define MAX_DIRS 64 /* as the trainer splits --offload-dir */

/* path absolute and lexically clean (no "//", ".", "..", trailing "/"),
 * as fs_mkdir_p walks it: 0 when too long. */
static int normalize(char *out, size_t n, const char *path)
{
	char abs[PATH_MAX];
	if (snprintf(abs, sizeof abs, "%s", path) >= (int)sizeof abs)
		return 0;
	const int old = st_log_mute(1);
	const int rc = fs_absolute(abs, sizeof abs);
	st_log_mute(old);
	if (rc != ST_OK)
		return 0;
	size_t len = 0;
	out[0] = '\0';
	for (char *save = NULL, *c = strtok_r(abs, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (!strcmp(c, "."))
			continue;
		if (!strcmp(c, "..")) {
			while (len > 0 && out[len - 1] != '/')
				len--;
			if (len > 0)
				len--;
			out[len] = '\0';
			continue;
		}
		const int w = snprintf(out + len, n - len, "/%s", c);
		if (w < 0 || (size_t)w >= n - len)
			return 0;
		len += (size_t)w;
	}
	if (!len)
		snprintf(out, n, "/");
	return 1;
}

/* Whether train would create dir: it makes --out with its parents. */
static int made_by_train(const char *dir, const char *out)
{
	char d[PATH_MAX], o[PATH_MAX];
	if (!out || !*out || !normalize(d, sizeof d, dir) || !normalize(o, sizeof o, out))
		return 0;
	const size_t len = strlen(d);
	return !strncmp(o, d, len) && (o[len] == '\0' || o[len] == '/' || len == 1);
}

/* dir where it exists, else its nearest existing ancestor (where train
 * would make it), into buf. */
static const char *existing_part(const char *dir, char *buf, size_t n)
{
	if (fs_exists(dir) || !normalize(buf, n, dir)) {
		snprintf(buf, n, "%s", dir);
		return buf;
	}
	while (!fs_exists(buf) && strcmp(buf, "/")) {
		char *slash = strrchr(buf, '/');
		if (slash == buf)
			slash[1] = '\0';
		else
			*slash = '\0';
	}
	return buf;
}

int offdirs_check_exist(const char *const *dirs, int n, const char *out)
{
	/* each directory exists, needed or not: a mistyped one would show only
	 * on a later resume with smaller budgets */
	for (int i = 0; i < n; i++)
		if (fs_exists(dirs[i]) || !made_by_train(dirs[i], out))
			ST_TRY(io_check_dir(dirs[i], 0));
	/* The same directory twice is refused: it gains nothing, and each
	 * stripe's free-space check counted the same space. Two on one file
	 * system are allowed, with a warning: striping over them gains no
	 * bandwidth. */
	int warned = 0;
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++) {
			struct stat a, b;
			char x[PATH_MAX], y[PATH_MAX];
			if (stat(dirs[i], &a) != 0 || stat(dirs[j], &b) != 0) {
				/* ones train would create: the same path twice */
				ST_CHECK_USAGE(!normalize(x, sizeof x, dirs[i]) || !normalize(y, sizeof y, dirs[j]) ||
						 strcmp(x, y),
					 "give each directory once (one per SSD)",
					 "--offload-dir %s and %s are the same directory", dirs[i], dirs[j]);
				continue;
			}
			ST_CHECK_USAGE(a.st_dev != b.st_dev || a.st_ino != b.st_ino,
				 "give each directory once (one per SSD)",
				 "--offload-dir %s and %s are the same directory", dirs[i], dirs[j]);
			if (a.st_dev == b.st_dev && !warned++)
				st_log_warn("--offload-dir %s and %s are on the same file system: "
					    "striping over them gains no bandwidth (one directory per "
					    "SSD)",
					    dirs[i], dirs[j]);
		}
	return ST_OK;
}

int offdirs_check_room(const char *const *dirs, int n, const struct offdirs_need *need)
{
	if (!need->disk || n < 1)
		return ST_OK;
	ST_CHECK(n <= MAX_DIRS, NULL, "internal: %d offload directories", n);
	char b1[32], b2[32], b3[32], b4[32];
	/* the room the disk tier reserves: whole stripes (io_open), so each
	 * directory's file takes the same whole blocks */
	const size_t stripe = need->io_block * (size_t)n;
	const size_t per_dir = (need->disk + stripe - 1) / stripe * need->io_block;
	char at[PATH_MAX];
	struct stat st[MAX_DIRS];
	int known[MAX_DIRS];
	/* 1. a file can be made there: what any other check would say is moot
	 * on a read-only or virtual file system */
	for (int i = 0; i < n; i++) {
		ST_TRY(io_check_writable(existing_part(dirs[i], at, sizeof at)));
		known[i] = stat(at, &st[i]) == 0;
	}
	/* 2. room on each file system for its directories' files, and where the
	 * run directory is on it too, for a checkpoint besides: the run would
	 * otherwise train, then fail at its first save with nothing saved */
	struct stat out_st;
	char out_at[PATH_MAX];
	const int out_known = need->out && *need->out &&
			      stat(existing_part(need->out, out_at, sizeof out_at), &out_st) == 0;
	for (int i = 0; i < n; i++) {
		int sharing = 1, first = 1;
		for (int j = 0; known[i] && j < n; j++)
			if (j != i && known[j] && st[j].st_dev == st[i].st_dev) {
				sharing++;
				first &= j > i;
			}
		if (!first)
			continue;
		const size_t files = per_dir * (size_t)sharing;
		ST_TRY(io_check_dir(existing_part(dirs[i], at, sizeof at), files));
		const double avail = fs_free_bytes(at);
		if (!out_known || !known[i] || out_st.st_dev != st[i].st_dev || avail < 0)
			continue; /* a file system that reports no size (ramfs) is left to the save */
		ST_CHECK(avail >= (double)files + (double)need->ckpt,
			 "put --offload-dir on another file system than --out, free space there, or raise "
			 "--host-mem (less state on disk)",
			 "offload directory %s is on the file system of the run directory %s, whose %s "
			 "free take the offload files (%s) but not a checkpoint besides (%s; %s missing): "
			 "the run would train, then fail at its first save",
			 dirs[i], need->out, fmt_bytes(b1, sizeof b1, avail),
			 fmt_bytes(b2, sizeof b2, (double)files),
			 fmt_bytes(b3, sizeof b3, (double)need->ckpt),
			 fmt_bytes(b4, sizeof b4, (double)files + (double)need->ckpt - avail));
	}
	/* 3. the file-size limit: SIGXFSZ is ignored (main.c), so the
	 * reservation would fail with EFBIG; said before, with the way round */
	struct rlimit rl;
	char where[64] = "the --offload-dir directory";
	if (n > 1)
		snprintf(where, sizeof where, "each of the %d --offload-dir directories", n);
	if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		ST_CHECK((double)per_dir <= (double)rl.rlim_cur,
			 "give more --offload-dir directories (the offload file is striped over them: "
			 "with N, each holds 1/N), or raise the limit (ulimit -f)",
			 "the offload file in %s takes %s, more than this process's file-size limit of "
			 "%s (ulimit -f)",
			 where, fmt_bytes(b1, sizeof b1, (double)per_dir),
			 fmt_bytes(b2, sizeof b2, (double)rl.rlim_cur));
	return ST_OK;
}
