/* The store: where every slab of every unit lives, under per-tier byte budgets,
 * and how it moves.
 *
 * Tiers: DEVICE (GPU memory; on a CPU-only machine a budgeted RAM arena, so
 * the same executor runs everywhere), HOST (RAM; pinned when CUDA is present)
 * and DISK (one or more offload directories, store/io.h). A slab is one
 * contiguous buffer of one kind for one unit, with a home tier. The store
 * never knows what a slab means; model code never knows where a slab lives:
 * the executor asks the store for a pointer (store_acquire) before a unit runs
 * and hands it back (store_release) after.
 *
 * Each kind has a working tier where it is computed on: weights, gradients
 * and activations on the device, optimizer state on the host (the CPU
 * optimizer). A slab whose home is its working tier (or the device, which on
 * the CPU backend is host memory too) is resident: acquire returns its home
 * memory and nothing moves. Any other slab is staged: acquire gives it a slot
 * from its kind's pool of staging buffers in the working tier, filled from
 * home by one of two queues, each a thread that runs its transfers in order:
 *   copy: host <-> device copies (memcpy on the CPU backend),
 *   disk: reads and writes of the disk tier (io_uring, checksummed).
 * store_prefetch starts that fill early; store_release(dirty) queues the
 * write-back and returns at once (the slot stays readable and is reused only
 * once the write is done); store_discard drops a slab's contents so its next
 * acquire is a zero-filled slot with no read (gradients after their update).
 * Order between threads is by a mutex and condition variable, never polling.
 *
 * A slab's data is in at most one slot at a time, so there is one current
 * copy. The transfers of one slab all run on one queue, in FIFO order, so a
 * read queued after a write sees it. A transfer error (full disk, checksum
 * mismatch) is reported where it happens and makes the store failed: the
 * queues then skip their transfers, acquire keeps returning buffers, and the
 * caller sees the failure at its next store_ok() and stops. */
#ifndef ST_STORE_H
#define ST_STORE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "store/io.h"
#include "util/trace.h"

enum st_tier { ST_TIER_DEVICE, ST_TIER_HOST, ST_TIER_DISK, ST_TIER__COUNT };

enum st_slab_kind {
	ST_SLAB_W, /* compute weights */
	ST_SLAB_M, /* master weights (aliases W when the compute dtype is fp32) */
	ST_SLAB_S, /* optimizer state */
	ST_SLAB_G, /* gradients */
	ST_SLAB_A, /* saved activations and scratch (one per micro-batch shape) */
	ST_SLAB__COUNT
};

/* What the caller does with an acquired slab. */
enum st_access { ST_ACCESS_READ, ST_ACCESS_WRITE };

struct st_slab {
	enum st_tier home;
	size_t bytes;
	void *ptr;       /* home memory (device or host home), else NULL */
	uint64_t disk_off; /* disk home: offset in the disk tier's virtual space */
	int alias_of;    /* kind this slab aliases (M -> W on CPU), or -1 */
	int shared_from; /* unit whose slab of this kind it shares, or -1 */
	int slot;        /* staging slot holding its data, or -1 */
	int zero;        /* contents are all zeros and need no read (fresh or discarded) */
};

struct st_slot {
	void *buf;
	int pool;        /* the kind whose pool it belongs to */
	int owner;       /* slab index (unit * ST_SLAB__COUNT + kind), or -1 */
	int refs;        /* acquisitions not yet released */
	int fetching;    /* a fill is queued or running */
	int writes;      /* write-backs queued or running */
	int unsaved;     /* holds data its home lacks (zero-filled) with no write queued */
	int prefetched;  /* filled ahead and not yet acquired */
	uint64_t lru;
};

struct st_tier_use {
	size_t budget;   /* hard limit in bytes; 0 = unlimited */
	size_t used, peak;
};

/* One transfer queue: a thread running jobs in FIFO order. */
struct st_job;
struct st_queue {
	pthread_t thread;
	int started;
	struct st_job *head, *tail;
	double busy_s;   /* time spent in transfers */
	uint64_t bytes;
};

/* Offload settings (disk tier and staging). */
struct st_offload_cfg {
	const char *const *dirs;
	int n_dirs;
	size_t io_block;  /* default 1 MiB */
	int io_depth;     /* default 16 */
	int pool_slots[ST_SLAB__COUNT]; /* staging slots per kind (0: none needed) */
};

/* Host bytes held outside the store, a row of its report. */
struct st_outside {
	size_t bytes;
	const char *name, *what; /* "accumulators", "per-layer GaLore's ..." */
};

struct st_store {
	int n_units;
	struct st_slab *slabs; /* n_units x ST_SLAB__COUNT */
	struct st_tier_use tiers[ST_TIER__COUNT];
	uint64_t disk_bytes;   /* disk tier's virtual space handed out so far */
	/* staging and movement (after store_start) */
	int started;
	int n_slots;
	struct st_slot *slots;
	uint64_t clock;        /* lru stamps */
	struct st_io io;
	int io_ready;
	struct st_queue q_copy, q_disk;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stopping;
	int failed;
	size_t io_block;
	/* counts, for reports */
	uint64_t hits, fills, writebacks;
	double wait_s[2];      /* time acquirers waited for transfers: main thread, worker */
	struct st_trace *trace; /* may be NULL */
	/* host memory the run holds outside the slabs, counted in the host
	 * tier's use (per-layer GaLore's accumulators, GaLore's projection
	 * scratch), for the report */
	struct st_outside outside[2];
};

const char *tier_name(enum st_tier t);
const char *slab_kind_name(enum st_slab_kind k);
/* The tier where slabs of a kind are computed on. */
enum st_tier slab_work_tier(enum st_slab_kind k);

int store_init(struct st_store *s, int n_units, const size_t budgets[ST_TIER__COUNT]);
void store_free(struct st_store *s);
/* Allocate a zeroed slab with home tier; device and host slabs are 64-byte
 * aligned memory, disk slabs a block-aligned range of the disk tier (zeros
 * until first written). Fails with the number of missing bytes when the
 * tier's budget would be exceeded. */
int store_alloc(struct st_store *s, int unit, enum st_slab_kind kind, enum st_tier tier,
		size_t bytes);
/* Make slab kind `kind` share the memory of `target` (M aliasing W on CPU). */
void store_alias(struct st_store *s, int unit, enum st_slab_kind kind, enum st_slab_kind target);
/* Make unit's slab `kind` the same memory as from_unit's (one gradient slab
 * for all layers when their gradients are consumed unit by unit). Counted
 * once, freed once. Resident slabs only. */
void store_share(struct st_store *s, int unit, enum st_slab_kind kind, int from_unit);
/* After every alloc: size the staging pools (counted in their working tier's
 * budget), reserve the disk tier in cfg's directories, start the queues.
 * Without staged slabs it does nothing (and needs no cfg). */
int store_start(struct st_store *s, const struct st_offload_cfg *cfg);
/* Whether the slab is staged (its home is not where it is computed on). */
int store_is_staged(const struct st_store *s, int unit, enum st_slab_kind kind);

/* Start filling a staged slab's slot ahead of its acquire, if a slot is free. */
void store_prefetch(struct st_store *s, int unit, enum st_slab_kind kind);
/* A pointer to the slab's data in its working tier, valid until
 * store_release. ST_ACCESS_WRITE waits for earlier write-backs of it to finish. */
void *store_acquire_as(struct st_store *s, int unit, enum st_slab_kind kind, enum st_access a);
static inline void *store_acquire(struct st_store *s, int unit, enum st_slab_kind kind)
{
	return store_acquire_as(s, unit, kind, ST_ACCESS_WRITE);
}
/* dirty: the caller wrote to the slab and it must reach its home. */
void store_release(struct st_store *s, int unit, enum st_slab_kind kind, int dirty);
/* The slab's contents are no longer needed: it reads as zeros from now on. */
void store_discard(struct st_store *s, int unit, enum st_slab_kind kind);
/* store_release and store_discard in one: the caller's acquisition handed
 * back and its data dropped, with nothing written home (a release of a slot
 * that was zero-filled queues its write-back, which a discard after it
 * could only cancel where it had not started). */
void store_release_discard(struct st_store *s, int unit, enum st_slab_kind kind);
/* Wait until every queued transfer has finished. */
void store_drain(struct st_store *s);
/* Which thread calls, for the wait accounting: 0 the main thread (default),
 * 1 a worker (the optimizer thread). */
void store_thread_role(int role);
/* ST_FAIL (already reported) once a transfer has failed. */
int store_ok(struct st_store *s);

static inline struct st_slab *store_slab(struct st_store *s, int unit, enum st_slab_kind kind)
{
	return &s->slabs[(size_t)unit * ST_SLAB__COUNT + kind];
}
/* Print where each slab kind lives and how many bytes each tier holds. */
void store_report(const struct st_store *s);
/* Bytes of slabs of a kind whose home is tier (aliases and shares not counted). */
size_t store_kind_bytes(const struct st_store *s, enum st_slab_kind kind, enum st_tier tier);
/* "1.5 GiB" style formatting into buf. */
const char *fmt_bytes(char *buf, size_t n, double bytes);

#endif
