/* A timeline of every queue, as a Chrome / Perfetto trace (JSON: open it in
 * ui.perfetto.dev or chrome://tracing): one track per queue — compute (the
 * main thread's unit passes and its waits), copy and disk (the store's
 * transfers), optimizer (the updater's per-unit updates), checkpoint — and
 * one complete event ("ph": "X") per span. Spans come from several threads;
 * a mutex orders the writes. A NULL trace, or one past its step limit,
 * records nothing, so call sites need no condition. */
#ifndef ST_TRACE_H
#define ST_TRACE_H

#include <pthread.h>
#include <stdio.h>

enum st_track { ST_TRACK_COMPUTE, ST_TRACK_COPY, ST_TRACK_DISK, ST_TRACK_OPTIMIZER,
		ST_TRACK_CHECKPOINT, ST_TRACK__COUNT };

struct st_trace {
	FILE *f;
	pthread_mutex_t mu;
	double t0;       /* clock at open: timestamps are relative to it */
	long events;
	int on;          /* recording (cleared past the step limit) */
};

/* Start a trace file; ST_FAIL (reported) when it cannot be written. */
int trace_open(struct st_trace *t, const char *path);
/* Finish the JSON and close; safe on a trace never opened. */
int trace_close(struct st_trace *t);
/* Seconds on the trace's clock (monotonic). */
double trace_now(void);
/* One span [start, end) (trace_now() values) on a track; name is printf-like. */
void trace_span(struct st_trace *t, enum st_track track, double start, double end,
		const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif
