/* The hardware profile the planner uses: measured rates of this machine,
 * cached in a JSON file, every number overridable by editing it (so a user
 * can plan for a machine they do not have).
 *
 * matmul_gflops            the device's matmul rate (GFLOP/s) as a step sees
 *                          it: a layer's three products (forward, input
 *                          gradient, weight gradient) at 2048 rows x 1024 x
 *                          1024, on operands past the core's caches (format
 *                          3; a 1024^2 product run again on warm ones before)
 * matmul_narrow_gflops     the same at 2048 x 512 x 512, for models of dim
 *                          512 and less (the rate for dims between is
 *                          interpolated: profile_matmul_rate); 0: not
 *                          measured, matmul_gflops
 * cpu_matmul_gflops        the CPU's, for the matmuls of its optimizer updates
 *                          (GaLore's projections); absent: matmul_gflops
 * bf16_matmul_gflops       the device's rate with bf16 inputs and fp32 sums
 *                          (--matmul-precision bf16), rounding included, on
 *                          the same products; 0: not measured (no bf16
 *                          hardware), matmul_gflops
 * bf16_matmul_narrow_gflops  and at 2048 x 512 x 512 (0: bf16_matmul_gflops)
 * attention_gflops         the device's causal attention, forward and
 *                          backward (FLOPs as model_attention_flops counts
 *                          them, the backward's twice the forward's) at
 *                          2048 tokens, 8 heads of 128 (more for more
 *                          threads, fewer in small arrays); 0: not measured (an
 *                          older profile), the matmul rate at the model's
 *                          width
 * attention_short_gflops   the same at 256 tokens, 8 sequences (the rate
 *                          for lengths between is interpolated:
 *                          profile_attention_rate); 0: attention_gflops
 * elementwise_gbs          the device's kernels other than matmuls and
 *                          attention (norms, RoPE, SwiGLU, residual copies
 *                          and adds): the bytes model_layer_ew_bytes counts
 *                          per second, timed on a layer's sequence of them
 *                          (dim 1024, ffn 2816, up to 2048 rows); 0: not
 *                          measured (an older profile), not charged
 * h2d_gbs, d2h_gbs         host -> device and device -> host copy rates (GB/s
 *                          of slab bytes moved; memcpy on the CPU backend,
 *                          each byte counted once, not read and written)
 * cpu_adamw_mparams        CPU optimizer rates (million parameters per
 * cpu_adamw8bit_mparams    second), fp32 AdamW and 8-bit AdamW
 * dev_adamw_mparams        the same on the device
 * dev_adamw8bit_mparams
 * disk_read_gbs, disk_write_gbs   the disk tier's rates with slab-sized
 *                          transfers, reads and writes interleaved (GB/s; 0: no disk)
 * device_gib, host_gib     memory sizes (informational: the budgets' defaults)
 * shared_cores             1 when the device is the CPU itself (the CPU
 *                          backend): compute, CPU updates and copies then take
 *                          turns on the same cores instead of overlapping
 * disk_cpu_share           with shared_cores: the share of the compute rate
 *                          lost while the disk queue streams (its io_uring and
 *                          checksum work), measured as matmuls with and
 *                          without a thread streaming slabs
 * copy_cpu_share           with shared_cores: the share of the compute rate
 *                          lost while the copy queue streams (its memcpy
 *                          takes a core and memory bandwidth), measured as
 *                          matmuls with and without a thread copying (0:
 *                          not measured)
 * probe_mib                the size of each array the memory-bound rates
 *                          were measured over: 64 (past the caches), less
 *                          within small budgets (0: not recorded, 64)
 * format                   3 for profiles measured since 2026-11-25; 2: an
 *                          older one, without the attention and elementwise
 *                          rates and with a warm matmul rate; 0: older
 *                          still, its copy rates counting each byte twice (a
 *                          cached one of either is measured again)
 * disk_fs_magic            the file system the disk rates were measured on
 *                          (statfs's f_type; 0: not recorded), so that a run
 *                          offloading to another kind is told its rates are
 *                          another disk's
 * threads                  the CPU threads the rates were measured with (0:
 *                          not recorded): the matmul and CPU optimizer rates
 *                          scale with them, so a run with another count has
 *                          the default cache measured again and a given
 *                          profile warned
 *
 * An older file's "copy_gbs" and "adamw_mparams" are read as both copy
 * directions and both optimizer places. */
#ifndef ST_PROFILE_H
#define ST_PROFILE_H

#include "ops/ops.h"

struct st_profile {
	double matmul_gflops, cpu_matmul_gflops, h2d_gbs, d2h_gbs;
	double cpu_adamw_mparams, cpu_adamw8bit_mparams, dev_adamw_mparams, dev_adamw8bit_mparams;
	double disk_read_gbs, disk_write_gbs;
	double device_gib, host_gib;
	double shared_cores;
	double disk_cpu_share;
	double disk_fs_magic;
	double format;
	double threads;
	double copy_cpu_share;
	double probe_mib;
	double bf16_matmul_gflops;
	double attention_gflops;
	double elementwise_gbs;
	double matmul_narrow_gflops, bf16_matmul_narrow_gflops;
	double attention_short_gflops;
};
/* The widths of the products the matmul rates are measured on. */
#define ST_LMM_D 1024
#define ST_LMM_D_NARROW 512
/* The matmul rate (FLOP/s) of a model of dim `width` with p: the rate at
 * ST_LMM_D_NARROW at that width and below, the one at ST_LMM_D at that width and
 * above, between them interpolated in log2(width); bf16: the bf16 rates (a
 * profile without them: the fp32 ones). A missing narrow rate is the
 * other. */
double profile_matmul_rate(const struct st_profile *p, int width, int bf16);
/* The sequence lengths the attention rates are measured at. */
#define ST_ATT_T_LONG 2048
#define ST_ATT_T_SHORT 256
/* Attention's rate (FLOP/s) at sequence length t: the short rate at
 * ST_ATT_T_SHORT and below, the long one at ST_ATT_T_LONG and above,
 * interpolated in log2(t) between; a missing short rate is the long one;
 * 0 where the profile has no attention rate (the plan then uses the matmul
 * rate). */
double profile_attention_rate(const struct st_profile *p, int t);
/* profile_measure's format (struct st_profile.format) */
#define ST_PROFILE_FORMAT 3
/* The disk measurement's request size and depth (io_open's block and
 * queue depth in profile_measure_disk): a run with others is warned. */
#define ST_PROFILE_IO_BLOCK (1u << 20)
#define ST_PROFILE_IO_DEPTH 16
/* A file system's name for a statfs f_type ("ext4/ext3/ext2", "tmpfs", ...),
 * or its number in hex into buf. */
const char *profile_fs_name(unsigned long magic, char *buf, size_t n);
/* statfs f_type of the file system holding dir; 0 where it cannot be read. */
unsigned long profile_fs_magic(const char *dir);

/* Measure (a few seconds) all but the disk, whose rates are left 0.
 * shared_cores is 1: the only backend that runs here is the CPU. Its
 * arrays take about 4.5 x probe_mib MiB and 8 MiB more (8 to 64; 64 MiB each is past the
 * caches, the rest read high where the cache holds them). */
int profile_measure(struct st_profile *p, const struct st_ops *ops, int probe_mib);
/* Measure the disk rates and disk_cpu_share in dir (with up to 256 MiB of
 * slabs, fewer where there is less room; an error where even 32 MiB do
 * not fit or no file can be made there). Apart from profile_measure, so
 * that a run whose plan needs no disk can go on without it. */
int profile_measure_disk(struct st_profile *p, const struct st_ops *ops, const char *dir);
/* Measure the two bf16 rates alone (over 3 arrays of probe_mib MiB and an
 * 8 MiB workspace; 0 where ops has no bf16 unit), for a cached profile
 * without them. */
int profile_measure_bf16(struct st_profile *p, const struct st_ops *ops, int probe_mib);
/* Read a profile file; a missing key is an error naming it, as are a
 * negative rate and a disk with one rate 0 and the other not. */
int profile_load(struct st_profile *p, const char *path);
int profile_save(const struct st_profile *p, const char *path);

#endif
