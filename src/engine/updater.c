/* The update queue; see updater.h. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/updater.h"
#include "util/check.h"

static double up_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run_job(struct st_updater *up, const struct st_update_job *j)
{
	struct st_store *s = up->store;
	const int u = j->unit;
	const int grads = !up->no_grad || !up->no_grad[u];
	if (j->apply) {
		if (up->before_update)
			up->before_update(up->before_update_ctx, u);
		/* the next units' master weights and state stream in meanwhile */
		for (int i = 1; i <= up->prefetch && u + i < up->m->n_units; i++) {
			store_prefetch(s, u + i, ST_SLAB_M);
			store_prefetch(s, u + i, ST_SLAB_S);
		}
		float *w = store_acquire(s, u, ST_SLAB_M);
		const float *g = grads ? store_acquire_as(s, u, ST_SLAB_G, ST_ACCESS_READ) : NULL;
		void *st = up->opt->unit_bytes[u] ? store_acquire(s, u, ST_SLAB_S) : NULL;
		if (up->step_unit)
			up->step_unit(up->step_unit_ctx, u, w, g, st, j->t, j->lr, j->clip);
		else
			optim_step_unit(up->ops, up->opt, u, w, g, st, j->t, j->lr, j->clip);
		if (st)
			store_release(s, u, ST_SLAB_S, 1);
		if (grads)
			store_release(s, u, ST_SLAB_G, 0);
		store_release(s, u, ST_SLAB_M, 1);
	}
	if (grads)
		store_discard(s, u, ST_SLAB_G);
}

static void *worker(void *arg)
{
	struct st_updater *up = arg;
	omp_set_num_threads(up->threads);
	store_thread_role(1);
	pthread_mutex_lock(&up->mu);
	for (;;) {
		while (!up->q_count && !up->stop)
			pthread_cond_wait(&up->cv, &up->mu);
		if (!up->q_count)
			break;
		struct st_update_job j = up->q[up->q_head];
		pthread_mutex_unlock(&up->mu);
		double t0 = up_now();
		run_job(up, &j);
		double dt = up_now() - t0;
		trace_span(up->trace, ST_TRACK_OPTIMIZER, t0, t0 + dt, "%s u%d",
			   j.apply ? "update" : "clear gradient", j.unit);
		pthread_mutex_lock(&up->mu);
		up->busy_s += dt;
		up->q_head = (up->q_head + 1) % up->m->n_units;
		up->q_count--;
		up->done[j.unit]++;
		pthread_cond_broadcast(&up->cv);
	}
	pthread_mutex_unlock(&up->mu);
	return NULL;
}

int updater_init(struct st_updater *up, const struct st_ops *ops, const struct st_optim *opt,
		 const struct st_model *m, struct st_store *store, int prefetch, int threads,
		 int threaded)
{
	memset(up, 0, sizeof *up);
	up->ops = ops;
	up->opt = opt;
	up->m = m;
	up->store = store;
	up->prefetch = prefetch;
	up->threads = threads > 0 ? threads : omp_get_max_threads();
	up->q = st_calloc((size_t)m->n_units, sizeof *up->q);
	up->done = st_calloc((size_t)m->n_units, sizeof *up->done);
	up->dev_job = st_calloc((size_t)m->n_units, sizeof *up->dev_job);
	if (!up->q || !up->done || !up->dev_job)
		return ST_FAIL;
	pthread_mutex_init(&up->mu, NULL);
	pthread_cond_init(&up->cv, NULL);
	if (threaded) {
		ST_CHECK(pthread_create(&up->thread, NULL, worker, up) == 0, NULL,
			 "cannot start the optimizer thread");
		up->threaded = 1;
	}
	return ST_OK;
}

void updater_free(struct st_updater *up)
{
	if (!up->q)
		return;
	if (up->threaded) {
		pthread_mutex_lock(&up->mu);
		up->stop = 1;
		pthread_cond_broadcast(&up->cv);
		pthread_mutex_unlock(&up->mu);
		pthread_join(up->thread, NULL); /* finishes the queued jobs first */
	}
	pthread_mutex_destroy(&up->mu);
	pthread_cond_destroy(&up->cv);
	free(up->q);
	free(up->done);
	free(up->dev_job);
	memset(up, 0, sizeof *up);
}

void updater_submit(struct st_updater *up, int apply, long t, float lr, float clip)
{
	const int n = up->m->n_units;
	if (!up->threaded) {
		double t0 = up_now();
		for (int u = 0; u < n; u++) {
			const double tj = up_now();
			run_job(up, &(struct st_update_job){u, apply, t, lr, clip});
			trace_span(up->trace, ST_TRACK_OPTIMIZER, tj, up_now(), "%s u%d",
				   apply ? "update" : "clear gradient", u);
		}
		up->busy_s += up_now() - t0;
		up->gen++;
		for (int u = 0; u < n; u++)
			up->done[u] = up->gen;
		return;
	}
	pthread_mutex_lock(&up->mu);
	/* a step's jobs are queued only after the previous step's finished
	 * (its forward waited for every unit), so the ring never overflows */
	while (up->q_count)
		pthread_cond_wait(&up->cv, &up->mu);
	up->gen++;
	for (int u = 0; u < n; u++) {
		struct st_update_job j = {u, apply, t, lr, clip};
		if (up->on_device && up->on_device[u])
			up->dev_job[u] = j; /* run by the compute thread */
		else
			up->q[(up->q_head + up->q_count++) % n] = j;
	}
	pthread_cond_broadcast(&up->cv);
	pthread_mutex_unlock(&up->mu);
}

/* A device unit's pending job, on the calling (compute) thread. */
static void run_device_job(struct st_updater *up, int unit)
{
	if (!up->on_device || !up->on_device[unit] || up->done[unit] >= up->gen)
		return;
	const double t0 = up_now();
	run_job(up, &up->dev_job[unit]);
	trace_span(up->trace, ST_TRACK_COMPUTE, t0, up_now(), "device update u%d", unit);
	pthread_mutex_lock(&up->mu);
	up->done[unit] = up->gen;
	pthread_mutex_unlock(&up->mu);
}

void updater_wait_unit(struct st_updater *up, int unit)
{
	if (!up->threaded)
		return;
	run_device_job(up, unit);
	const double t0 = up_now();
	pthread_mutex_lock(&up->mu);
	while (up->done[unit] < up->gen)
		pthread_cond_wait(&up->cv, &up->mu);
	const double t1 = up_now();
	up->wait_s += t1 - t0;
	pthread_mutex_unlock(&up->mu);
	if (t1 - t0 > 50e-6)
		trace_span(up->trace, ST_TRACK_COMPUTE, t0, t1, "wait update u%d", unit);
}

void updater_drain(struct st_updater *up)
{
	if (!up->threaded)
		return;
	for (int u = 0; u < up->m->n_units; u++)
		run_device_job(up, u);
	pthread_mutex_lock(&up->mu);
	while (up->q_count)
		pthread_cond_wait(&up->cv, &up->mu);
	pthread_mutex_unlock(&up->mu);
}
