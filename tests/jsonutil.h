/* Reading the JSON reference files and outputs the suites compare against. */
#ifndef ST_JSONUTIL_H
#define ST_JSONUTIL_H

#include <cJSON.h>
#include <criterion/criterion.h>
#include <stdlib.h>

#include "io/fsutil.h"
#include "util/check.h"

/* path parsed, or the test fails saying which file; free with cJSON_Delete. */
static inline cJSON *tu_read_json(const char *path)
{
	char *text = NULL;
	size_t len = 0;
	cr_assert_eq(fs_read_file(path, &text, &len), ST_OK, "cannot read %s", path);
	cJSON *root = cJSON_ParseWithLength(text, len);
	free(text);
	cr_assert(root, "%s is not valid JSON", path);
	return root;
}

#endif
