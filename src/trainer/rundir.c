/* A run's directory (see rundir.h): its lock, the absolute paths its
 * checkpoints save, the checks before anything is written there, and
 * metrics.jsonl. */
#define _GNU_SOURCE /* vasprintf */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "io/fsutil.h"
#include "trainer/rundir.h"
#include "util/check.h"

/* One run per run directory: an exclusive flock on OUT/.lock, held until
 * trainer_close (or the process ends, however it ends, so a killed run leaves
 * no stale lock). Two runs into one directory would write the same step-N and
 * remove each other's temporary checkpoints. The holder writes its PID into
 * the file for the refusal to name; the file itself stays. */
static int lock_run_dir(struct st_trainer *tr)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/.lock", tr->o.out);
	/* A run that could not start removes the lock file it made with the
	 * directory (cmd_train.c): a lock taken on a file since unlinked is
	 * nobody's, so the file is checked to still be the one locked. */
	for (int tries = 0;; tries++) {
		const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		ST_CHECK(fd >= 0, "choose a writable --out directory", "cannot open %s: %s", path,
			 strerror(errno));
		/* eval and sample ask whether a run trains here by taking the lock
		 * shared for a moment (ckpt_run_busy): that is not a run, so a
		 * lock held for 100 ms is */
		int locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
		for (int wait = 0; !locked && errno == EWOULDBLOCK && wait < 20; wait++) {
			usleep(5000);
			locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
		}
		if (!locked) {
			const int err = errno;
			if (err != EWOULDBLOCK) { /* a file system without flock (some FUSE ones) */
				st_log_warn("cannot lock %s (%s): a second run started into %s would "
					    "not be refused",
					    path, strerror(err), tr->o.out);
				tr->lock_fd = fd; /* unlocked; kept so that a failed start removes it */
				return ST_OK;
			}
			char pid[32] = "";
			const ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
			close(fd);
			pid[n > 0 ? n : 0] = '\0';
			pid[strcspn(pid, "\n")] = '\0';
			ST_ERROR("wait for that run to end, or pick another --out",
				 "the run directory %s is in use by another strata train (pid %s)",
				 tr->o.out, *pid ? pid : "unknown");
			return ST_FAIL;
		}
		struct stat held, now;
		if (fstat(fd, &held) == 0 && stat(path, &now) == 0 && held.st_dev == now.st_dev &&
		    held.st_ino == now.st_ino) {
			char pid[32];
			const int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
			if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len)
				st_log_warn("cannot write the PID into %s: %s", path, strerror(errno));
			tr->lock_fd = fd;
			tr->lock_held = 1;
			return ST_OK;
		}
		close(fd);
		ST_CHECK(tries < 10, "try again", "the lock file %s keeps being replaced", path);
	}
}

/* The paths a checkpoint's trainer.json saves, made absolute: a --resume
 * from another working directory reads them back. (On a resume "model" is
 * the original run's, for the record only: it stays as saved.) */
int rundir_absolute_paths(struct st_train_opts *o, int resuming)
{
	char *paths[] = {o->data, o->val, o->out, o->profile, o->trace, resuming ? "" : o->model};
	for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
		ST_TRY(fs_absolute(paths[i], ST_PATH));
	/* --offload-dir: a comma-separated list */
	char joined[sizeof o->offload_dir] = "", *save = NULL;
	for (char *d = strtok_r(o->offload_dir, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
		char one[ST_PATH];
		snprintf(one, sizeof one, "%s", d);
		ST_TRY(fs_absolute(one, sizeof one));
		const size_t len = strlen(joined);
		ST_CHECK(len + strlen(one) + 2 < sizeof joined, "use shorter --offload-dir paths",
			 "--offload-dir: the absolute paths are too long together");
		snprintf(joined + len, sizeof joined - len, "%s%s", len ? "," : "", one);
	}
	memcpy(o->offload_dir, joined, sizeof joined);
	return ST_OK;
}

int rundir_check(struct st_trainer *tr, int resuming)
{
	const struct st_train_opts *o = &tr->o;
	ST_CHECK(*o->out, "pass --out DIR", "no run directory given (--out)");
	if (fs_mkdir_p_made(o->out, tr->out_made, ST_MADE_MAX, &tr->n_out_made) != ST_OK) {
		ST_ERROR("choose a writable --out directory", "cannot create the run directory %s",
			 o->out);
		return ST_FAIL;
	}
	/* a model (or checkpoint) directory as --out: its root config.json would
	 * then shadow the run's `latest` for eval, sample and --resume */
	char model_conf[4200];
	snprintf(model_conf, sizeof model_conf, "%s/config.json", o->out);
	ST_CHECK(!fs_exists(model_conf), "give the run its own --out directory",
		 "%s holds a model (config.json); a run directory keeps its checkpoints in "
		 "step-NNNNNN subdirectories and must not be one",
		 o->out);
	/* nor a prepared data directory: its shards could then not be
	 * prepared again (prepare refuses to write into a run) */
	char shard[4200];
	snprintf(shard, sizeof shard, "%s/train.bin", o->out);
	ST_CHECK(!fs_exists(shard), "give the run its own --out directory",
		 "%s holds token shards (train.bin); a run directory must not be a data directory",
		 o->out);
	ST_TRY(lock_run_dir(tr));
	char probe[4096];
	snprintf(probe, sizeof probe, "%s/.write-test", o->out);
	if (fs_write_file_atomic(probe, "ok", 2) != ST_OK) {
		/* the write's own error (no space, no permission) came first, with its hint */
		ST_ERROR(NULL, "the run cannot start: nothing can be written in its directory %s",
			 o->out);
		return ST_FAIL;
	}
	unlink(probe);
	char latest[4096];
	snprintf(latest, sizeof latest, "%s/latest", o->out);
	struct stat st;
	long first;
	/* `latest`, even dangling, or a step directory (a run killed before its
	 * first `latest`) */
	const int holds = lstat(latest, &st) == 0 || ckpt_count_later(o->out, -1, LONG_MAX, &first);
	ST_CHECK(resuming || !holds, "resume it with --resume DIR, or pick another --out",
		 "the run directory %s already holds checkpoints; refusing to overwrite them", o->out);
	if (resuming && holds) {
		/* a resume writes into the checkpoint's own run directory (where it
		 * is, or where it was saved: a step directory copied out and
		 * resumed back), or one without checkpoints: never among another
		 * run's */
		char ckpt[4096], parent[4096], real_parent[PATH_MAX], real_out[PATH_MAX];
		char real_saved[PATH_MAX];
		ST_TRY(ckpt_resolve(ckpt, sizeof ckpt, o->resume));
		ST_CHECK(realpath(ckpt, parent), NULL, "cannot resolve %s: %s", ckpt, strerror(errno));
		fs_dirname(real_parent, sizeof real_parent, parent);
		struct st_train_opts saved;
		train_opts_defaults(&saved);
		const int own = realpath(o->out, real_out) &&
				(!strcmp(real_parent, real_out) ||
				 (ckpt_read_options(&saved, ckpt) == ST_OK && realpath(saved.out, real_saved) &&
				  !strcmp(real_saved, real_out)));
		ST_CHECK(own,
			 "give --out an empty or new directory, or resume that run itself with --resume DIR",
			 "%s holds the checkpoints of another run than %s; a resume writes only into its "
			 "own run directory or a new one",
			 o->out, ckpt);
		/* own by place, but another run's by identity: a checkpoint of
		 * another run copied in under a name of its own (the run went on
		 * there among this directory's checkpoints, pruning them) */
		struct ckpt_ids mine, other;
		char step_dir[4400];
		const char *stranger = NULL;
		DIR *d = ckpt_read_ids(ckpt, &mine) && *mine.run ? opendir(o->out) : NULL;
		struct dirent *e;
		while (d && !stranger && (e = readdir(d))) {
			long s;
			snprintf(step_dir, sizeof step_dir, "%s/%s", o->out, e->d_name);
			if (fs_step_name(e->d_name, &s) && ckpt_read_ids(step_dir, &other) &&
			    *other.run && strcmp(mine.run, other.run) != 0)
				stranger = e->d_name;
		}
		char name[300];
		snprintf(name, sizeof name, "%s", stranger ? stranger : "");
		if (d)
			closedir(d);
		ST_CHECK(!*name,
			 "give --out an empty or new directory, or resume that run itself with --resume DIR",
			 "%s holds the checkpoints of another run than %s (%s/%s is of run %s, the "
			 "checkpoint of run %s); a resume writes only into its own run directory or a "
			 "new one",
			 o->out, ckpt, o->out, name, other.run, mine.run);
	}
	return ST_OK;
}

/* The checkpoints this run has on disk at once beyond those there now, at
 * its fullest: each save adds one before --keep-ckpts removes the oldest.
 * Those there now count from the steps up to the run's start; a later one
 * (a resume from an earlier step) and a step saved again are left out,
 * which can only overstate the room needed, never understate it. */
static long ckpts_added_at_peak(const struct st_trainer *tr)
{
	const long iv = tr->o.ckpt_interval, from = tr->step, to = tr->total_steps;
	const long saves = iv > 0 ? to / iv - from / iv + (to % iv != 0) : 1;
	long first = 0, held = ckpt_count_later(tr->o.out, -1, from, &first);
	const long before = held;
	long peak = held;
	for (long k = 0; k < saves && k <= tr->o.keep_ckpts + 1; k++) {
		peak = ++held > peak ? held : peak;
		if (tr->o.keep_ckpts > 0 && held > tr->o.keep_ckpts)
			held = tr->o.keep_ckpts;
	}
	if (tr->o.keep_ckpts == 0)
		peak = before + saves;
	return peak - before;
}

int rundir_check_room(const struct st_trainer *tr, size_t ckpt_bytes)
{
	struct statvfs vs;
	const double avail = fs_free_bytes(tr->o.out);
	if (tr->step >= tr->total_steps || avail < 0 || statvfs(tr->o.out, &vs) != 0)
		return ST_OK; /* nothing to save, or a file system that reports no size (ramfs) */
	/* the files' own bytes, and a block each for the small ones */
	const double one = (double)ckpt_bytes + 16.0 * (double)vs.f_frsize;
	char b1[32], b2[32];
	ST_CHECK(avail >= one,
		 "free space there, or give --out on a file system with room (a resume: --resume "
		 "RUN --out NEW goes on into NEW)",
		 "the run directory %s has %s free, less than one checkpoint (%s): the run would "
		 "train, then fail at its first save",
		 tr->o.out, fmt_bytes(b1, sizeof b1, avail), fmt_bytes(b2, sizeof b2, one));
	const long want = ckpts_added_at_peak(tr);
	const long fit = (long)(avail / one);
	if (fit < want)
		st_log_warn("the run directory %s has %s free, room for %ld checkpoint%s of %s; this "
			    "run adds %ld at its fullest (--keep-ckpts %d, --ckpt-interval %ld): a later "
			    "save will fail and stop it, keeping the checkpoints saved before; free space "
			    "there, %s",
			    tr->o.out, fmt_bytes(b1, sizeof b1, avail), fit, fit == 1 ? "" : "s",
			    fmt_bytes(b2, sizeof b2, one), want, tr->o.keep_ckpts, tr->o.ckpt_interval,
			    tr->o.keep_ckpts > 1 ? "or lower --keep-ckpts"
			    /* 1 cannot be lowered (0 keeps every one) */
			    : tr->o.keep_ckpts ? "or save less often (--ckpt-interval 0 saves at the end "
						 "only)"
					       : "give --keep-ckpts N (0 keeps every one), or a longer "
						 "--ckpt-interval");
	return ST_OK;
}

/* A metrics.jsonl whose last line is cut short (a run killed in a write, a
 * power loss, or a full disk where the cut back failed) is cut back to its
 * last complete line, warned: the next record, a resume marker, would
 * otherwise be glued onto it and both lost to a JSON reader. */
void rundir_metrics_trim(int fd, const char *path)
{
	const off_t size = lseek(fd, 0, SEEK_END);
	char buf[4096];
	off_t keep = size;
	while (keep > 0) {
		const off_t at = keep > (off_t)sizeof buf ? keep - (off_t)sizeof buf : 0;
		const ssize_t r = pread(fd, buf, (size_t)(keep - at), at);
		if (r != keep - at)
			return; /* unreadable: left as it is */
		ssize_t k = r;
		while (k > 0 && buf[k - 1] != '\n')
			k--;
		if (k > 0) {
			keep = at + k;
			break;
		}
		keep = at;
	}
	if (keep == size)
		return;
	if (ftruncate(fd, keep) == 0)
		st_log_warn("%s ended in a partial line (a run killed while writing it): cut back to "
			    "its last complete line (%lld bytes dropped)",
			    path, (long long)(size - keep));
	else
		st_log_warn("%s ends in a partial line and cannot be cut back (%s): the next record "
			    "follows it on the same line",
			    path, strerror(errno));
}

/* One metrics.jsonl record, written whole or not at all. On a full disk the
 * file is cut back to its last complete line and one warning says the
 * records stop there; training goes on (a checkpoint that cannot be written
 * stops it with its own error). */
void rundir_metrics_write(struct st_trainer *tr, const char *fmt, ...)
{
	if (!tr->metrics || tr->metrics_lost)
		return;
	char *line = NULL; /* a resume marker holds a path, escaped: any length */
	va_list ap;
	va_start(ap, fmt);
	const int len = vasprintf(&line, fmt, ap);
	va_end(ap);
	if (len <= 0) {
		free(len < 0 ? NULL : line);
		return;
	}
	const int fd = fileno(tr->metrics);
	const off_t end = lseek(fd, 0, SEEK_END);
	size_t done = 0;
	int err = 0;
	while (done < (size_t)len) {
		const ssize_t w = write(fd, line + done, (size_t)len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			err = w < 0 ? errno : ENOSPC;
			break;
		}
		done += (size_t)w;
	}
	free(line);
	if (done == (size_t)len)
		return;
	if (end >= 0 && ftruncate(fd, end) != 0)
		st_log_warn("metrics.jsonl keeps a partial last line: %s", strerror(errno));
	tr->metrics_lost = 1;
	st_log_warn("cannot write %s/metrics.jsonl (%s): it records nothing from step %ld on; "
		    "training goes on",
		    tr->o.out, strerror(err), tr->step);
}

/* The first record of every run that trains: where it starts. Records from
 * an earlier run in the same directory may follow a step past from_step
 * (the resumed run does those steps again), so a reader keeps, at each
 * start record, only the records before it with step <= from_step. */
void rundir_metrics_start(struct st_trainer *tr)
{
	char when[32];
	const time_t t = time(NULL);
	struct tm tm;
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
	if (!tr->step) {
		rundir_metrics_write(tr, "{\"event\": \"start\", \"from_step\": 0, \"to_step\": %ld, "
				  "\"time\": \"%s\"}\n",
			      tr->total_steps, when);
		return;
	}
	cJSON *path = cJSON_CreateString(tr->ckpt_loaded); /* quoted and escaped */
	char *quoted = path ? cJSON_PrintUnformatted(path) : NULL;
	cJSON_Delete(path);
	rundir_metrics_write(tr, "{\"event\": \"resume\", \"from_step\": %ld, \"to_step\": %ld, "
			  "\"checkpoint\": %s, \"time\": \"%s\"}\n",
		      tr->step, tr->total_steps, quoted ? quoted : "null", when);
	free(quoted);
}
