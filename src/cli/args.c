/* The shared argument parser; see cli.h. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "trainer/options.h"
#include "util/check.h"
#include "util/parse.h"

const char cli_bare[] = "true";

/* Whether two flags' names are one option ('_' and '-' alike). */
static int same_key(const char *x, const char *y)
{
	for (; *x && *y; x++, y++)
		if (*x != *y && !((*x == '_' || *x == '-') && (*y == '_' || *y == '-')))
			return 0;
	return *x == *y;
}

int cli_parse(struct cli_args *a, int argc, char **argv)
{
	memset(a, 0, sizeof *a);
	for (int i = 0; i < argc; i++) {
		const char *s = !strcmp(argv[i], "-h") ? "--help" : argv[i];
		ST_CHECK_USAGE(s[0] == '-' && s[1] == '-' && s[2], "flags look like --name value",
			 "unexpected argument '%s'", s);
		ST_CHECK_USAGE(a->n < CLI_MAX_ARGS, "concatenate inputs into fewer files",
			 "too many arguments (more than %d options)", CLI_MAX_ARGS);
		const char *eq = strchr(s, '=');
		if (eq) {
			a->key[a->n] = strndup(s + 2, (size_t)(eq - s - 2));
			a->val[a->n] = eq + 1;
		} else {
			a->key[a->n] = s + 2;
			if (i + 1 < argc && !(argv[i + 1][0] == '-' && argv[i + 1][1] == '-'))
				a->val[a->n] = argv[++i];
			else
				a->val[a->n] = cli_bare;
		}
		a->n++;
	}
	/* An option given twice: the last one wins, as a wrapper script's
	 * defaults followed by the user's own expect, and is said where the
	 * values differ (it won without a word); two --config files are
	 * refused (the first was dropped whole, not merged). --input and
	 * --offload-dir are lists. */
	for (int i = 0; i < a->n; i++)
		for (int j = i - 1; j >= 0; j--) { /* the occurrence just before */
			if (!same_key(a->key[i], a->key[j]) || same_key(a->key[i], "input") ||
			    same_key(a->key[i], "offload-dir"))
				continue;
			const char *was = a->val[j] == cli_bare ? "" : a->val[j];
			const char *now = a->val[i] == cli_bare ? "" : a->val[i];
			ST_CHECK_USAGE(!same_key(a->key[i], "config"), "give one --config",
				 "--config is given twice ('%s' and '%s'): the files are not merged",
				 was, now);
			if (strcmp(was, now) != 0)
				st_log_warn("--%s is given again ('%s', then '%s'): the last one given is "
					    "used",
					    a->key[i], was, now);
			break;
		}
	return ST_OK;
}

int cli_start(struct cli_args *a, int argc, char **argv, const char *usage)
{
	if (cli_parse(a, argc - 1, argv + 1) != ST_OK)
		return 2;
	if (cli_has(a, "help")) {
		fputs(usage, stdout);
		return 0;
	}
	return CLI_RUN;
}

int cli_key_is(const char *given, const char *key)
{
	for (; *given && *key; given++, key++)
		if (*given != *key && !(*given == '_' && *key == '-'))
			return 0;
	return *given == *key;
}

const char *cli_get(struct cli_args *a, const char *key, const char *def)
{
	const char *v = def;
	int known = 0;
	for (int i = 0; i < a->n_asked && !known; i++)
		known = !strcmp(a->asked[i], key);
	if (!known && a->n_asked < (int)(sizeof a->asked / sizeof a->asked[0]) &&
	    strlen(key) < sizeof a->asked[0])
		snprintf(a->asked[a->n_asked++], sizeof a->asked[0], "%s", key);
	for (int i = 0; i < a->n; i++)
		if (cli_key_is(a->key[i], key)) {
			v = a->val[i];
			a->used[i] = 1;
		}
	return v;
}

int cli_has(struct cli_args *a, const char *key)
{
	return cli_get(a, key, NULL) != NULL;
}

int cli_get_str(struct cli_args *a, const char *key, const char *def, const char **out)
{
	*out = cli_get(a, key, def);
	ST_CHECK_USAGE(*out != cli_bare,
		 "give the value after it (a value that starts with -- as --name=VALUE)",
		 "--%s needs a value", key);
	return ST_OK;
}

int cli_get_bool(struct cli_args *a, const char *key, int *out)
{
	const char *v = cli_get(a, key, NULL);
	*out = !v ? 0 : v == cli_bare ? 1 : train_opts_bool(v);
	ST_CHECK_USAGE(*out >= 0, "give the flag alone, or true or false after it",
		 "--%s: '%s' is not true or false", key, v);
	return ST_OK;
}

/* The file being written for --key: PATH.tmp, renamed over PATH by
 * cli_close_out once complete. */
static void out_tmp(char *buf, size_t n, const char *path)
{
	snprintf(buf, n, "%s.tmp", path);
}

/* The --json files being written and not yet renamed into place: removed
 * at exit, so that a run refused or failed after opening one (a bad option
 * value checked later, a measurement that failed) leaves no PATH.tmp. The
 * only process-wide state here: exit is process-wide. */
static char pending[4][4200];

static void remove_pending(void)
{
	for (int i = 0; i < 4; i++)
		if (pending[i][0])
			unlink(pending[i]);
}

int cli_get_out(struct cli_args *a, const char *key, FILE **out)
{
	const char *path;
	*out = NULL;
	ST_TRY(cli_get_str(a, key, NULL, &path));
	if (!path)
		return ST_OK;
	char tmp[4200];
	ST_CHECK_USAGE(strlen(path) < sizeof tmp - 8, "give a shorter path", "--%s: path too long", key);
	out_tmp(tmp, sizeof tmp, path);
	*out = fopen(tmp, "w");
	ST_CHECK(*out, "give a path in a directory that exists and is writable",
		 "--%s: cannot write %s: %s", key, path, strerror(errno));
	static int registered;
	if (!registered)
		registered = atexit(remove_pending) == 0;
	for (int i = 0; i < 4; i++)
		if (!pending[i][0]) {
			snprintf(pending[i], sizeof pending[i], "%s", tmp);
			break;
		}
	return ST_OK;
}

int cli_close_out(struct cli_args *a, const char *key, FILE *f)
{
	const char *path = cli_get(a, key, NULL);
	char tmp[4200];
	out_tmp(tmp, sizeof tmp, path);
	const int bad = fclose(f) != 0; /* a full disk shows here */
	ST_CHECK(!bad, "free some space and run again; the previous file is untouched",
		 "--%s: writing %s: %s", key, tmp, strerror(errno));
	ST_CHECK(rename(tmp, path) == 0, NULL, "--%s: renaming %s to %s: %s", key, tmp, path,
		 strerror(errno));
	for (int i = 0; i < 4; i++)
		if (!strcmp(pending[i], tmp))
			pending[i][0] = '\0';
	return ST_OK;
}

int cli_get_long(struct cli_args *a, const char *key, long def, long lo, long hi, long *out)
{
	const char *v = cli_get(a, key, NULL);
	*out = def;
	if (!v)
		return ST_OK;
	ST_CHECK_USAGE(v != cli_bare, "give a whole number after it", "--%s needs a value", key);
	long x = 0;
	const enum st_parse r = st_parse_whole(v, &x);
	ST_CHECK_USAGE(r != ST_PARSE_NOT_INT, "give a whole number", "--%s: '%s' is not an integer", key, v);
	ST_CHECK_USAGE(r == ST_PARSE_OK && x >= lo && x <= hi, NULL, "--%s must be in [%ld, %ld] (got %s)",
		 key, lo, hi, v);
	*out = x;
	return ST_OK;
}

int cli_get_double(struct cli_args *a, const char *key, double def, double *out)
{
	const char *v = cli_get(a, key, NULL);
	*out = def;
	if (!v)
		return ST_OK;
	ST_CHECK_USAGE(v != cli_bare, "give a number after it", "--%s needs a value", key);
	double d = 0;
	const enum st_parse r = st_parse_real(v, &d);
	ST_CHECK_USAGE(r != ST_PARSE_NOT_INT, "give a decimal number", "--%s: '%s' is not a number", key, v);
	ST_CHECK_USAGE(r == ST_PARSE_OK, "give a number a double can hold (about 1e-308 to 1e308)",
		 "--%s: %s is out of range", key, v);
	*out = d;
	return ST_OK;
}

int cli_check_unused(const struct cli_args *a, const char *prog)
{
	for (int i = 0; i < a->n; i++) {
		if (a->used[i])
			continue;
		const char *near = NULL;
		for (int k = 0; k < a->n_asked && !near; k++)
			if (strcmp(a->asked[k], "help") != 0 && st_is_near(a->key[i], a->asked[k]))
				near = a->asked[k];
		char hint[256];
		if (near)
			snprintf(hint, sizeof hint, "did you mean --%s? `%s --help` lists the options",
				 near, prog);
		else
			snprintf(hint, sizeof hint, "run `%s --help` for its options", prog);
		ST_USAGE_ERROR(hint, "%s: unknown option --%s", prog, a->key[i]);
		return ST_FAIL;
	}
	return ST_OK;
}
