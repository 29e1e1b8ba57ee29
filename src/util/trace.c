/* Chrome / Perfetto trace writer; see trace.h. */
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include "util/check.h"
#include "util/trace.h"

static const char *track_names[ST_TRACK__COUNT] = {"compute", "copy (host-device)", "disk",
						   "optimizer", "checkpoint"};

double trace_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 1 where path is absent, not a regular file (a FIFO a viewer reads, a
 * terminal: opening one to read it would wait for a writer), empty or a
 * trace this writer made; a regular file with anything else in it (a data
 * shard or a checkpoint's file named by mistake) was emptied. */
static int may_replace(const char *path)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return errno == ENOENT;
	if (!S_ISREG(st.st_mode) || st.st_size == 0)
		return 1;
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	static const char mark[] = "{\"displayTimeUnit\"";
	char head[sizeof mark] = {0};
	const size_t n = fread(head, 1, sizeof mark - 1, f);
	fclose(f);
	return n == 0 || !memcmp(head, mark, sizeof mark - 1);
}

int trace_open(struct st_trace *t, const char *path)
{
	memset(t, 0, sizeof *t);
	ST_CHECK(may_replace(path), "give --trace a new file's path (an earlier trace is replaced)",
		 "--trace %s: the file is there and is not a trace; it would be emptied", path);
	t->f = fopen(path, "w");
	ST_CHECK(t->f, "choose a writable --trace path", "cannot write the trace %s: %s", path,
		 strerror(errno));
	pthread_mutex_init(&t->mu, NULL);
	t->t0 = trace_now();
	t->on = 1;
	fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", t->f);
	/* name the tracks, in this order */
	for (int i = 0; i < ST_TRACK__COUNT; i++)
		fprintf(t->f,
			"%s{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": \"%s\"}},\n"
			"{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"args\": {\"sort_index\": %d}}",
			i ? ",\n" : "", i, track_names[i], i, i);
	return ST_OK;
}

int trace_close(struct st_trace *t)
{
	if (!t->f)
		return ST_OK;
	fputs("\n]}\n", t->f);
	int rc = fclose(t->f) == 0 ? ST_OK : ST_FAIL;
	pthread_mutex_destroy(&t->mu);
	t->f = NULL;
	ST_CHECK(rc == ST_OK, "check the free space", "could not finish writing the trace");
	return ST_OK;
}

void trace_span(struct st_trace *t, enum st_track track, double start, double end, const char *fmt,
		...)
{
	if (!t || !t->f)
		return;
	char name[128];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&t->mu);
	if (t->on) {
		fprintf(t->f,
			",\n{\"name\": \"%s\", \"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f}",
			name, (int)track, (start - t->t0) * 1e6, (end - start) * 1e6);
		t->events++;
	}
	pthread_mutex_unlock(&t->mu);
}
