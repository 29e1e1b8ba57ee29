/* File-system helpers for atomic, durable writes. */
#ifndef ST_FSUTIL_H
#define ST_FSUTIL_H

#include <stddef.h>

/* mkdir -p; error names the path. */
int fs_mkdir_p(const char *path);
/* The same, recording the directories its own mkdir made (not those that
 * were there, or that another process made first): their lengths as
 * prefixes of path, in the order made, at most cap of them in made[],
 * their count in *n_made. */
int fs_mkdir_p_made(const char *path, size_t *made, int cap, int *n_made);
#define ST_MADE_MAX 64 /* levels recorded (and removed again) by the callers */
/* Remove again (rmdir: only while empty) the directories fs_mkdir_p_made
 * recorded for path, the last made first. */
void fs_rmdir_made(const char *path, const size_t *made, int n_made);
/* Whether name is a checkpoint directory's, "step-N": N into *step. */
int fs_step_name(const char *name, long *step);
/* What makes dir a training run's directory or a checkpoint: the name of
 * the first of trainer.json, latest, metrics.jsonl, .lock or a step-N
 * directory found in it, or NULL for none. */
const char *fs_run_marker(const char *dir);
/* fsync a directory so renames and creations inside it are durable. */
int fs_fsync_dir(const char *path);
/* Write a whole file: temp name in the same directory, fsync, rename. */
int fs_write_file_atomic(const char *path, const void *data, size_t len);
/* Read a whole file into a NUL-terminated malloc'd buffer. */
int fs_read_file(const char *path, char **data, size_t *len);
/* The same, refusing more than max bytes (a JSON path given /dev/zero). */
int fs_read_file_max(const char *path, size_t max, char **data, size_t *len);
/* Read and parse a JSON file that must hold an object: *root (free with
 * cJSON_Delete), or an error "PATH: not valid JSON" with hint. */
struct cJSON;
int fs_read_json(const char *path, struct cJSON **root, const char *hint);
/* Sort names in place and return one that occurs twice, or NULL. */
const char *fs_first_duplicate(const char **names, size_t n);
/* The first key that appears twice in one object of the tree under node, or
 * NULL. JSON leaves a repeated key's meaning open (RFC 8259, 4): cJSON finds
 * the first, Python's json module keeps the last, so a file read both by
 * strata and by transformers is refused rather than read two ways.
 * fs_read_json refuses such files. */
const char *fs_json_duplicate_key(const struct cJSON *node);
/* The same for node's own members alone (not those of objects inside it). */
const char *fs_json_duplicate_member(const struct cJSON *node);
/* Add v to r under key in digits that read back as v exactly (cJSON's own
 * printing keeps 15); null where v is not finite. */
void json_add_exact(struct cJSON *r, const char *key, double v);
/* The first byte of text[from, len) that is not JSON white space (len when
 * none): what follows a parsed value must be only that. */
size_t fs_json_rest(const char *text, size_t from, size_t len);
/* Remove a file (or link); one already gone is fine; an error names it. */
int fs_unlink(const char *path);
/* Recursively remove a directory tree (used for stale temp checkpoints). */
int fs_rmtree(const char *path);
/* The bytes this process may still write on path's file system: what is
 * free to everyone, and the blocks ext4 reserves (its 5%) where
 * fs_may_use_reserved says this process may use them (being root is not
 * enough: a mount with another resuid, in a container whose root lacks
 * CAP_SYS_RESOURCE, keeps them from it); -1 where it cannot tell (no
 * statvfs, or a file system that reports no size, as ramfs). */
double fs_free_bytes(const char *path);
/* Whether this process may write into the blocks path's file system
 * reserves: an ext2/3/4 file system, the initial user namespace, and
 * CAP_SYS_RESOURCE, the mount's resuid (0, root, unless the mount or the
 * image says otherwise) or its resgid where that is not 0. */
int fs_may_use_reserved(const char *path);
int fs_exists(const char *path);
int fs_is_dir(const char *path);
/* Make path (a buffer of size n) absolute in place, so that it still names
 * the same file from another working directory: the working directory
 * joined to it (leading "./" dropped; symlinks not resolved). "" and
 * absolute paths stay. */
int fs_absolute(char *path, size_t n);
/* The directory containing path ("." when none), into out (size n). */
void fs_dirname(char *out, size_t n, const char *path);

/* Map a whole regular file read-only (MAP_PRIVATE); *map is NULL for an empty
 * file. what ("token shard", "safetensors file") goes into the messages. */
int fs_map_file(const char *path, const char *what, void **map, size_t *size);
/* Undo fs_map_file; a NULL map is fine. */
void fs_unmap_file(void *map, size_t size);
/* Bytes [from, to) of a read-only mapping of size bytes (fs_map_file's),
 * read: their pages leave the resident set, with their neighbours out to
 * whole 2 MiB blocks (a read fault maps the pages around it too, 64 KiB by
 * default and at most 2 MiB; dropping only the range's own pages left
 * those). They come back from the file when read again. */
void fs_map_drop(const void *map, size_t size, size_t from, size_t to);

/* Streaming form of fs_write_file_atomic, for writers that produce a file in
 * pieces (safetensors, shards): begin creates a temp file next to path, write
 * appends, commit fsyncs, renames over path and fsyncs the directory; abort
 * (also called by a failing write or commit) closes and unlinks the temp file.
 * Readers therefore see either the old file or the complete new one. */
struct fs_atomic {
	int fd;
	char *path, *tmp;
};
int fs_atomic_begin(struct fs_atomic *a, const char *path);
int fs_atomic_write(struct fs_atomic *a, const void *data, size_t len);
int fs_atomic_commit(struct fs_atomic *a);
void fs_atomic_abort(struct fs_atomic *a);

#endif
