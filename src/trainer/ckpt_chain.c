/* A checkpoint's identities and the chain of a run's checkpoints: see
 * struct ckpt_ids in trainer.h. */
#include <cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "io/fsutil.h"
#include "trainer/trainer.h"
#include "util/check.h"

/* A 16-hex-digit id from a JSON string into id, else "". */
static void id_of(char id[17], const cJSON *v)
{
	id[0] = '\0';
	if (cJSON_IsString(v) && strlen(v->valuestring) == 16 &&
	    strspn(v->valuestring, "0123456789abcdef") == 16)
		memcpy(id, v->valuestring, 17);
}

int ckpt_read_ids(const char *ckpt_dir, struct ckpt_ids *ids)
{
	ids->run[0] = ids->self[0] = ids->prev[0] = '\0';
	ids->prev_step = -2;
	char path[4200];
	snprintf(path, sizeof path, "%s/trainer.json", ckpt_dir);
	cJSON *root = NULL;
	const int old = st_log_mute(1);
	const int parsed = fs_read_json(path, &root, NULL) == ST_OK;
	st_log_mute(old);
	if (!parsed)
		return 0;
	id_of(ids->run, cJSON_GetObjectItemCaseSensitive(root, "run_id"));
	id_of(ids->self, cJSON_GetObjectItemCaseSensitive(root, "ckpt_id"));
	id_of(ids->prev, cJSON_GetObjectItemCaseSensitive(root, "prev_id"));
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prev_step");
	ids->prev_step = cJSON_IsNull(p) ? -1
			 : cJSON_IsNumber(p) && p->valuedouble >= 0 && p->valuedouble < 1e15
				 ? (long)p->valuedouble
				 : -2;
	cJSON_Delete(root);
	return 1;
}

int ckpt_chain(const char *out, long from, long *steps, int max, long *legacy)
{
	*legacy = -1;
	char dir[4400];
	struct ckpt_ids ids, prev;
	int n = 0;
	snprintf(dir, sizeof dir, "%s/step-%06ld", out, from);
	if (max < 1 || !ckpt_read_ids(dir, &ids))
		return 0;
	steps[n++] = from;
	while (n < max) {
		const long p = ids.prev_step;
		if (p == -2) { /* saved before the chain was: its history unknown */
			*legacy = steps[n - 1];
			break;
		}
		if (p < 0 || p >= steps[n - 1])
			break; /* the first of a fresh run (or a step out of order) */
		if (!*ids.prev) { /* resumed from a checkpoint saved before ids were */
			*legacy = p + 1;
			break;
		}
		/* gone (pruned, or resumed from another directory), or another
		 * checkpoint saved there since (a run resumed from an earlier step
		 * saving that step again): the chain ends */
		snprintf(dir, sizeof dir, "%s/step-%06ld", out, p);
		if (!ckpt_read_ids(dir, &prev) || strcmp(prev.self, ids.prev) != 0)
			break;
		steps[n++] = p;
		ids = prev;
	}
	return n;
}

void ckpt_new_id(char id[17])
{
	uint64_t x = 0;
	if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
		/* no entropy source: the time and the process, distinct enough */
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		x = ((uint64_t)t.tv_sec * 1000000007u) ^ (uint64_t)t.tv_nsec ^
		    ((uint64_t)getpid() << 40);
	}
	snprintf(id, 17, "%016llx", (unsigned long long)x);
}
