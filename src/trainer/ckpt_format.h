/* What checkpoint.c (saving) and ckpt_load.c (loading) share of the
 * checkpoint format: its name in trainer.json, the model record a resume
 * checks, the fp32 part of a state tensor, and the recovery of a step
 * directory moved aside by a re-save that did not finish. */
#ifndef ST_CKPT_FORMAT_H
#define ST_CKPT_FORMAT_H

#include <cJSON.h>

#include "model/config.h"
#include "optim/optim.h"

#define CKPT_FORMAT "strata-checkpoint-1"

/* The fp32 numel of a state tensor, 0 for the uint8 codes. */
static inline size_t ckpt_state_f32_numel(const struct st_state_tensor *st)
{
	return st->dtype == ST_DT_F32 ? st->bytes / sizeof(float) : 0;
}

/* trainer.json's "model" (saved) against the checkpoint's config c: the
 * keys that decide the computation must be unchanged. path is trainer.json,
 * ckpt_dir the checkpoint, for the message. */
int ckpt_check_model(const struct st_config *c, const cJSON *saved, const char *path,
		     const char *ckpt_dir);

/* Put back a step directory of run directory out moved aside
 * (.old-step-N.PID) by a re-save killed between its renames. held: the
 * caller holds the run's lock; otherwise nothing moves while another
 * process holds it. */
void ckpt_recover_aside(const char *out, int held);

#endif
