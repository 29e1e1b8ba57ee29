/* A run's directory (--out): one run at a time holds it (an flock on
 * OUT/.lock, released however the process ends), it is checked writable and
 * free of another run's checkpoints before anything is written, the paths
 * its checkpoints save are made absolute, and metrics.jsonl takes whole
 * records only. */
#ifndef ST_RUNDIR_H
#define ST_RUNDIR_H

#include "trainer/trainer.h"

/* Create --out, lock it, probe a write, and refuse checkpoints there that
 * are not this run's (resuming: the checkpoint's own run, or none). */
int rundir_check(struct st_trainer *tr, int resuming);
/* After the schedule is known and the offload files are made: the run
 * directory's file system has room for a checkpoint of ckpt_bytes (refused:
 * the run would train, then fail at its first save), and warned where it
 * cannot hold the checkpoints that --keep-ckpts keeps at once. */
int rundir_check_room(const struct st_trainer *tr, size_t ckpt_bytes);
/* The paths trainer.json saves, made absolute (--offload-dir's list too). */
int rundir_absolute_paths(struct st_train_opts *o, int resuming);

/* Cut metrics.jsonl (open on fd) back to its last complete line, warned. */
void rundir_metrics_trim(int fd, const char *path);
/* One record, written whole or not at all; a failed write stops the
 * records (warned once) and training goes on. */
void rundir_metrics_write(struct st_trainer *tr, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* The first record of a run that trains: a start, or a resume naming its
 * checkpoint. */
void rundir_metrics_start(struct st_trainer *tr);

#endif
