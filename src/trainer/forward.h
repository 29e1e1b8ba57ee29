/* A model opened for forward passes only (`strata eval`, `strata sample`)
 * within memory budgets, so that a model trained with offload can be scored
 * and sampled on the same machine.
 *
 * The budgets are train's (--device-mem, --host-mem: "auto" sizes them from
 * the machine, tiers_budgets) for the weights and one micro-batch's
 * activations; --offload-dir gives the disk tier, checked as train checks
 * it. Where everything fits on the device the weights are loaded as they
 * always were; otherwise the placement (engine/place.h, no gradients and no
 * optimizer state) keeps what fits on the device, the rest on the host and
 * then the disk, streaming through a staging pool, and an evaluation reads
 * each unit's weights once per group of micro-batches (engine/exec.h). A
 * forward keeps no activations for a backward: every layer keeps only its
 * input, and its other tensors live in one block shared by all layers (the
 * executor's recompute policy; the same kernels on the same inputs, so the
 * numbers are those of keeping them all). Generation keeps each layer's
 * keys and values instead (forward_place_decoder). */
#ifndef ST_FORWARD_H
#define ST_FORWARD_H

#include "engine/session.h"
#include "trainer/options.h"

struct st_forward_mem {
	char device_mem[24], host_mem[24]; /* "auto" or a size */
	char offload_dir[ST_PATH];         /* comma-separated directories; "" none */
};

/* The options' defaults: "auto", "auto", none. */
void forward_mem_defaults(struct st_forward_mem *mem);
/* Open model directory dir on ops, in two steps: its config and the
 * weights' headers checked against it (nothing allocated: a model that
 * does not match its weights fails before the data is read); then, once the
 * micro-batch shape is known, the placement within mem's budgets for
 * forward passes of b x t tokens, the executor, the store started and the
 * weights loaded. session_close the session after forward_build, whatever
 * came of either. */
int forward_build(struct st_session *s, const struct st_ops *ops, const char *dir);
int forward_place(struct st_session *s, const char *dir, const struct st_forward_mem *mem, int b,
		  int t);

/* The same for generation: a decoder with a t_max-position key/value cache
 * (engine/decode.h) in place of the executor. */
int forward_place_decoder(struct st_session *s, const char *dir, const struct st_forward_mem *mem,
			  int t_max);

#endif
