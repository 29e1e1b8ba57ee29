/* Tiers, budgets, slabs, staging slots and the transfer queues; see store.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/store.h"
#include "util/check.h"

struct st_job {
	struct st_job *next;
	int slot, slab;  /* slot buffer <-> home of slab */
	int write;       /* 1: slot -> home; 0: home -> slot */
};

const char *tier_name(enum st_tier t)
{
	static const char *names[] = {"device", "host", "disk"};
	return t < ST_TIER__COUNT ? names[t] : "?";
}

const char *slab_kind_name(enum st_slab_kind k)
{
	static const char *names[] = {"weights", "master", "optimizer", "gradients",
				      "activations"};
	return k < ST_SLAB__COUNT ? names[k] : "?";
}

enum st_tier slab_work_tier(enum st_slab_kind k)
{
	return k == ST_SLAB_S || k == ST_SLAB_M ? ST_TIER_HOST : ST_TIER_DEVICE;
}

const char *fmt_bytes(char *buf, size_t n, double bytes)
{
	const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int i = 0;
	while (bytes >= 1024 && i < 4) {
		bytes /= 1024;
		i++;
	}
	snprintf(buf, n, i ? "%.1f %s" : "%.0f %s", bytes, unit[i]);
	return buf;
}

static double store_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int store_init(struct st_store *s, int n_units, const size_t budgets[ST_TIER__COUNT])
{
	memset(s, 0, sizeof *s);
	s->n_units = n_units;
	s->slabs = st_calloc((size_t)n_units * ST_SLAB__COUNT, sizeof *s->slabs);
	if (!s->slabs)
		return ST_FAIL;
	for (size_t i = 0; i < (size_t)n_units * ST_SLAB__COUNT; i++) {
		s->slabs[i].alias_of = s->slabs[i].shared_from = -1;
		s->slabs[i].slot = -1;
	}
	for (int t = 0; t < ST_TIER__COUNT; t++)
		s->tiers[t].budget = budgets ? budgets[t] : 0;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	return ST_OK;
}

void store_free(struct st_store *s)
{
	if (!s->slabs)
		return;
	if (s->started) {
		store_drain(s);
		pthread_mutex_lock(&s->mu);
		s->stopping = 1;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		if (s->q_copy.started)
			pthread_join(s->q_copy.thread, NULL);
		if (s->q_disk.started)
			pthread_join(s->q_disk.thread, NULL);
	}
	/* the ring goes first: no transfer may outlive the buffers */
	if (s->io_ready)
		io_close(&s->io);
	for (size_t i = 0; i < (size_t)s->n_units * ST_SLAB__COUNT; i++)
		if (s->slabs[i].alias_of < 0 && s->slabs[i].shared_from < 0)
			free(s->slabs[i].ptr);
	for (int i = 0; i < s->n_slots; i++)
		free(s->slots[i].buf);
	free(s->slots);
	free(s->slabs);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	memset(s, 0, sizeof *s);
}

static int charge(struct st_store *s, enum st_tier tier, size_t bytes, const char *what, int unit)
{
	struct st_tier_use *tu = &s->tiers[tier];
	if (tu->budget && tu->used + bytes > tu->budget) {
		char b1[32], b2[32], b3[32], b4[32];
		ST_ERROR("raise the tier's budget (--device-mem / --host-mem), give --offload-dir, "
			 "or lower the batch size or model size",
			 "%s tier budget exceeded allocating %s for the %s of unit %d: %s already in use "
			 "of a %s budget, %s missing",
			 tier_name(tier), fmt_bytes(b1, sizeof b1, (double)bytes), what, unit,
			 fmt_bytes(b2, sizeof b2, (double)tu->used),
			 fmt_bytes(b3, sizeof b3, (double)tu->budget),
			 fmt_bytes(b4, sizeof b4, (double)(tu->used + bytes - tu->budget)));
		return ST_FAIL;
	}
	tu->used += bytes;
	if (tu->used > tu->peak)
		tu->peak = tu->used;
	return ST_OK;
}

int store_alloc(struct st_store *s, int unit, enum st_slab_kind kind, enum st_tier tier,
		size_t bytes)
{
	struct st_slab *sl = store_slab(s, unit, kind);
	ST_CHECK(sl->ptr == NULL && sl->bytes == 0, NULL,
		 "internal: slab %s of unit %d allocated twice", slab_kind_name(kind), unit);
	ST_CHECK(!s->started, NULL, "internal: slab allocated after store_start");
	ST_TRY(charge(s, tier, bytes, slab_kind_name(kind), unit));
	if (tier == ST_TIER_DISK) {
		sl->zero = 1; /* its range of the disk tier is laid out by store_start */
	} else {
		sl->ptr = st_aligned_alloc(bytes);
		if (!sl->ptr)
			return ST_FAIL;
		memset(sl->ptr, 0, bytes);
	}
	sl->home = tier;
	sl->bytes = bytes;
	return ST_OK;
}

void store_alias(struct st_store *s, int unit, enum st_slab_kind kind, enum st_slab_kind target)
{
	struct st_slab *sl = store_slab(s, unit, kind), *t = store_slab(s, unit, target);
	sl->ptr = t->ptr;
	sl->bytes = t->bytes;
	sl->home = t->home;
	sl->alias_of = (int)target;
}

void store_share(struct st_store *s, int unit, enum st_slab_kind kind, int from_unit)
{
	struct st_slab *sl = store_slab(s, unit, kind), *t = store_slab(s, from_unit, kind);
	sl->ptr = t->ptr;
	sl->bytes = t->bytes;
	sl->home = t->home;
	sl->shared_from = from_unit;
}

/* The slab that really holds the data (aliases resolve to their target). */
static int slab_index(const struct st_store *s, int unit, enum st_slab_kind kind)
{
	const struct st_slab *sl = &s->slabs[(size_t)unit * ST_SLAB__COUNT + kind];
	if (sl->alias_of >= 0)
		kind = (enum st_slab_kind)sl->alias_of;
	return unit * ST_SLAB__COUNT + (int)kind;
}

static int staged(const struct st_slab *sl, enum st_slab_kind kind)
{
	return sl->home != ST_TIER_DEVICE && sl->home != slab_work_tier(kind);
}

int store_is_staged(const struct st_store *s, int unit, enum st_slab_kind kind)
{
	int i = slab_index(s, unit, kind);
	return staged(&s->slabs[i], (enum st_slab_kind)(i % ST_SLAB__COUNT));
}

/* ---- the queues ---------------------------------------------------------- */

static struct st_queue *queue_of(struct st_store *s, const struct st_slab *sl)
{
	return sl->home == ST_TIER_DISK ? &s->q_disk : &s->q_copy;
}

/* Locked. Returns ST_FAIL when out of memory (then the store fails). */
static void enqueue(struct st_store *s, int slot, int slab, int write)
{
	struct st_job *j = malloc(sizeof *j);
	if (!j) {
		ST_ERROR(NULL, "out of memory queueing a transfer");
		s->failed = 1;
		/* complete it at once, as a failed transfer would */
		if (write)
			s->slots[slot].writes--;
		else
			s->slots[slot].fetching = 0;
		return;
	}
	*j = (struct st_job){.slot = slot, .slab = slab, .write = write};
	struct st_queue *q = queue_of(s, &s->slabs[slab]);
	if (q->tail)
		q->tail->next = j;
	else
		q->head = j;
	q->tail = j;
	if (write)
		s->writebacks++;
	else
		s->fills++;
	pthread_cond_broadcast(&s->cv);
}

/* Locked: a job's transfer is over; its slot is usable again. */
static void job_finished(struct st_store *s, struct st_queue *q, struct st_job *j, int rc,
			 double dt)
{
	q->busy_s += dt;
	q->bytes += s->slabs[j->slab].bytes;
	if (rc != ST_OK)
		s->failed = 1;
	struct st_slot *sl = &s->slots[j->slot];
	if (j->write)
		sl->writes--;
	else
		sl->fetching = 0;
	free(j);
	pthread_cond_broadcast(&s->cv);
}

/* host <-> device: memcpy on the CPU backend (the CUDA backend's copy stream
 * takes this place) */
static void copy_job(struct st_store *s, const struct st_job *j)
{
	const struct st_slab *sl = &s->slabs[j->slab];
	void *buf = s->slots[j->slot].buf;
	if (j->write)
		memcpy(sl->ptr, buf, sl->bytes);
	else
		memcpy(buf, sl->ptr, sl->bytes);
}

/* Disk jobs go to the I/O engine in batches of consecutive jobs of one
 * direction (reads and writes are not mixed, as Fuyou does), so its queue
 * stays full across slabs; each job completes as its own blocks do. */
#define DISK_BATCH 32

struct disk_batch {
	struct st_store *s;
	struct st_job *jobs[DISK_BATCH];
	double t0;
};

/* "read weights u3" for a job's trace span */
static void trace_job(struct st_store *s, enum st_track track, const struct st_job *j, double t0,
		      double t1)
{
	trace_span(s->trace, track, t0, t1, "%s %s u%d", j->write ? "write" : "read",
		   slab_kind_name((enum st_slab_kind)(j->slab % ST_SLAB__COUNT)), j->slab / ST_SLAB__COUNT);
}

static void disk_item_done(void *ctx, int item, int rc)
{
	struct disk_batch *b = ctx;
	const double t = store_now();
	trace_job(b->s, ST_TRACK_DISK, b->jobs[item], b->t0, t);
	pthread_mutex_lock(&b->s->mu);
	/* the queue's busy time is the batch's span, shared out as jobs end */
	job_finished(b->s, &b->s->q_disk, b->jobs[item], rc, t - b->t0);
	b->t0 = t;
	pthread_mutex_unlock(&b->s->mu);
}

/* A batch's requests complete in any order, so one slab's transfers must not
 * share a batch: its two writes could land in either order. */
static int in_batch(struct st_job *const *jobs, int n, int slab)
{
	for (int i = 0; i < n; i++)
		if (jobs[i]->slab == slab)
			return 1;
	return 0;
}

struct queue_arg {
	struct st_store *s;
	struct st_queue *q;
};

static void *queue_main(void *arg)
{
	struct st_store *s = ((struct queue_arg *)arg)->s;
	struct st_queue *q = ((struct queue_arg *)arg)->q;
	free(arg);
	const int disk = q == &s->q_disk;
	struct disk_batch batch = {.s = s};
	struct st_io_item items[DISK_BATCH];
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!q->head && !s->stopping)
			pthread_cond_wait(&s->cv, &s->mu);
		if (!q->head)
			break;
		int n = 0;
		do {
			struct st_job *j = q->head;
			q->head = j->next;
			if (!q->head)
				q->tail = NULL;
			batch.jobs[n++] = j;
		} while (disk && n < DISK_BATCH && q->head && q->head->write == batch.jobs[0]->write &&
			 !in_batch(batch.jobs, n, q->head->slab));
		const int failed = s->failed;
		pthread_mutex_unlock(&s->mu);
		/* after a failure, transfers are skipped: the run is stopping */
		if (disk && !failed) {
			for (int i = 0; i < n; i++) {
				const struct st_slab *sl = &s->slabs[batch.jobs[i]->slab];
				items[i] = (struct st_io_item){sl->disk_off, s->slots[batch.jobs[i]->slot].buf,
							       sl->bytes};
			}
			batch.t0 = store_now();
			io_transfer(&s->io, batch.jobs[0]->write, items, n, disk_item_done, &batch);
			pthread_mutex_lock(&s->mu);
			continue;
		}
		double t0 = store_now();
		if (!failed)
			copy_job(s, batch.jobs[0]);
		double dt = store_now() - t0;
		trace_job(s, ST_TRACK_COPY, batch.jobs[0], t0, t0 + dt);
		pthread_mutex_lock(&s->mu);
		for (int i = 0; i < n; i++)
			job_finished(s, q, batch.jobs[i], failed ? ST_FAIL : ST_OK, i ? 0 : dt);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static int start_queue(struct st_store *s, struct st_queue *q)
{
	struct queue_arg *a = st_malloc(sizeof *a);
	if (!a)
		return ST_FAIL;
	a->s = s;
	a->q = q;
	if (pthread_create(&q->thread, NULL, queue_main, a) != 0) {
		free(a);
		ST_ERROR(NULL, "cannot start a transfer thread");
		return ST_FAIL;
	}
	q->started = 1;
	return ST_OK;
}

int store_start(struct st_store *s, const struct st_offload_cfg *cfg)
{
	/* the largest staged slab of each kind sizes its pool's slots */
	size_t slot_bytes[ST_SLAB__COUNT] = {0};
	int any_disk = 0, any = 0;
	for (int u = 0; u < s->n_units; u++)
		for (int k = 0; k < ST_SLAB__COUNT; k++) {
			const struct st_slab *sl = store_slab(s, u, (enum st_slab_kind)k);
			if (sl->alias_of >= 0 || sl->shared_from >= 0 || !sl->bytes)
				continue;
			if (!staged(sl, (enum st_slab_kind)k))
				continue;
			any = 1;
			any_disk |= sl->home == ST_TIER_DISK;
			if (sl->bytes > slot_bytes[k])
				slot_bytes[k] = sl->bytes;
		}
	if (!any)
		return ST_OK;
	ST_CHECK(cfg, NULL, "internal: staged slabs but no offload settings");
	s->io_block = cfg->io_block ? cfg->io_block : (1u << 20);
	ST_CHECK(s->io_block <= (64u << 20), "use --io-block of at most 64M",
		 "--io-block %zu is larger than 64 MiB", s->io_block);
	int n = 0;
	for (int k = 0; k < ST_SLAB__COUNT; k++)
		if (slot_bytes[k]) {
			ST_CHECK(cfg->pool_slots[k] >= 2, NULL,
				 "internal: the %s pool needs at least 2 slots", slab_kind_name(k));
			n += cfg->pool_slots[k];
		}
	s->slots = st_calloc((size_t)n, sizeof *s->slots);
	if (!s->slots)
		return ST_FAIL;
	for (int k = 0; k < ST_SLAB__COUNT; k++)
		for (int i = 0; slot_bytes[k] && i < cfg->pool_slots[k]; i++) {
			/* whole disk blocks, so transfers never run past the buffer */
			size_t cap = io_round(slot_bytes[k], ST_IO_ALIGN);
			ST_TRY(charge(s, slab_work_tier((enum st_slab_kind)k), cap, "staging buffers", -1));
			struct st_slot *sl = &s->slots[s->n_slots++];
			if (posix_memalign(&sl->buf, ST_IO_ALIGN, cap) != 0) {
				sl->buf = NULL;
				ST_ERROR("lower --host-mem / --device-mem or the model size",
					 "out of memory allocating staging buffers");
				return ST_FAIL;
			}
			memset(sl->buf, 0, cap);
			sl->pool = k;
			sl->owner = -1;
		}
	s->started = 1; /* from here on store_free stops what was started */
	if (any_disk) {
		/* block-aligned ranges, so every transfer starts on a stripe block */
		for (int u = 0; u < s->n_units; u++)
			for (int k = 0; k < ST_SLAB__COUNT; k++) {
				struct st_slab *sl = store_slab(s, u, (enum st_slab_kind)k);
				if (sl->alias_of >= 0 || sl->shared_from >= 0 || sl->home != ST_TIER_DISK)
					continue;
				sl->disk_off = s->disk_bytes;
				s->disk_bytes += io_round(sl->bytes, s->io_block);
			}
		ST_TRY(io_open(&s->io, cfg->dirs, cfg->n_dirs, s->io_block,
			       cfg->io_depth ? cfg->io_depth : 16, s->disk_bytes));
		s->io_ready = 1;
		ST_TRY(start_queue(s, &s->q_disk));
	}
	ST_TRY(start_queue(s, &s->q_copy));
	return ST_OK;
}

/* ---- slots ---------------------------------------------------------------- */

/* Locked: a slot of pool `kind` that can take new data: free, or holding a
 * clean copy nobody uses (least recently used first). Prefetches do not evict
 * other prefetched data. -1 when none. */
static int find_slot(struct st_store *s, int kind, int for_prefetch)
{
	int best = -1;
	for (int i = 0; i < s->n_slots; i++) {
		const struct st_slot *sl = &s->slots[i];
		if (sl->pool != kind || sl->refs || sl->fetching || sl->writes || sl->unsaved)
			continue;
		if (sl->owner < 0)
			return i;
		if (for_prefetch && sl->prefetched)
			continue;
		if (best < 0 || sl->lru < s->slots[best].lru)
			best = i;
	}
	return best;
}

/* Locked (the lock may be let go meanwhile): give slot i to slab idx and
 * start its fill. */
static void attach(struct st_store *s, int i, int idx)
{
	struct st_slot *sl = &s->slots[i];
	if (sl->owner >= 0)
		s->slabs[sl->owner].slot = -1;
	sl->owner = idx;
	sl->lru = ++s->clock;
	s->slabs[idx].slot = i;
	sl->fetching = 1;
	if (s->slabs[idx].zero) {
		/* nothing to read: zero-fill (outside the lock; the slot counts as
		 * being filled meanwhile), and remember that home lacks it */
		const size_t n = s->slabs[idx].bytes;
		s->slabs[idx].zero = 0;
		sl->unsaved = 1;
		pthread_mutex_unlock(&s->mu);
		memset(sl->buf, 0, n);
		pthread_mutex_lock(&s->mu);
		sl->fetching = 0;
		pthread_cond_broadcast(&s->cv);
		return;
	}
	enqueue(s, i, idx, 0);
}

void store_prefetch(struct st_store *s, int unit, enum st_slab_kind kind)
{
	const int idx = slab_index(s, unit, kind);
	struct st_slab *sl = &s->slabs[idx];
	if (!staged(sl, (enum st_slab_kind)(idx % ST_SLAB__COUNT)))
		return;
	pthread_mutex_lock(&s->mu);
	if (sl->slot < 0 && !sl->zero) {
		int i = find_slot(s, idx % ST_SLAB__COUNT, 1);
		if (i >= 0) {
			attach(s, i, idx);
			s->slots[i].prefetched = 1;
		}
	}
	pthread_mutex_unlock(&s->mu);
}

static __thread int thread_role;

void store_thread_role(int role)
{
	thread_role = role ? 1 : 0;
}

void *store_acquire_as(struct st_store *s, int unit, enum st_slab_kind kind, enum st_access a)
{
	const int idx = slab_index(s, unit, kind);
	struct st_slab *sl = &s->slabs[idx];
	if (!staged(sl, (enum st_slab_kind)(idx % ST_SLAB__COUNT)))
		return sl->ptr;
	const double t0 = store_now();
	pthread_mutex_lock(&s->mu);
	for (;;) {
		if (sl->slot >= 0) {
			struct st_slot *st = &s->slots[sl->slot];
			if (st->fetching || (a == ST_ACCESS_WRITE && st->writes)) {
				pthread_cond_wait(&s->cv, &s->mu);
				continue;
			}
			if (st->prefetched)
				s->hits++;
			st->prefetched = 0;
			st->refs++;
			st->lru = ++s->clock;
			const double t1 = store_now();
			s->wait_s[thread_role] += t1 - t0;
			if (!thread_role && t1 - t0 > 50e-6) /* the main thread's stalls, on its track */
				trace_span(s->trace, ST_TRACK_COMPUTE, t0, t1, "wait %s u%d",
					   slab_kind_name((enum st_slab_kind)(idx % ST_SLAB__COUNT)), unit);
			pthread_mutex_unlock(&s->mu);
			return st->buf;
		}
		int i = find_slot(s, idx % ST_SLAB__COUNT, 0);
		if (i < 0) {
			pthread_cond_wait(&s->cv, &s->mu);
			continue;
		}
		attach(s, i, idx);
	}
}

void store_release(struct st_store *s, int unit, enum st_slab_kind kind, int dirty)
{
	const int idx = slab_index(s, unit, kind);
	struct st_slab *sl = &s->slabs[idx];
	if (!staged(sl, (enum st_slab_kind)(idx % ST_SLAB__COUNT)))
		return;
	pthread_mutex_lock(&s->mu);
	if (sl->slot >= 0) {
		struct st_slot *st = &s->slots[sl->slot];
		st->refs--;
		if (dirty || st->unsaved) {
			st->unsaved = 0;
			st->writes++;
			enqueue(s, sl->slot, idx, 1);
		}
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
}

/* Locked: drop the write-backs of slab idx that have not started (its data
 * is being discarded: they would only cost disk bandwidth). */
static void cancel_writes(struct st_store *s, int idx)
{
	struct st_queue *q = queue_of(s, &s->slabs[idx]);
	struct st_job **link = &q->head, *prev = NULL;
	while (*link) {
		struct st_job *j = *link;
		if (j->write && j->slab == idx) {
			*link = j->next;
			s->slots[j->slot].writes--;
			free(j);
			continue;
		}
		prev = j;
		link = &j->next;
	}
	q->tail = prev;
}

void store_release_discard(struct st_store *s, int unit, enum st_slab_kind kind)
{
	const int idx = slab_index(s, unit, kind);
	struct st_slab *sl = &s->slabs[idx];
	if (staged(sl, (enum st_slab_kind)(idx % ST_SLAB__COUNT))) {
		pthread_mutex_lock(&s->mu);
		if (sl->slot >= 0) {
			struct st_slot *st = &s->slots[sl->slot];
			st->refs--;
			st->unsaved = 0; /* dropped: its home need not have it */
			pthread_cond_broadcast(&s->cv);
		}
		pthread_mutex_unlock(&s->mu);
	}
	store_discard(s, unit, kind);
}

void store_discard(struct st_store *s, int unit, enum st_slab_kind kind)
{
	const int idx = slab_index(s, unit, kind);
	struct st_slab *sl = &s->slabs[idx];
	if (!staged(sl, (enum st_slab_kind)(idx % ST_SLAB__COUNT))) {
		memset(sl->ptr, 0, sl->bytes);
		return;
	}
	pthread_mutex_lock(&s->mu);
	cancel_writes(s, idx);
	if (sl->slot >= 0) {
		/* An unused slot is let go at once; one still being written keeps
		 * its buffer until that write ends (the write is harmless: a later
		 * write of this slab queues behind it, in another batch). */
		/* The wait lets the lock go: the slot may change hands meanwhile
		 * (taken for another slab once free), so it is looked up again
		 * each time, and let go only while this slab still holds it. */
		while (sl->slot >= 0 && (s->slots[sl->slot].refs || s->slots[sl->slot].fetching))
			pthread_cond_wait(&s->cv, &s->mu);
		if (sl->slot >= 0 && s->slots[sl->slot].owner == idx) {
			struct st_slot *st = &s->slots[sl->slot];
			st->owner = -1;
			st->unsaved = st->prefetched = 0;
		}
		sl->slot = -1;
	}
	sl->zero = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

void store_drain(struct st_store *s)
{
	if (!s->started)
		return;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		int busy = s->q_copy.head || s->q_disk.head;
		for (int i = 0; i < s->n_slots && !busy; i++)
			busy = s->slots[i].fetching || s->slots[i].writes;
		if (!busy)
			break;
		pthread_cond_wait(&s->cv, &s->mu);
	}
	pthread_mutex_unlock(&s->mu);
}

int store_ok(struct st_store *s)
{
	if (!s->started)
		return ST_OK;
	pthread_mutex_lock(&s->mu);
	int failed = s->failed;
	pthread_mutex_unlock(&s->mu);
	return failed ? ST_FAIL : ST_OK;
}

/* ---- reports -------------------------------------------------------------- */

size_t store_kind_bytes(const struct st_store *s, enum st_slab_kind kind, enum st_tier tier)
{
	size_t n = 0;
	for (int u = 0; u < s->n_units; u++) {
		const struct st_slab *sl = &s->slabs[(size_t)u * ST_SLAB__COUNT + kind];
		if (sl->alias_of < 0 && sl->shared_from < 0 && sl->bytes && sl->home == tier)
			n += sl->bytes;
	}
	return n;
}

void store_report(const struct st_store *s)
{
	char b[32];
	st_log_info("memory plan:");
	for (int k = 0; k < ST_SLAB__COUNT; k++) {
		int alias = -1, shared = 0;
		for (int u = 0; u < s->n_units; u++) {
			const struct st_slab *sl = &s->slabs[(size_t)u * ST_SLAB__COUNT + k];
			if (sl->alias_of >= 0)
				alias = sl->alias_of;
			else if (sl->shared_from >= 0)
				shared++;
		}
		if (alias >= 0) {
			st_log_info("  %-12s shares the %s slabs (fp32 compute)", slab_kind_name(k),
				    slab_kind_name((enum st_slab_kind)alias));
			continue;
		}
		char line[320];
		int len = snprintf(line, sizeof line, "  %-12s", slab_kind_name(k));
		int any = 0;
		for (int t = 0; t < ST_TIER__COUNT; t++) {
			size_t n = store_kind_bytes(s, (enum st_slab_kind)k, (enum st_tier)t);
			if (n) {
				len += snprintf(line + len, sizeof line - (size_t)len, " %s on %s",
						fmt_bytes(b, sizeof b, (double)n), tier_name(t));
				any = 1;
			}
		}
		if (!any)
			len += snprintf(line + len, sizeof line - (size_t)len, " none");
		int slots = 0;
		for (int i = 0; i < s->n_slots; i++)
			slots += s->slots[i].pool == k;
		if (slots)
			len += snprintf(line + len, sizeof line - (size_t)len,
					" (streamed through %d %s staging buffers)", slots,
					tier_name(slab_work_tier((enum st_slab_kind)k)));
		if (shared)
			snprintf(line + len, sizeof line - (size_t)len, " (%d units share one slab)",
				 shared + 1);
		st_log_info("%s", line);
	}
	for (int i = 0; i < 2; i++)
		if (s->outside[i].bytes)
			st_log_info("  %-12s %s on host (%s)", s->outside[i].name,
				    fmt_bytes(b, sizeof b, (double)s->outside[i].bytes),
				    s->outside[i].what);
	for (int t = 0; t < ST_TIER__COUNT; t++) {
		const struct st_tier_use *tu = &s->tiers[t];
		char b2[32];
		if (!tu->used && !tu->budget)
			continue;
		st_log_info("  %-6s tier  %s used of %s", tier_name(t),
			    fmt_bytes(b, sizeof b, (double)tu->used),
			    tu->budget ? fmt_bytes(b2, sizeof b2, (double)tu->budget) : "unlimited");
	}
	if (s->io_ready) {
		char dirs[1024];
		int len = 0;
		for (int i = 0; i < s->io.n_dirs; i++)
			len += snprintf(dirs + len, sizeof dirs - (size_t)len, "%s%s%s", i ? ", " : "",
					s->io.dirs[i].path, s->io.dirs[i].direct ? "" : " (buffered)");
		char b2[32];
		st_log_info("  disk I/O: %d director%s (%s), %s blocks, queue depth %d; the files "
			    "take %s in all (each slab whole blocks)",
			    s->io.n_dirs, s->io.n_dirs == 1 ? "y" : "ies", dirs,
			    fmt_bytes(b, sizeof b, (double)s->io.block), s->io.depth,
			    fmt_bytes(b2, sizeof b2, (double)s->io.n_blocks * (double)s->io.block));
	}
}
