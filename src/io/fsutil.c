/* File-system helpers: whole-file read, atomic durable write (temp file in the
 * same directory, fsync, rename, fsync of the directory), mkdir -p and rm -rf.
 *
 * Everything a checkpoint or a prepared data set puts on disk goes through the
 * atomic writer, so a crash or a full disk leaves either the previous file or
 * the complete new one, never a torn one. Every libc call is checked and a
 * failure names the path and strerror(errno). */
#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "io/fsutil.h"
#include "util/check.h"

/* Largest single write(): Linux transfers at most 0x7ffff000 bytes per call. */
#define FS_WRITE_CHUNK ((size_t)1 << 30)

static const char *space_hint(int err)
{
	if (err == ENOSPC || err == EDQUOT)
		return "free some disk space (or raise the quota) and try again";
	if (err == EFBIG) /* SIGXFSZ is ignored (main.c): the limit shows here */
		return "the file passes this process's file-size limit: raise it (ulimit -f "
		       "unlimited) and try again";
	if (err == EACCES || err == EPERM || err == EROFS)
		return "check that the directory exists and is writable";
	return "check the path, its permissions and the free disk space";
}

void fs_dirname(char *out, size_t n, const char *path)
{
	if (n == 0)
		return;
	size_t len = strlen(path);
	while (len > 1 && path[len - 1] == '/') /* trailing slashes */
		len--;
	while (len > 0 && path[len - 1] != '/') /* the last component */
		len--;
	if (len == 0) {
		snprintf(out, n, ".");
		return;
	}
	while (len > 1 && path[len - 1] == '/') /* the separator ("/" itself stays) */
		len--;
	size_t m = len < n - 1 ? len : n - 1;
	memcpy(out, path, m);
	out[m] = '\0';
}

int fs_absolute(char *path, size_t n)
{
	if (!*path || *path == '/')
		return ST_OK;
	/* joined, not resolved: a symlink (data/current, a node's scratch
	 * directory) stays a link, to be followed when the path is used */
	char buf[PATH_MAX], cwd[PATH_MAX];
	ST_CHECK(getcwd(cwd, sizeof cwd), NULL, "cannot read the working directory: %s",
		 strerror(errno));
	const char *rel = path;
	while (rel[0] == '.' && rel[1] == '/')
		rel += 2;
	const int len = snprintf(buf, sizeof buf, "%s/%s", strcmp(cwd, "/") ? cwd : "", rel);
	ST_CHECK(len > 0 && (size_t)len < n && (size_t)len < sizeof buf, "use a shorter path",
		 "path too long: %s/%s", cwd, rel);
	memcpy(path, buf, (size_t)len + 1);
	return ST_OK;
}

/* Whether this process has CAP_SYS_RESOURCE in its effective set. */
static int has_sys_resource(void)
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct data[2] = {0};
	if (syscall(SYS_capget, &hdr, data) != 0)
		return 0;
	return (data[CAP_SYS_RESOURCE / 32].effective >> (CAP_SYS_RESOURCE % 32)) & 1;
}

/* The resuid and resgid of the mount of device dev, from its super options
 * in /proc/self/mountinfo (ext4 shows them where they are not 0). */
static void ext_reserve_owner(dev_t dev, long *uid, long *gid)
{
	*uid = *gid = 0;
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[8192], want[32];
	snprintf(want, sizeof want, " %u:%u ", major(dev), minor(dev));
	while (f && fgets(line, sizeof line, f)) {
		const char *at = strstr(line, want), *dash = strstr(line, " - ");
		if (!at || !dash || at > dash)
			continue;
		const char *opt;
		if ((opt = strstr(dash, "resuid=")))
			*uid = strtol(opt + 7, NULL, 10);
		if ((opt = strstr(dash, "resgid=")))
			*gid = strtol(opt + 7, NULL, 10);
		break;
	}
	if (f)
		fclose(f);
}

/* Whether this process is in the initial user namespace (its uid_map the
 * identity): the kernel checks the capability and compares ids there, and
 * a namespace's root (rootless podman, unshare -r) is neither. */
static int initial_userns(void)
{
	FILE *f = fopen("/proc/self/uid_map", "re");
	unsigned long inside = 1, outside = 1, count = 0;
	const int got = f && fscanf(f, "%lu %lu %lu", &inside, &outside, &count) == 3;
	if (f)
		fclose(f);
	return !f || (got && inside == 0 && outside == 0 && count == 4294967295UL);
}

int fs_may_use_reserved(const char *path)
{
	struct statfs sf;
	struct stat st;
	if (statfs(path, &sf) != 0 || sf.f_type != EXT4_SUPER_MAGIC || stat(path, &st) != 0)
		return 0; /* another file system's f_bavail is what it lets anyone write */
	if (!initial_userns())
		return 0; /* counted short: a refusal, never a save that fails */
	if (has_sys_resource())
		return 1;
	/* as ext4_has_free_clusters: the reserve's owner, or a member of its
	 * group where that is not root's (group 0 alone grants nothing) */
	long uid, gid;
	ext_reserve_owner(st.st_dev, &uid, &gid);
	if ((long)geteuid() == uid)
		return 1;
	if (!gid)
		return 0;
	if ((long)getegid() == gid)
		return 1;
	gid_t groups[256];
	const int n = getgroups(256, groups);
	for (int i = 0; i < n; i++)
		if ((long)groups[i] == gid)
			return 1;
	return 0;
}

double fs_free_bytes(const char *path)
{
	struct statvfs vs;
	if (statvfs(path, &vs) != 0 || vs.f_blocks == 0)
		return -1;
	const double blocks = fs_may_use_reserved(path) ? (double)vs.f_bfree : (double)vs.f_bavail;
	return blocks * (double)vs.f_frsize;
}

int fs_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

int fs_is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Create one directory; an existing directory is fine. */
/* *did: whether this call's mkdir made it. */
static int mkdir_one(const char *dir, const char *full, int *did)
{
	struct stat st;
	*did = 0;
	if (stat(dir, &st) == 0) {
		ST_CHECK(S_ISDIR(st.st_mode), "remove or rename it, or choose another path",
			 "cannot create directory %s: %s exists and is not a directory", full, dir);
		return ST_OK;
	}
	if (mkdir(dir, 0777) == 0) {
		*did = 1;
		return ST_OK;
	}
	int err = errno;
	/* Lost a race with another creator: fine if what now exists is a directory. */
	if (err == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
		return ST_OK;
	ST_ERROR(space_hint(err), "cannot create directory %s: mkdir %s: %s", full, dir,
		 strerror(err));
	return ST_FAIL;
}

int fs_mkdir_p_made(const char *path, size_t *made, int cap, int *n_made)
{
	ST_CHECK(path && *path, "pass a directory path", "cannot create a directory with an empty name");
	size_t len = strlen(path);
	char *buf = st_malloc(len + 1);
	if (!buf)
		return ST_FAIL;
	memcpy(buf, path, len + 1);
	int rc = ST_OK, n = 0, did;
	for (size_t i = 1; i <= len && rc == ST_OK; i++) {
		if (i < len && (buf[i] != '/' || buf[i - 1] == '/'))
			continue;
		if (i < len)
			buf[i] = '\0';
		rc = mkdir_one(buf, path, &did);
		if (rc == ST_OK && did && n < cap)
			made[n++] = i;
		if (i < len)
			buf[i] = '/';
	}
	free(buf);
	if (n_made)
		*n_made = n;
	return rc;
}

int fs_mkdir_p(const char *path) { return fs_mkdir_p_made(path, NULL, 0, NULL); }

void fs_rmdir_made(const char *path, const size_t *made, int n_made)
{
	char buf[4200];
	for (int k = n_made - 1; k >= 0; k--) {
		snprintf(buf, sizeof buf, "%.*s", (int)made[k], path);
		if (rmdir(buf) != 0)
			return; /* not empty (something came in): it and its parents stay */
	}
}

int fs_step_name(const char *name, long *step)
{
	char *end;
	if (strncmp(name, "step-", 5) != 0 || name[5] < '0' || name[5] > '9')
		return 0; /* digits only: not "step--1", "step-+1" or "step- 1" */
	*step = strtol(name + 5, &end, 10);
	return *end == '\0' && end != name + 5;
}

const char *fs_run_marker(const char *dir)
{
	static const char *files[] = {"trainer.json", "latest", "metrics.jsonl", ".lock"};
	char path[4300];
	struct stat st;
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, files[i]);
		if (lstat(path, &st) == 0) /* a dangling latest too */
			return files[i];
	}
	DIR *d = opendir(dir);
	const char *found = NULL;
	long step;
	for (struct dirent *e; d && !found && (e = readdir(d));)
		if (fs_step_name(e->d_name, &step))
			found = "step-N checkpoints";
	if (d)
		closedir(d);
	return found;
}

int fs_fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ST_CHECK(fd >= 0, "check that the directory exists and is readable",
		 "cannot open directory %s to sync it: %s", path, strerror(errno));
	/* Some file systems cannot sync a directory (EINVAL); nothing more to do there. */
	if (fsync(fd) != 0 && errno != EINVAL) {
		int err = errno;
		close(fd);
		ST_ERROR(space_hint(err), "cannot sync directory %s: %s", path, strerror(err));
		return ST_FAIL;
	}
	ST_CHECK(close(fd) == 0, space_hint(errno), "cannot close directory %s: %s", path,
		 strerror(errno));
	return ST_OK;
}

int fs_atomic_begin(struct fs_atomic *a, const char *path)
{
	a->fd = -1;
	a->path = a->tmp = NULL;
	size_t cap = strlen(path) + 64;
	a->path = st_malloc(strlen(path) + 1);
	a->tmp = st_malloc(cap);
	if (!a->path || !a->tmp) {
		fs_atomic_abort(a);
		return ST_FAIL;
	}
	strcpy(a->path, path);
	/* O_EXCL with a pid + counter suffix rather than mkstemp: mkstemp makes
	 * the file 0600, and the result should get the usual umask permissions. */
	for (int k = 0; k < 1000; k++) {
		snprintf(a->tmp, cap, "%s.tmp.%ld.%d", path, (long)getpid(), k);
		a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (a->fd >= 0 || errno != EEXIST)
			break;
	}
	if (a->fd < 0) {
		int err = errno;
		ST_ERROR(space_hint(err), "cannot create %s (temp file %s): %s", path, a->tmp,
			 strerror(err));
		free(a->tmp); /* nothing was created: nothing to unlink */
		a->tmp = NULL;
		fs_atomic_abort(a);
		return ST_FAIL;
	}
	return ST_OK;
}

void fs_atomic_abort(struct fs_atomic *a)
{
	if (a->fd >= 0)
		close(a->fd); /* the file is being thrown away: its close status is moot */
	if (a->tmp)
		unlink(a->tmp);
	free(a->tmp);
	free(a->path);
	a->fd = -1;
	a->path = a->tmp = NULL;
}

int fs_atomic_write(struct fs_atomic *a, const void *data, size_t len)
{
	const char *p = data;
	while (len > 0) {
		size_t want = len < FS_WRITE_CHUNK ? len : FS_WRITE_CHUNK;
		ssize_t w = write(a->fd, p, want);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			/* write() returning 0 for a positive count means no space. */
			int err = w < 0 ? errno : ENOSPC;
			ST_ERROR(space_hint(err), "cannot write %s (temp file %s): %s", a->path,
				 a->tmp, strerror(err));
			fs_atomic_abort(a);
			return ST_FAIL;
		}
		p += w;
		len -= (size_t)w;
	}
	return ST_OK;
}

int fs_atomic_commit(struct fs_atomic *a)
{
	const char *what = NULL;
	if (fsync(a->fd) != 0) {
		what = "fsync";
	} else {
		int rc = close(a->fd);
		a->fd = -1; /* released even when close fails: never close it twice */
		if (rc != 0)
			what = "close";
	}
	if (!what && rename(a->tmp, a->path) != 0)
		what = "rename";
	if (what) {
		int err = errno;
		ST_ERROR(space_hint(err), "cannot write %s (%s of temp file %s): %s", a->path, what,
			 a->tmp, strerror(err));
		fs_atomic_abort(a);
		return ST_FAIL;
	}
	/* The rename is only durable once the directory entry is on disk. */
	char *dir = st_malloc(strlen(a->path) + 2);
	int rc = ST_FAIL;
	if (dir) {
		fs_dirname(dir, strlen(a->path) + 2, a->path);
		rc = fs_fsync_dir(dir);
		free(dir);
	}
	free(a->tmp); /* renamed away: nothing left to unlink */
	a->tmp = NULL;
	fs_atomic_abort(a);
	return rc;
}

int fs_write_file_atomic(const char *path, const void *data, size_t len)
{
	struct fs_atomic a;
	ST_TRY(fs_atomic_begin(&a, path));
	ST_TRY(fs_atomic_write(&a, data, len));
	return fs_atomic_commit(&a);
}

int fs_read_file(const char *path, char **data, size_t *len)
{
	return fs_read_file_max(path, SIZE_MAX, data, len);
}

int fs_read_file_max(const char *path, size_t max, char **data, size_t *len)
{
	*data = NULL;
	*len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ST_CHECK(fd >= 0, "check the path and its permissions", "cannot open %s: %s", path,
		 strerror(errno));
	struct stat st;
	int fst = fstat(fd, &st);
	if (fst != 0 || S_ISDIR(st.st_mode)) {
		int err = fst != 0 ? errno : EISDIR;
		close(fd);
		ST_ERROR("give the path of a file", "cannot read %s: %s", path, strerror(err));
		return ST_FAIL;
	}
	/* Size from fstat is a first guess only: pipes and /proc files report 0. */
	size_t cap = (S_ISREG(st.st_mode) ? (size_t)st.st_size : 0) + 4096, n = 0;
	char *buf = st_malloc(cap);
	for (;;) {
		if (!buf) {
			close(fd);
			return ST_FAIL;
		}
		if (n + 1 == cap) {
			char *grown = realloc(buf, cap * 2);
			if (!grown) {
				ST_ERROR("add memory or use a smaller file",
					 "out of memory reading %s (%zu bytes so far)", path, n);
				free(buf);
				close(fd);
				return ST_FAIL;
			}
			buf = grown;
			cap *= 2;
		}
		ssize_t r = read(fd, buf + n, cap - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int err = errno;
			free(buf);
			close(fd);
			ST_ERROR("check the file and the device it is on", "cannot read %s: %s",
				 path, strerror(err));
			return ST_FAIL;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > max) {
			free(buf);
			close(fd);
			ST_ERROR("give the right file",
				 "stopped reading %s after %zu MiB: larger than any file of this kind", path,
				 max >> 20);
			return ST_FAIL;
		}
	}
	buf[n] = '\0';
	if (close(fd) != 0) {
		int err = errno;
		free(buf);
		ST_ERROR("check the file and the device it is on", "cannot close %s: %s", path,
			 strerror(err));
		return ST_FAIL;
	}
	*data = buf;
	*len = n;
	return ST_OK;
}

int fs_unlink(const char *path)
{
	ST_CHECK(unlink(path) == 0 || errno == ENOENT, "check the permissions of the directory",
		 "cannot remove %s: %s", path, strerror(errno));
	return ST_OK;
}

/* rm -rf for one path: symlinks are removed, never followed. */
static int rmtree_rec(const char *path)
{
	struct stat st;
	if (lstat(path, &st) != 0) {
		ST_CHECK(errno == ENOENT, "check the permissions of the directory",
			 "cannot remove %s: %s", path, strerror(errno));
		return ST_OK; /* already gone */
	}
	if (!S_ISDIR(st.st_mode))
		return fs_unlink(path);
	DIR *d = opendir(path);
	ST_CHECK(d, "check the permissions of the directory", "cannot open directory %s: %s", path,
		 strerror(errno));
	int rc = ST_OK;
	size_t plen = strlen(path);
	for (;;) {
		errno = 0;
		struct dirent *e = readdir(d);
		if (!e) {
			if (errno != 0) {
				ST_ERROR("check the permissions of the directory",
					 "cannot list directory %s: %s", path, strerror(errno));
				rc = ST_FAIL;
			}
			break;
		}
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char *child = st_malloc(plen + strlen(e->d_name) + 2);
		if (!child) {
			rc = ST_FAIL;
			break;
		}
		sprintf(child, "%s/%s", path, e->d_name);
		rc = rmtree_rec(child);
		free(child);
		if (rc != ST_OK)
			break;
	}
	if (closedir(d) != 0 && rc == ST_OK) {
		ST_ERROR("check the permissions of the directory", "cannot close directory %s: %s",
			 path, strerror(errno));
		rc = ST_FAIL;
	}
	if (rc == ST_OK && rmdir(path) != 0) {
		ST_ERROR("check the permissions of the directory", "cannot remove directory %s: %s",
			 path, strerror(errno));
		rc = ST_FAIL;
	}
	return rc;
}

int fs_rmtree(const char *path)
{
	ST_CHECK(path && *path, "pass a directory path", "cannot remove a path with an empty name");
	return rmtree_rec(path);
}

int fs_map_file(const char *path, const char *what, void **map, size_t *size)
{
	*map = NULL;
	*size = 0;
	/* O_NONBLOCK: a FIFO's open would wait for a writer forever; it is
	 * refused below as not a regular file */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	ST_CHECK(fd >= 0, "check the path and its permissions", "cannot open %s %s: %s", what, path,
		 strerror(errno));
	struct stat st;
	const char *fail = NULL;
	int err = 0;
	if (fstat(fd, &st) != 0) {
		fail = "cannot stat";
		err = errno;
	} else if (!S_ISREG(st.st_mode)) {
		close(fd);
		ST_ERROR("give the path of a regular file", "cannot read %s %s: it is %s", what,
			 path, S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
		return ST_FAIL;
	} else if (st.st_size > 0) {
		void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED) {
			fail = "cannot map";
			err = errno;
		} else {
			*map = p;
			*size = (size_t)st.st_size;
		}
	}
	/* The mapping keeps the file referenced; the descriptor is no longer needed. */
	if (close(fd) != 0 && !fail) {
		fail = "cannot close";
		err = errno;
	}
	if (fail) {
		fs_unmap_file(*map, *size);
		*map = NULL;
		*size = 0;
		ST_ERROR("check the file and the device it is on", "%s %s %s: %s", fail, what, path,
			 strerror(err));
		return ST_FAIL;
	}
	return ST_OK;
}

void fs_unmap_file(void *map, size_t size)
{
	if (map)
		munmap(map, size); /* fails only for a bad range, which would be our bug */
}

void fs_map_drop(const void *map, size_t size, size_t from, size_t to)
{
	const size_t block = (size_t)2 << 20;
	from = from / block * block;
	to = (to + block - 1) / block * block;
	to = to < size ? to : size;
	if (map && to > from)
		madvise((char *)map + from, to - from, MADV_DONTNEED);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char *fs_first_duplicate(const char **names, size_t n)
{
	qsort(names, n, sizeof *names, cmp_str);
	for (size_t i = 1; i < n; i++)
		if (!strcmp(names[i - 1], names[i]))
			return names[i];
	return NULL;
}

const char *fs_json_duplicate_member(const cJSON *node)
{
	if (!cJSON_IsObject(node))
		return NULL;
	size_t n = 0;
	for (const cJSON *c = node->child; c; c = c->next)
		n++;
	if (n < 2)
		return NULL;
	const char *small[32], **keys = n <= 32 ? small : malloc(n * sizeof *keys);
	if (!keys) /* out of memory: the check is skipped, not the file */
		return NULL;
	size_t k = 0;
	for (const cJSON *c = node->child; c; c = c->next)
		keys[k++] = c->string ? c->string : "";
	const char *dup = fs_first_duplicate(keys, n);
	if (keys != small)
		free(keys);
	return dup;
}

const char *fs_json_duplicate_key(const cJSON *node)
{
	if (!node)
		return NULL;
	const char *own = fs_json_duplicate_member(node);
	if (own)
		return own;
	for (const cJSON *c = node->child; c; c = c->next) {
		const char *dup = fs_json_duplicate_key(c);
		if (dup)
			return dup;
	}
	return NULL;
}

size_t fs_json_rest(const char *text, size_t from, size_t len)
{
	while (from < len && (text[from] == ' ' || text[from] == '\t' || text[from] == '\n' ||
			      text[from] == '\r'))
		from++;
	return from;
}

int fs_read_json(const char *path, cJSON **root, const char *hint)
{
	char *text = NULL;
	size_t len = 0;
	*root = NULL;
	/* the largest JSON strata reads is a tokenizer.json, tens of MiB */
	ST_TRY(fs_read_file_max(path, (size_t)1 << 30, &text, &len));
	const char *end = NULL;
	cJSON *r = cJSON_ParseWithLengthOpts(text, len, &end, 0);
	/* only white space may follow the value: another value or text after
	 * it is damage that cJSON alone would let through */
	const size_t after = r && end ? fs_json_rest(text, (size_t)(end - text), len) : len;
	free(text);
	if (r && after < len) {
		cJSON_Delete(r);
		ST_ERROR(hint, "%s: not valid JSON (more after the object, at byte %zu)", path, after);
		return ST_FAIL;
	}
	if (!cJSON_IsObject(r)) {
		const char *kind = cJSON_IsArray(r) ? "array" : cJSON_IsString(r) ? "string" : "value";
		if (r)
			ST_ERROR(hint, "%s: holds a JSON %s where an object ({...}) belongs", path, kind);
		else
			ST_ERROR(hint, "%s: not valid JSON", path);
		cJSON_Delete(r);
		return ST_FAIL;
	}
	const char *dup = fs_json_duplicate_key(r);
	if (dup) {
		ST_ERROR("keep one of them: readers disagree on which counts (strata's JSON parser "
			 "would take the first, Python's json module and transformers the last)",
			 "%s: the key \"%s\" appears twice in one object", path, dup);
		cJSON_Delete(r);
		return ST_FAIL;
	}
	*root = r;
	return ST_OK;
}

void json_add_exact(struct cJSON *r, const char *key, double v)
{
	char buf[40];
	if (!isfinite(v)) {
		cJSON_AddNullToObject(r, key); /* JSON has no inf or NaN */
		return;
	}
	if (v == floor(v) && fabs(v) <= 9007199254740992.0) {
		snprintf(buf, sizeof buf, "%.0f", v);
	} else {
		for (int prec = 15; prec <= 17; prec++) {
			snprintf(buf, sizeof buf, "%.*g", prec, v);
			if (strtod(buf, NULL) == v)
				break;
		}
	}
	cJSON_AddRawToObject(r, key, buf);
}
