/* File-system helpers for atomic, durable writes. */
#ifndef ST_FSUTIL_H
#define ST_FSUTIL_H

#include <stddef.h>

/* mkdir -p; error names the path. */
int fs_mkdir_p(const char *path);
/* fsync a directory so renames and creations inside it are durable. */
int fs_fsync_dir(const char *path);
/* Write a whole file: temp name in the same directory, fsync, rename. */
int fs_write_file_atomic(const char *path, const void *data, size_t len);
/* Read a whole file into a NUL-terminated malloc'd buffer. */
int fs_read_file(const char *path, char **data, size_t *len);
/* Recursively remove a directory tree (used for stale temp checkpoints). */
int fs_rmtree(const char *path);
int fs_exists(const char *path);
int fs_is_dir(const char *path);
/* The directory containing path ("." when none), into out (size n). */
void fs_dirname(char *out, size_t n, const char *path);

#endif
