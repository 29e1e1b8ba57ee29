/* Trainer tests, end to end through the strata binary and the library:
 * exact SGD step, bit-identical resume, loss falling on the real corpus,
 * bad input with clear errors, and crash safety of checkpoints. */
#include <fcntl.h>
#include <math.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cliutil.h"
#include "engine/session.h"
#include "io/safetensors.h"
#include "io/fsutil.h"
#include "io/shard.h"
#include "io/tokenizer.h"
#include "model/config.h"
#include "model/llama.h"
#include "ops/ops.h"
#include "optim/optim.h"
#include "optim/quantmap.h"
#include "store/store.h"
#include "trainer/data.h"
#include "testutil.h"
#include "trainer/trainer.h"
#include "util/check.h"
#include "util/utf8.h"

static char out[1 << 16];

#define SMALL "--micro-batch 4 --seq-len 32 --eval-tokens 512 --progress lines --threads 2"

static void check_resume(const char *flags)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "resume");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/a --steps 6 --ckpt-interval 3 "
			"--eval-interval 3 %s %s",
			cu_bin(), dir, dir, dir, SMALL, flags);
	cr_assert_eq(rc, 0, "straight run failed: %s", out);
	rc = cu_run(out, sizeof out, "%s train --resume %s/a/step-000003 --out %s/b", cu_bin(), dir,
		    dir);
	cr_assert_eq(rc, 0, "resumed run failed: %s", out);
	char ca[512], cb[512];
	snprintf(ca, sizeof ca, "%s/a/step-000006", dir);
	snprintf(cb, sizeof cb, "%s/b/step-000006", dir);
	cu_expect_same_state(ca, cb, flags); /* message: the flags of the failing case */
	/* the losses of steps 4..6 are printed identically in both metrics logs */
	rc = cu_run(out, sizeof out,
		    "bash -c \"diff <(grep -E '.step.: [4-6], .loss.' %s/a/metrics.jsonl | cut -d, -f1-2) "
		    "<(grep -E '.step.: [4-6], .loss.' %s/b/metrics.jsonl | cut -d, -f1-2) && "
		    "test $(grep -cE '.step.: [4-6], .loss.' %s/b/metrics.jsonl) -eq 3\"",
		    dir, dir, dir);
	cr_expect_eq(rc, 0, "losses of steps 4-6 differ after resume: %s", out);
}

Test(train, resume_bit_identical_adamw) { check_resume("--grad-accum 2 --grad-clip 0.5"); }
Test(train, resume_bit_identical_adamw8bit)
{
	/* --quant-min-size 512 puts the 64x64 attention matrices on 8-bit state too */
	check_resume("--optimizer adamw8bit --quant-min-size 512 --grad-accum 2");
}
Test(train, resume_bit_identical_sgd8bit)
{
	check_resume("--optimizer sgd8bit --momentum 0.9 --lr 0.05 --quant-min-size 512 --quant-block 64");
}
/* GaLore: rank 8 of the 64-wide matrices, a projector refresh every 2
 * updates (staggered), so refreshes fall on both sides of the resume */
Test(train, resume_bit_identical_galore)
{
	check_resume("--optimizer galore-adamw --galore-rank 8 --galore-update-gap 2 --galore-proj svd "
		     "--grad-clip 0.5");
}
Test(train, resume_bit_identical_galore8bit)
{
	check_resume("--optimizer galore-adamw8bit --galore-rank 0.25 --galore-update-gap 2 "
		     "--galore-moments rotate --quant-min-size 256 --quant-block 64");
}
/* Resumed in the middle of the spread first projectors: matrices starting at
 * update 4 get their first projector after the resume. */
Test(train, resume_bit_identical_galore_mid_spread)
{
	check_resume("--optimizer galore-adamw --galore-rank 8 --galore-update-gap 4 "
		     "--galore-start-spread 4 --grad-accum 2 --grad-clip 0.5");
}
Test(train, resume_bit_identical_galore_per_layer_accum)
{
	check_resume("--optimizer galore-adamw --galore-rank 8 --galore-update-gap 2 --grad-accum 2 "
		     "--galore-moments rotate");
}

/* Whether oneDNN multiplies bf16 on a matrix unit here (AMX, AVX512-BF16):
 * where not, strata refuses --matmul-precision bf16 (tested below). */
static int bf16_here(void)
{
	const char *impl;
	return ops_cpu()->matmul_bf16_native(&impl);
}

#define NO_BF16 "no bf16 matrix unit here: bf16_matmuls_refused_without_a_unit tests the refusal"

/* bf16 matmuls are as deterministic as fp32 ones: a resumed run gives the
 * same bits, and the option is saved with the run (the resume names none). */
Test(train, resume_bit_identical_bf16_matmuls)
{
	if (!bf16_here())
		cr_skip_test(NO_BF16);
	check_resume("--matmul-precision bf16 --grad-accum 2");
}

/* The last value of key ("loss", "val_loss") in run's metrics.jsonl */
static double last_metric(const char *run, const char *key)
{
	int rc = cu_run(out, sizeof out, "grep -o '\"%s\": [^,]*' %s/metrics.jsonl | tail -1 | cut -d' ' -f2",
			key, run);
	cr_assert(rc == 0 && *out, "no %s in %s/metrics.jsonl: %s", key, run, out);
	return strtod(out, NULL);
}

static double eval_loss(const char *run, const char *data, const char *flags)
{
	int rc = cu_run(out, sizeof out, "%s eval --model %s --data %s --seq-len 32 --json %s",
			cu_bin(), run, data, flags);
	cr_assert_eq(rc, 0, "%s", out);
	const char *p = strstr(out, "\"loss\":");
	cr_assert(p, "%s", out);
	return strtod(p + 7, NULL);
}

/* --matmul-precision bf16 trains the same model to within bf16's rounding:
 * the same data and init as fp32, 30 steps, train and held-out losses
 * within 0.2% (bf16's relative rounding, 2^-9; measured 1e-5 apart on this
 * test's model), and not equal (the bf16 run really rounds). eval with
 * bf16 scores a checkpoint within 0.1% of fp32 (measured 3e-5). A wrong
 * operand or a gradient left out in the bf16 path is off by far more. */
Test(train, bf16_matmuls_track_fp32, .timeout = 300)
{
	if (!bf16_here())
		cr_skip_test(NO_BF16);
	char dir[256], data[300], run[300];
	cu_tmpdir(dir, sizeof dir, "bf16");
	cu_setup_run(dir, "");
	double loss[2][2];
	for (int k = 0; k < 2; k++) {
		int rc = cu_run(out, sizeof out,
				"%s train --model %s/init --data %s/data --out %s/%s --steps 30 "
				"--eval-interval 0 --matmul-precision %s %s",
				cu_bin(), dir, dir, dir, k ? "bf16" : "fp32", k ? "bf16" : "fp32", SMALL);
		cr_assert_eq(rc, 0, "%s", out);
		cr_expect(!k || strstr(out, "matmul bf16 inputs and fp32 sums in the linear layers"),
			  "the log names no bf16 matmuls: %s", out);
		/* the fp32 run is told the option runs here */
		cr_expect(k || strstr(out, "(--matmul-precision bf16 runs on this CPU: "), "%s", out);
		snprintf(run, sizeof run, "%s/%s", dir, k ? "bf16" : "fp32");
		loss[k][0] = last_metric(run, "loss");
		loss[k][1] = last_metric(run, "val_loss");
	}
	cr_log_info("losses: fp32 %.6f %.6f, bf16 %.6f %.6f", loss[0][0], loss[0][1], loss[1][0], loss[1][1]);
	for (int j = 0; j < 2; j++) {
		cr_expect(fabs(loss[1][j] - loss[0][j]) <= 0.002 * loss[0][j], "%s loss: bf16 %.6f, fp32 %.6f",
			  j ? "val" : "train", loss[1][j], loss[0][j]);
		cr_expect(loss[1][j] != loss[0][j], "bf16 gave fp32's %s loss %.6f exactly", j ? "val" : "train",
			  loss[0][j]);
	}
	/* AVX512-BF16 without AMX (capped here): bf16 runs, warned (it ran at
	 * about half fp32's rate on this kind of Xeon) */
	int rc = cu_run(out, sizeof out,
			"DNNL_MAX_CPU_ISA=AVX512_CORE_BF16 %s train --model %s/init --data %s/data --out %s/cap "
			"--steps 2 --eval-interval 0 --matmul-precision bf16 %s",
			cu_bin(), dir, dir, dir, SMALL);
	cr_expect(rc == 0 && strstr(out, "oneDNN multiplies bf16 here with AVX512-BF16 dot products "
					   "(brg:avx512_core_bf16), not AMX"),
		  "%s", out);
	snprintf(data, sizeof data, "%s/data", dir);
	snprintf(run, sizeof run, "%s/fp32", dir);
	const double e32 = eval_loss(run, data, "");
	cr_expect(strstr(out, "\"matmul_precision\": \"fp32\""), "%s", out);
	const double e16 = eval_loss(run, data, "--matmul-precision bf16");
	cr_expect(strstr(out, "\"matmul_precision\": \"bf16\"") &&
			  strstr(out, "matmul bf16 inputs and fp32 sums in the linear layers"),
		  "%s", out);
	cr_log_info("eval: fp32 %.6f, bf16 %.6f", e32, e16);
	cr_expect(fabs(e16 - e32) <= 0.001 * e32 && e16 != e32, "eval: bf16 %.6f, fp32 %.6f", e16, e32);
}

/* A cached profile measured before bf16_matmul_gflops existed: a bf16 run's
 * plan measures that rate alone and adds it to the cache, keeping the other
 * rates (a matmul rate of 123 no measurement would give); a given profile
 * without it is warned and predicts at the fp32 rate. */
Test(train, bf16_rate_added_to_a_cached_profile, .timeout = 120)
{
	if (!bf16_here())
		cr_skip_test(NO_BF16);
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "bf16prof");
	cu_setup_run(dir, "");
	/* a cache this run would keep but for the bf16 rate: its format, this
	 * run's threads, arrays as large as its budgets allow */
	int rc = cu_run(out, sizeof out,
			"mkdir -p %s/home/.cache/strata && sed 's/\"matmul_gflops\": 400/\"matmul_gflops\": 123, "
			"\"format\": 3, \"threads\": 2, \"probe_mib\": 64/' tests/data/profiles/ci.json > "
			"%s/home/.cache/strata/profile.json && cp %s/home/.cache/strata/profile.json %s/given.json && "
			"env -u STRATA_PROFILE HOME=%s/home %s plan --model %s/init --micro-batch 2 --seq-len 32 "
			"--device-mem 8M --host-mem 64M --place weights=host,gradients=host --threads 2 "
			"--matmul-precision bf16",
			dir, dir, dir, dir, dir, cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "measuring the bf16 matmul rate for the planner (the cached profile") &&
			  strstr(out, "profile: matmul 123.0 (bf16 "),
		  "%s", out);
	rc = cu_run(out, sizeof out, "grep -c '\"bf16_matmul_gflops\"' %s/home/.cache/strata/profile.json && "
			"grep -c '\"matmul_gflops\":[[:space:]]*123' %s/home/.cache/strata/profile.json",
		    dir, dir);
	cr_expect_eq(rc, 0, "the cache lost its rates or gained no bf16 one: %s", out);
	rc = cu_run(out, sizeof out, "%s plan --model %s/init --micro-batch 2 --seq-len 32 --device-mem 8M "
			"--place weights=host,gradients=host "
			"--host-mem 64M --threads 2 --profile %s/given.json --matmul-precision bf16",
		    cu_bin(), dir, dir);
	cr_expect(rc == 0 && strstr(out, "has no bf16_matmul_gflops: the plan prices the bf16 matmuls at its "
					   "fp32 rate") && strstr(out, "(bf16: not measured, at this rate)"),
		  "%s", out);
}

/* Where oneDNN has no bf16 matrix unit to use (capped here with
 * DNNL_MAX_CPU_ISA, as on a CPU without AMX or AVX512-BF16), train, plan
 * and eval refuse bf16 with exit 2, naming the kernel they would get; a
 * misspelt precision is refused before any work. Runs on every machine. */
Test(train, bf16_matmuls_refused_without_a_unit)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "bf16no");
	cu_setup_run(dir, "");
	const char *cmds[] = {"train --model %s/init --data %s/data --out %s/r --steps 2",
			      "plan --model %s/init --device-mem 1G --profile %s/p.json --offload-dir %s",
			      "eval --model %s/init --data %s/data --threads %s"};
	for (int i = 0; i < 3; i++) {
		char cmd[512], threads[] = "2";
		snprintf(cmd, sizeof cmd, cmds[i], dir, dir, i == 2 ? threads : dir);
		int rc = cu_run(out, sizeof out, "DNNL_MAX_CPU_ISA=AVX512_CORE %s %s --matmul-precision bf16",
				cu_bin(), cmd);
		cr_expect_eq(rc, 2, "%s: %s", cmd, out);
		cr_expect(strstr(out, "--matmul-precision bf16: this CPU has no bf16 matrix unit oneDNN uses") &&
			  strstr(out, "use --matmul-precision fp32 here: bf16 matmuls pay off on CPUs with AMX"),
			  "%s: %s", cmd, out);
		rc = cu_run(out, sizeof out, "%s %s --matmul-precision bf8", cu_bin(), cmd);
		cr_expect_eq(rc, 2, "%s: %s", cmd, out);
		cr_expect(strstr(out, "--matmul-precision must be fp32 or bf16 (got 'bf8')"), "%s: %s", cmd, out);
	}
	char r[300];
	snprintf(r, sizeof r, "%s/r", dir);
	cr_expect(!fs_exists(r), "a refused train made its run directory");
	/* a run saved with bf16 (its trainer.json edited here, to run on every
	 * CPU), resumed where bf16 is refused: said as the run's, not as a
	 * flag given; resumed with fp32, it goes on and says the change */
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/f --steps 2 --eval-interval 0 %s && "
			"sed -i 's/\"matmul-precision\":\t\"fp32\"/\"matmul-precision\":\t\"bf16\"/' "
			"%s/f/step-000002/trainer.json && grep -q '\"bf16\"' %s/f/step-000002/trainer.json",
			cu_bin(), dir, dir, dir, SMALL, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	rc = cu_run(out, sizeof out, "DNNL_MAX_CPU_ISA=AVX512_CORE %s train --resume %s/f --steps 3",
		    cu_bin(), dir);
	cr_expect(rc == 2 && strstr(out, "the run trained with --matmul-precision bf16 (saved in ") &&
			  strstr(out, "give --matmul-precision fp32 to go on here"),
		  "%s", out);
	rc = cu_run(out, sizeof out,
		    "DNNL_MAX_CPU_ISA=AVX512_CORE %s train --resume %s/f --steps 3 --matmul-precision fp32",
		    cu_bin(), dir);
	cr_expect(rc == 0 && strstr(out, "matmul precision: fp32 from here on (the run trained with "
					   "bf16 before)"),
		  "%s", out);
	cr_expect(!strstr(out, "--matmul-precision bf16 runs on this CPU"),
		  "bf16 offered where it is refused: %s", out);
	/* bf16 from a --config file: refused naming the file */
	rc = cu_run(out, sizeof out,
		    "printf '{\"matmul_precision\": \"bf16\"}' > %s/c.json && DNNL_MAX_CPU_ISA=AVX512_CORE "
		    "%s train --config %s/c.json --model %s/init --data %s/data --out %s/rc --steps 2",
		    dir, cu_bin(), dir, dir, dir, dir);
	cr_expect(rc == 2 && strstr(out, "c.json gives matmul_precision bf16, and this CPU has no bf16 "
					   "matrix unit oneDNN uses") &&
			  strstr(out, "remove it from the file, or give --matmul-precision fp32"),
		  "%s", out);
	/* sample takes the flag (one set of flags for every command) and
	 * multiplies in fp32, said; a slip refused */
	rc = cu_run(out, sizeof out, "%s sample --model %s/f --prompt ab --tokens 3 --matmul-precision bf16",
		    cu_bin(), dir);
	cr_expect(rc == 0 && strstr(out, "--matmul-precision bf16: sample multiplies in fp32"), "%s", out);
	rc = cu_run(out, sizeof out, "%s sample --model %s/f --prompt ab --tokens 3 --matmul-precision bf8",
		    cu_bin(), dir);
	cr_expect(rc == 2 && strstr(out, "--matmul-precision must be fp32 or bf16 (got 'bf8')"), "%s", out);
}

/* Per-layer GaLore updates (each layer's gradient consumed after its
 * backward, one shared gradient slab) give bit for bit the in-memory GaLore
 * run with one micro-batch per step, clipping active, projector refreshes
 * and moment rotation included. */
Test(train, galore_per_layer_equals_in_memory)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "perlayer");
	cu_setup_run(dir, "");
	const char *mode[2] = {"true", "false"};
	for (int k = 0; k < 2; k++) {
		int rc = cu_run(out, sizeof out,
				"%s train --model %s/init --data %s/data --out %s/%s --steps 5 --optimizer "
				"galore-adamw --galore-rank 8 --galore-update-gap 2 --galore-moments rotate "
				"--grad-clip 0.05 --galore-per-layer %s %s",
				cu_bin(), dir, dir, dir, mode[k], mode[k], SMALL);
		cr_assert_eq(rc, 0, "per-layer %s failed: %s", mode[k], out);
	}
	char ca[512], cb[512];
	snprintf(ca, sizeof ca, "%s/true/step-000005", dir);
	snprintf(cb, sizeof cb, "%s/false/step-000005", dir);
	cu_expect_same_state(ca, cb, "per-layer vs in-memory GaLore");
}

/* Per-layer GaLore with accumulation makes a refresh's projector from one
 * micro-batch's gradient: where a matrix's gradient in the first is all
 * zero (a micro-batch of prompts alone), from the next with a gradient. It
 * took the zero one, warned of a zero gradient, and trained the matrix in
 * its first r coordinates until the next refresh, on steps that had loss
 * targets. The data: one example, 32 prompt bytes and an empty completion,
 * so only <eos> is a target, and a 32-token window has it or not by where
 * it starts (n - t = 2 starts). Seeds 6, 7 and 8 each have, at some step,
 * a first micro-batch without the target and a second with it (the old
 * code warned on each) and no step without targets. */
Test(train, galore_per_layer_refresh_waits_for_a_gradient)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "plzero");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"printf '{\"prompt\": \"abcdefghijabcdefghijabcdefghijab\", \"completion\": \"\"}\\n' "
			"> %s/ex.jsonl && %s prepare --input %s/ex.jsonl --out %s/zd --val-fraction 0",
			dir, cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	for (int seed = 6; seed <= 8; seed++) {
		rc = cu_run(out, sizeof out,
			    "%s train --model %s/init --data %s/zd --out %s/r%d --steps 4 --seq-len 32 "
			    "--micro-batch 1 --grad-accum 2 --optimizer galore-adamw --galore-rank 8 "
			    "--galore-update-gap 1 --galore-start-spread 1 --seed %d --progress none",
			    cu_bin(), dir, dir, dir, seed, seed);
		cr_assert_eq(rc, 0, "%s", out);
		cr_expect(!strstr(out, "zero gradient"), "seed %d: %s", seed, out);
		rc = cu_run(NULL, 0, "grep -q '\"loss\": null' %s/r%d/metrics.jsonl", dir, seed);
		cr_expect_neq(rc, 0, "seed %d: a step without targets (the test's premise)", seed);
	}
}

/* A non-finite gradient at a refresh update of per-layer GaLore: the
 * refreshed projectors are put back, so the skipped step leaves weights and
 * state exactly as they were. */
Test(train, galore_per_layer_nonfinite_skip_restores_projectors)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "plnan");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/a --steps 2 --ckpt-interval 1 "
			"--optimizer galore-adamw --galore-rank 8 --galore-update-gap 2 " SMALL,
			cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	rc = cu_run(out, sizeof out,
		    "STRATA_FAULT_NAN_AT_STEP=3 %s train --resume %s/a/step-000002 --out %s/b --steps 3 "
		    "--ckpt-interval 1 --keep-ckpts 0",
		    cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	char ca[512], cb[512];
	snprintf(ca, sizeof ca, "%s/a/step-000002", dir);
	snprintf(cb, sizeof cb, "%s/b/step-000003", dir);
	cu_expect_same_state(ca, cb, "a skipped per-layer GaLore step");
	/* weights that overflow after one update (--galore-scale 1e30): the
	 * next steps are skipped and said so, without errors or fallback
	 * warnings about the projectors their refreshes (update 2 onwards, the
	 * spread) compute from inf and discard anyway */
	rc = cu_run(out, sizeof out,
		    "%s train --model %s/init --data %s/data --out %s/c --steps 3 --eval-interval 0 "
		    "--optimizer galore-adamw --galore-rank 8 --galore-scale 1e30 " SMALL,
		    cu_bin(), dir, dir, dir);
	cr_expect(rc == 0 && strstr(out, "update skipped (2 so far") && !strstr(out, "error:") &&
			  !strstr(out, "not computed at update"),
		  "%s", out);
}

Test(train, resume_bit_identical_sgd_momentum)
{
	check_resume("--optimizer sgd --momentum 0.9 --lr 0.05 --weight-decay 0.01");
}

/* The gradient of `step`'s batch (SMALL: 4 x 32, seed 5) at dir/init's
 * weights, computed through the library into s's gradient slabs, as the
 * trainer computes it. The caller closes s and d. */
static void library_gradient(const char *dir, long step, struct st_session *s, struct st_data *d)
{
	char path[512];
	snprintf(path, sizeof path, "%s/init", dir);
	cr_assert_eq(session_open(s, ops_cpu(), path, 1), 0);
	snprintf(path, sizeof path, "%s/data", dir);
	cr_assert_eq(data_open(d, path, NULL, s->model.cfg.vocab_size, 1), 0);
	const int B = 4, T = 32;
	int32_t tok[4 * 32], tgt[4 * 32];
	data_train_batch(d, tok, tgt, B, T, 5, step, 0);
	cr_assert_eq(session_exec(s, B, T), 0);
	long n;
	exec_micro_step(&s->exec, tok, tgt, 1.0f / (B * T), &n);
}

/* SGD with lr 1 and nothing else moves each weight by exactly minus its
 * gradient, so a checkpoint exposes the gradient: W1 == fl(W0 - G). */
Test(train, sgd_lr1_moves_by_minus_gradient)
{
	char dir[256], path[512];
	cu_tmpdir(dir, sizeof dir, "sgd");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/run --steps 1 --optimizer sgd "
			"--lr 1 --warmup 0 --min-lr-ratio 1 --weight-decay 0 --grad-clip 0 "
			"--eval-interval 0 --seed 5 %s",
			cu_bin(), dir, dir, dir, SMALL);
	cr_assert_eq(rc, 0, "train failed: %s", out);

	/* the gradient of step 1, computed here through the library */
	struct st_session s;
	struct st_data d;
	library_gradient(dir, 1, &s, &d);

	struct st_safetensors w1;
	snprintf(path, sizeof path, "%s/run/step-000001/model.safetensors", dir);
	cr_assert_eq(safetensors_open(&w1, path), 0);
	long mismatches = 0, moved = 0;
	for (int i = 0; i < s.model.n_params; i++) {
		const struct st_param *p = &s.model.params[i];
		const float *w0 = s.w[p->unit] + p->offset;
		const float *g = (float *)store_acquire(&s.store, p->unit, ST_SLAB_G) + p->offset;
		const float *w = safetensors_data(&w1, safetensors_find(&w1, p->name));
		for (size_t j = 0; j < p->numel; j++) {
			float want = w0[j] - g[j];
			mismatches += memcmp(&want, &w[j], sizeof want) != 0;
			moved += w[j] != w0[j];
		}
	}
	cr_expect_eq(mismatches, 0, "%ld weights did not move by exactly -gradient", mismatches);
	cr_expect_gt(moved, 1000, "the step moved only %ld weights", moved);
	safetensors_close(&w1);
	data_close(&d);
	session_close(&s);
}

/* A skipped step is not an update: AdamW's bias correction counts updates.
 * Step 1 skipped (NaN), step 2 is update 1, so its weights are W0 moved by
 * AdamW at t = 1 from zero moments on step 2's gradient, computed here
 * through the library, bit for bit (at t = 2 every weight would differ). */
Test(train, skipped_step_is_not_an_update)
{
	char dir[256], path[512];
	cu_tmpdir(dir, sizeof dir, "skipt");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"STRATA_FAULT_NAN_AT_STEP=1 %s train --model %s/init --data %s/data --out %s/run "
			"--steps 2 --optimizer adamw --lr 1e-3 --warmup 0 --min-lr-ratio 1 "
			"--weight-decay 0 --grad-clip 0 --eval-interval 0 --seed 5 %s",
			cu_bin(), dir, dir, dir, SMALL);
	cr_assert_eq(rc, 0, "train failed: %s", out);
	cr_assert(strstr(out, "step 1: non-finite"), "step 1 was not skipped: %s", out);

	struct st_session s;
	struct st_data d;
	library_gradient(dir, 2, &s, &d);
	const struct st_adamw_args a = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
					.weight_decay = 0.0f, .grad_scale = 1.0f,
					.bc1 = (float)(1.0 - pow((double)0.9f, 1.0)),
					.bc2 = (float)(1.0 - pow((double)0.95f, 1.0))};
	struct st_safetensors w2;
	snprintf(path, sizeof path, "%s/run/step-000002/model.safetensors", dir);
	cr_assert_eq(safetensors_open(&w2, path), 0);
	long mismatches = 0, total = 0;
	for (int i = 0; i < s.model.n_params; i++) {
		const struct st_param *p = &s.model.params[i];
		float *w = malloc(p->numel * 4), *m = calloc(p->numel, 4), *v = calloc(p->numel, 4);
		memcpy(w, s.w[p->unit] + p->offset, p->numel * 4);
		const float *g = (float *)store_acquire(&s.store, p->unit, ST_SLAB_G) + p->offset;
		ops_cpu()->adamw_step(w, m, v, g, p->numel, &a);
		const float *got = safetensors_data(&w2, safetensors_find(&w2, p->name));
		mismatches += memcmp(w, got, p->numel * 4) != 0;
		total++;
		free(w), free(m), free(v);
	}
	cr_expect_eq(mismatches, 0, "%ld of %ld parameters differ from AdamW at t = 1", mismatches,
		     total);
	safetensors_close(&w2);
	data_close(&d);
	session_close(&s);
}

/* Loss falls on the real corpus (KJV via scripts/get-corpus): a 2-layer model
 * trained for 150 steps of 4096 bytes reaches a held-out loss below 2.3 nats
 * per byte, from ln(258) = 5.55 for the untrained model (measured on the
 * 2-core build machine: 1.81). */
Test(train, loss_falls_on_real_corpus, .timeout = 900)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "corpus");
	int rc = cu_run(out, sizeof out, "scripts/get-corpus %s/kjv.txt && %s prepare --input %s/kjv.txt --out %s/data",
			dir, cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "corpus preparation failed (run scripts/setup): %s", out);
	rc = cu_run(out, sizeof out,
		    "printf '{\"vocab_size\":258,\"hidden_size\":128,\"intermediate_size\":344,"
		    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"max_position_embeddings\":256}' > %s/cfg.json && "
		    "%s init --config %s/cfg.json --out %s/init && "
		    "%s eval --model %s/init --data %s/data --seq-len 256 --max-tokens 65536 --json",
		    dir, cu_bin(), dir, dir, cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "init/eval failed: %s", out);
	double first = atof(strstr(out, "\"loss\": ") + 8);
	rc = cu_run(out, sizeof out,
		    "%s train --model %s/init --data %s/data --out %s/run --steps 150 --micro-batch 16 "
		    "--seq-len 256 --lr 3e-3 --warmup 15 --eval-interval 0 --eval-tokens 65536 --progress lines --log-interval 50",
		    cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "training failed: %s", out);
	char *p = strstr(out, "val loss ");
	cr_assert(p, "no final evaluation in: %s", out);
	double last = atof(p + 9);
	cr_expect(first > 5.0 && first < 6.2, "initial val loss %.3f should be near ln(258) = 5.55", first);
	cr_expect(last < 2.3, "val loss after 150 steps is %.3f, expected < 2.3\n%s", last, out);
}

/* 8-bit AdamW tracks fp32 AdamW on real text: the 60M preset (byte
 * vocabulary: 25.6M parameters) with the stable embedding, 100 steps of
 * 4 x 256 tokens from the same init and data; final train loss (same batch)
 * and held-out loss within 1% (paper: 9.0 vs 9.0 perplexity at 1.5B). */
static double last_number_after(const char *text, const char *key)
{
	double v = NAN;
	for (const char *p = text; (p = strstr(p, key)); p += strlen(key))
		v = atof(p + strlen(key));
	return v;
}

Test(train, adamw8bit_parity_60m, .timeout = 1800)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "parity");
	int rc = cu_run(out, sizeof out,
			"scripts/get-corpus %s/kjv.txt && %s prepare --input %s/kjv.txt --out %s/data && "
			"%s init --config llama-60m --stable-embedding --out %s/init",
			dir, cu_bin(), dir, dir, cu_bin(), dir);
	cr_assert_eq(rc, 0, "setup failed: %s", out);
	double train[2], val[2];
	const char *opt[2] = {"adamw", "adamw8bit"};
	for (int k = 0; k < 2; k++) {
		rc = cu_run(out, sizeof out,
			    "%s train --model %s/init --data %s/data --out %s/%s --optimizer %s --steps 100 "
			    "--micro-batch 4 --seq-len 256 --lr 1e-3 --warmup 10 --eval-interval 0 "
			    "--eval-tokens 32768 --progress none && tail -n 3 %s/%s/metrics.jsonl",
			    cu_bin(), dir, dir, dir, opt[k], opt[k], dir, opt[k]);
		cr_assert_eq(rc, 0, "%s run failed: %s", opt[k], out);
		train[k] = last_number_after(out, "\"loss\": ");
		val[k] = last_number_after(out, "\"val_loss\": ");
	}
	cr_log_info("fp32 AdamW: train %.4f val %.4f | 8-bit AdamW: train %.4f val %.4f", train[0],
		    val[0], train[1], val[1]);
	cr_expect(train[0] < 3.0, "fp32 AdamW did not learn (train loss %.3f)", train[0]);
	cr_expect(fabs(train[1] - train[0]) <= 0.01 * train[0],
		  "8-bit train loss %.4f vs fp32 %.4f: more than 1%% apart", train[1], train[0]);
	cr_expect(fabs(val[1] - val[0]) <= 0.01 * val[0],
		  "8-bit val loss %.4f vs fp32 %.4f: more than 1%% apart", val[1], val[0]);
}

/* ---- bad input: clear message, non-zero exit, nothing saved lost ---- */

static void expect_fail(const char *what, const char *needle, int rc)
{
	cr_expect_neq(rc, 0, "%s: expected a failure exit, got 0\n%s", what, out);
	cr_expect(strstr(out, "error") != NULL, "%s: no error message\n%s", what, out);
	cr_expect(strstr(out, needle) != NULL, "%s: message lacks '%s'\n%s", what, needle, out);
}

/* trainer.json keeps every number exactly, so a resume is the run it saved:
 * a seed of 2^53 - 1 came back as 9.00719925474099e+15 (cJSON's 15 digits)
 * and an lr one ulp above 0.001 as 0.001, and the resumed run differed. A
 * seed past 2^53, which a JSON number cannot hold exactly, is saved as its
 * digits in a string; a checkpoint that saved one rounded still resumes. */
Test(train, saved_options_read_back_exactly)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "exactopts");
	cu_setup_run(dir, "");
	const char *opts = "--seed 9007199254740991 --lr 0.0010000000000000002 " SMALL;
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/a --steps 4 --ckpt-interval 2 %s && "
			"%s train --resume %s/a/step-000002 --out %s/b && "
			"grep -E '\"seed\":[[:space:]]*9007199254740991,' %s/a/step-000002/trainer.json",
			cu_bin(), dir, dir, dir, opts, cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	char a[512], b[512];
	snprintf(a, sizeof a, "%s/a/step-000004", dir);
	snprintf(b, sizeof b, "%s/b/step-000004", dir);
	cu_expect_same_state(a, b, "resumed with a seed of 2^53 - 1 and an lr one ulp above 0.001");
	rc = cu_run(out, sizeof out,
		    "%s train --model %s/init --data %s/data --out %s/c --steps 4 --ckpt-interval 2 "
		    "--seed 1152921504606846977 " SMALL " && %s train --resume %s/c/step-000002 --out %s/d "
		    "&& grep -E '\"seed\":[[:space:]]*\"1152921504606846977\",' %s/c/step-000002/trainer.json",
		    cu_bin(), dir, dir, dir, cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	snprintf(a, sizeof a, "%s/c/step-000004", dir);
	snprintf(b, sizeof b, "%s/d/step-000004", dir);
	cu_expect_same_state(a, b, "resumed with a seed of 2^60 + 1");
	rc = cu_run(out, sizeof out,
		    "cp -r %s/c %s/old && sed -Ei 's/\"1152921504606846977\"/1.15292150460685e+18/' "
		    "%s/old/step-000002/trainer.json && %s train --resume %s/old/step-000002 --out %s/e",
		    dir, dir, dir, cu_bin(), dir, dir);
	cr_expect_eq(rc, 0, "a checkpoint that saved its seed rounded no longer resumes: %s", out);
}

/* The first-projector spread is fixed for a run: changing it on resume, or
 * a gap that caps it differently, is refused (it decides when each matrix's
 * moments began), and a checkpoint saved before the option existed resumes
 * with the schedule it ran (1). */
Test(train, galore_start_spread_fixed_on_resume)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "spread");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/a --steps 2 --ckpt-interval 1 "
			"--optimizer galore-adamw --galore-rank 8 --galore-update-gap 4 "
			"--galore-start-spread 4 " SMALL,
			cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "first projectors over updates 1-4"), "%s", out);
	expect_fail("a changed spread on resume", "--galore-start-spread 2 with",
		    cu_run(out, sizeof out,
			   "%s train --resume %s/a/step-000002 --out %s/b --steps 3 "
			   "--galore-start-spread 2",
			   cu_bin(), dir, dir));
	/* the same as a --config key (it was not looked for there) */
	expect_fail("a changed spread on resume, from --config", "--galore-start-spread 2 with",
		    cu_run(out, sizeof out,
			   "echo '{\"galore-start-spread\": 2}' > %s/cs.json && "
			   "%s train --resume %s/a/step-000002 --out %s/b --steps 3 --config %s/cs.json",
			   dir, cu_bin(), dir, dir, dir));
	/* a smaller gap caps the spread: the starts would move too */
	expect_fail("a gap on resume that moves the starts", "over 2 updates; this run used 4",
		    cu_run(out, sizeof out,
			   "%s train --resume %s/a/step-000002 --out %s/b --steps 3 "
			   "--galore-update-gap 2",
			   cu_bin(), dir, dir));
	cr_expect(strstr(out, "with a --galore-update-gap of 4 or more"), "%s", out);
	/* a gap that keeps the spread, the spread not given: the run's kept */
	rc = cu_run(out, sizeof out,
		    "%s train --resume %s/a/step-000002 --out %s/e --steps 3 --galore-update-gap 6",
		    cu_bin(), dir, dir);
	cr_expect_eq(rc, 0, "a gap of 6 with the run's spread of 4 was refused: %s", out);
	/* the rank as a fraction of the hidden size (0.125 of 64 = 8) is the same state */
	rc = cu_run(out, sizeof out,
		    "%s train --resume %s/a/step-000002 --out %s/f --steps 3 --galore-rank 0.125",
		    cu_bin(), dir, dir);
	cr_expect_eq(rc, 0, "the same rank as a fraction was refused: %s", out);
	/* the rank is the state's shape: named, not a tensor shape mismatch */
	expect_fail("another rank on resume", "--galore-rank 4 on resume: the run used 8",
		    cu_run(out, sizeof out,
			   "%s train --resume %s/a/step-000002 --out %s/b --steps 3 --galore-rank 4",
			   cu_bin(), dir, dir));
	rc = cu_run(out, sizeof out, /* a larger gap leaves the starts where they were */
		    "%s train --resume %s/a/step-000002 --out %s/d --steps 3 --galore-update-gap 8",
		    cu_bin(), dir, dir);
	cr_expect_eq(rc, 0, "a gap that keeps the starts was refused: %s", out);
	rc = cu_run(out, sizeof out,
		    "sed -i '/galore-start-spread/d' %s/a/step-000001/trainer.json && "
		    "%s train --resume %s/a/step-000001 --out %s/c --steps 2",
		    dir, cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "first projectors over updates 1-1"),
		  "an old checkpoint did not resume with spread 1: %s", out);
}

Test(train, bad_model_files)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "badmodel");
	cu_setup_run(dir, "");
	const char *run = "%s train --model %s/m --data %s/data --out %s/run --steps 1 " SMALL;
	/* missing */
	cu_run(NULL, 0, "mkdir -p %s/m && cp %s/init/config.json %s/m/", dir, dir, dir);
	expect_fail("missing safetensors", "model.safetensors",
		    cu_run(out, sizeof out, run, cu_bin(), dir, dir, dir));
	/* truncated */
	cu_run(NULL, 0, "head -c 20000 %s/init/model.safetensors > %s/m/model.safetensors", dir, dir);
	expect_fail("truncated safetensors", "model.safetensors",
		    cu_run(out, sizeof out, run, cu_bin(), dir, dir, dir));
	/* corrupt header */
	cu_run(NULL, 0, "cp %s/init/model.safetensors %s/m/ && printf 'XXXXXXXX' | dd of=%s/m/model.safetensors bs=1 seek=12 conv=notrunc 2>/dev/null",
	       dir, dir, dir);
	expect_fail("corrupt safetensors", "model.safetensors",
		    cu_run(out, sizeof out, run, cu_bin(), dir, dir, dir));
	/* weights that disagree with the config */
	cu_run(NULL, 0, "cp %s/init/model.safetensors %s/m/ && sed -i -E 's/(\"intermediate_size\":[[:space:]]*)96/\\197/' %s/m/config.json && grep -q 97 %s/m/config.json",
	       dir, dir, dir, dir);
	expect_fail("shape mismatch", "mlp.", cu_run(out, sizeof out, run, cu_bin(), dir, dir, dir));
}

/* A run's length: more tokens than a run counts exactly (2^53) refused;
 * the ETA of a very long one said in days, or as more than 1000 (it read
 * -2147483648h-8m, an int overflowed) */
Test(train, huge_run_lengths)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "huge");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out, "timeout -s INT 5 %s train --model %s/init --data %s/data "
					 "--out %s/a --steps 9223372036854775807 " SMALL,
			cu_bin(), dir, dir, dir);
	cr_expect(rc == 2 && strstr(out, "--steps 9223372036854775807 of 128 tokens each is 1.18e+21 "
					 "tokens, more than the 2^53"),
		  "exit %d\n%s", rc, out);
	rc = cu_run(out, sizeof out, "timeout -s INT 3 %s train --model %s/init --data %s/data --out %s/b "
				     "--steps 40000000000000 --eval-interval 0 " SMALL,
		    cu_bin(), dir, dir, dir);
	cr_expect(strstr(out, "/40000000000000   0% |") && strstr(out, "ETA >1000d") &&
			  !strstr(out, "ETA -"),
		  "exit %d\n%s", rc, out);
}

/* A command line refused for its own sake exits 2, as a shell tool's usage
 * error does, and every other failure 1: a wrapper that retries failed
 * runs can tell "fix the command" from "it failed". Usage errors from the
 * flags, a --config file, and the option checks deeper in (an unknown
 * optimizer, --place, GaLore's rank, --seq-len past the model's), each
 * with its message; and the failures that are not usage: a missing file,
 * a damaged one, a run directory in use. */
Test(train, usage_errors_exit_2)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "usage");
	cu_setup_run(dir, "");
	const char *run = "%s train --model %s/init --data %s/data --out %s/run --steps 1 " SMALL " %s";
	static const struct {
		const char *flags, *says;
	} usage[] = {
		{ "--stesp 3", "did you mean 'steps'?" },
		{ "--lr", "--lr needs a value" },
		{ "--lr fast", "'fast' is not a number" },
		{ "--lr -1", "--lr must be positive" },
		{ "--optimizer adam9", "use --optimizer adamw" },
		{ "--quant-block 100 --optimizer adamw8bit", "--quant-block" },
		{ "--device-mem 12Q", "--device-mem: '12Q' is not a size" },
		{ "--place optimizer=disk", "needs a disk tier" },
		{ "--recompute 1 --activations keep", "give one of --recompute and --activations" },
		{ "--activations kx", "'x' is not k, r, h or d" },
		{ "--optimizer galore-adamw --galore-rank -3", "--galore-rank must be positive" },
		{ "--seq-len 1000", "exceeds the model's max_position_embeddings" },
		{ "--config %s/cfg.json --config %s/cfg.json", "--config is given twice" },
		/* options that cannot go together, found by the planner and the
		 * tiers (these exited 1) */
		{ "--activations dd", "there is no offload directory" },
		{ "--device-updates 1 --place optimizer=host", "but --place puts them elsewhere" },
		{ "--optimizer galore-adamw --place gradients=host", "cannot apply" },
		{ "--offload-dir %s/data --offload-dir %s/data/", "are the same directory" },
	};
	for (size_t i = 0; i < sizeof usage / sizeof usage[0]; i++) {
		char flags[512];
		snprintf(flags, sizeof flags, usage[i].flags, dir, dir);
		const int rc = cu_run(out, sizeof out, run, cu_bin(), dir, dir, dir, flags);
		cr_expect(rc == 2 && strstr(out, usage[i].says), "%s: exit %d\n%s", flags, rc, out);
	}
	cu_run(NULL, 0, "printf '{\"lr\": \"fast\"}' > %s/bad.json", dir);
	int rc = cu_run(out, sizeof out, "%s train --config %s/bad.json --model %s/init --data %s/data "
				 "--out %s/run --steps 1",
			cu_bin(), dir, dir, dir, dir);
	cr_expect(rc == 2 && strstr(out, "'fast' is not a number") && strstr(out, "bad.json"),
		  "a --config value: exit %d\n%s", rc, out);
	/* a number past a double's range (it read "'inf' is not a number") */
	cu_run(NULL, 0, "printf '{\"lr\": 1e400}' > %s/big.json", dir);
	rc = cu_run(out, sizeof out, "%s train --config %s/big.json --model %s/init --data %s/data "
				     "--out %s/run --steps 1",
		    cu_bin(), dir, dir, dir, dir);
	cr_expect(rc == 2 && strstr(out, "big.json: option 'lr': the number is out of range"),
		  "exit %d\n%s", rc, out);
	/* the other commands */
	const char *other[] = {
		"%s init --out %s/x --seed x",	     "%s prepare --input %s/text.txt",
		"%s eval --model %s/init --data",    "%s sample --model %s/init --top-p 2",
		"%s plan --model %s/init --steps 1 --micro-batch 0", "%s import --out %s/imp",
		"%s train",
	};
	for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
		rc = cu_run(out, sizeof out, other[i], cu_bin(), dir);
		cr_expect(rc == 2 && strstr(out, "error:"), "%s: exit %d\n%s", other[i], rc, out);
	}
	/* a model or a data directory given to --resume: said as what it is
	 * (it read as a run stopped before its first checkpoint) */
	rc = cu_run(out, sizeof out, "%s train --resume %s/init --steps 3", cu_bin(), dir);
	cr_expect(rc == 2 && strstr(out, "/init is a model directory, not a run or a checkpoint") &&
			  strstr(out, "start a new run from it with --model"),
		  "exit %d\n%s", rc, out);
	rc = cu_run(out, sizeof out, "%s train --resume %s/data --steps 3", cu_bin(), dir);
	cr_expect(rc == 2 && strstr(out, "/data is a prepared data directory") &&
			  strstr(out, "give it as --data"),
		  "exit %d\n%s", rc, out);
	/* more than 64 offload directories, in eval as in train (counted
	 * before any is looked for) */
	char many[65 * 8] = "";
	for (int i = 0; i < 65; i++)
		snprintf(many + strlen(many), sizeof many - strlen(many), "%so%d", i ? "," : "", i);
	rc = cu_run(out, sizeof out, "%s eval --model %s/init --data %s/data --device-mem 20M --offload-dir %s",
		    cu_bin(), dir, dir, many);
	cr_expect(rc == 2 && strstr(out, "too many offload directories"), "exit %d\n%s", rc, out);
	/* and none: "," (taken as no directory, as train's once was) */
	rc = cu_run(out, sizeof out, "%s eval --model %s/init --data %s/data --offload-dir ,", cu_bin(), dir,
		    dir);
	cr_expect(rc == 2 && strstr(out, "--offload-dir ',' names no directory"), "exit %d\n%s", rc, out);
	/* a resume asking for a setting the saved state cannot take: one error,
	 * exit 2 (they exited 1 with a second "cannot resume" line) */
	static const struct {
		const char *start, *resume, *says;
	} settings[] = {
		{ "--optimizer galore-adamw8bit --galore-rank 8", "--quant-block 64",
		  "was written with quantization block 256" },
		{ "--optimizer galore-adamw8bit --galore-rank 8", "--quant-min-size 0",
		  "--quant-min-size 4096, the run asks for 256 and 0" },
		{ "--optimizer sgd --momentum 0.9", "--momentum 0", "(a momentum buffer), the run asks" },
		{ "--optimizer sgd", "--momentum 0.9", "(no momentum buffer), the run asks" },
		/* a value bad on its own is named as such, before it is compared
		 * with the run's (it read "the run used 8") */
		{ "--optimizer galore-adamw --galore-rank 8", "--galore-rank 0",
		  "--galore-rank must be positive (got 0)" },
		{ "--optimizer galore-adamw --galore-rank 8", "--galore-update-gap 0",
		  "--galore-update-gap must be >= 1 (got 0)" },
	};
	for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
		rc = cu_run(out, sizeof out, "rm -rf %s/set && %s train --model %s/init --data %s/data --out "
					     "%s/set --steps 1 " SMALL " %s",
			    dir, cu_bin(), dir, dir, dir, settings[i].start);
		cr_assert_eq(rc, 0, "%s", out);
		for (int plan = 0; plan < 2; plan++) {
			rc = cu_run(out, sizeof out, "%s %s --resume %s/set %s %s", cu_bin(),
				    plan ? "plan" : "train", dir, plan ? "" : "--steps 2", settings[i].resume);
			const char *second = strstr(out, "error:");
			cr_expect(rc == 2 && strstr(out, settings[i].says) && second &&
					  !strstr(second + 1, "error:"),
				  "%s then %s %s: exit %d\n%s", settings[i].start, plan ? "plan" : "train",
				  settings[i].resume, rc, out);
		}
	}
	/* not usage: a model that is not there, a damaged one, a run in use */
	rc = cu_run(out, sizeof out, "%s train --model %s/nosuch --data %s/data --out %s/run --steps 1",
		    cu_bin(), dir, dir, dir);
	cr_expect(rc == 1 && strstr(out, "does not exist"), "a missing model: exit %d\n%s", rc, out);
	cu_run(NULL, 0, "cp -r %s/init %s/cut && truncate -s 5000 %s/cut/model.safetensors", dir, dir,
	       dir);
	rc = cu_run(out, sizeof out, "%s eval --model %s/cut --data %s/data", cu_bin(), dir, dir);
	cr_expect(rc == 1 && strstr(out, "model.safetensors"), "a truncated model: exit %d\n%s", rc,
		  out);
	rc = cu_run(out, sizeof out, "%s sample --model %s/nosuch --tokens 2", cu_bin(), dir);
	cr_expect_eq(rc, 1, "sample of a missing model: %s", out);
}

Test(train, impossible_configs)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "badcfg");
	struct {
		const char *json, *needle;
	} cases[] = {
		{"\"hidden_size\":60,\"num_attention_heads\":8,\"num_hidden_layers\":2", "must divide hidden_size"},
		{"\"hidden_size\":64,\"num_attention_heads\":4,\"num_key_value_heads\":3,\"num_hidden_layers\":2", "must divide num_attention_heads"},
		{"\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":0", "num_hidden_layers must be positive"},
		/* as init's --max-seq 1: no --seq-len trains it (it was taken) */
		{"\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":2,\"max_position_embeddings\":1", "max_position_embeddings must be at least 2"},
		/* a flag that is not a JSON boolean is refused, not read as false */
		{"\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":2,\"stable_embedding\":1", "\"stable_embedding\" must be true or false"},
		{"\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":2,\"tie_word_embeddings\":\"true\"", "\"tie_word_embeddings\" must be true or false"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int rc = cu_run(out, sizeof out,
				"printf '{\"vocab_size\":258,\"intermediate_size\":96,%s}' > %s/c.json && "
				"%s init --config %s/c.json --out %s/m%zu",
				cases[i].json, dir, cu_bin(), dir, dir, i);
		expect_fail("impossible config", cases[i].needle, rc);
	}
	expect_fail("unknown preset", "unknown preset",
		    cu_run(out, sizeof out, "%s init --config nosuch --out %s/x", cu_bin(), dir));
	/* impossible GaLore settings: refused before training, with the flag named */
	const struct {
		const char *flags, *needle;
	} gal[] = {
		{"--galore-rank 0", "--galore-rank must be positive"},
		{"--galore-update-gap 0", "--galore-update-gap must be"},
		{"--galore-start-spread 0", "--galore-start-spread must be"},
		{"--galore-proj qr", "--galore-proj must be"},
		{"--galore-moments reset", "--galore-moments must be"},
	};
	cu_setup_run(dir, "");
	/* numbers: decimal only, and too large named as such */
	const struct {
		const char *flags, *needle;
	} num[] = {
		{"--quant-block 0x100", "'0x100' is not an integer"},
		{"--quant-block 2147483648", "2147483648 is out of range (its size must be at most 2147483647)"},
		{"--seed 9223372036854775808", "9223372036854775808 is out of range (its size must be at most 9223372036854775807)"},
		{"--config %s/bool.json", "option 'max_skipped_steps' takes a value, not true or false"},
	};
	cu_run(NULL, 0, "echo '{\"max_skipped_steps\": false}' > %s/bool.json", dir);
	for (size_t i = 0; i < sizeof num / sizeof num[0]; i++) {
		char flags[600];
		snprintf(flags, sizeof flags, num[i].flags, dir);
		expect_fail("bad number", num[i].needle,
			    cu_run(out, sizeof out,
				   "%s train --model %s/init --data %s/data --out %s/n%zu --steps 1 "
				   "--optimizer adamw8bit %s " SMALL,
				   cu_bin(), dir, dir, dir, i, flags));
	}
	for (size_t i = 0; i < sizeof gal / sizeof gal[0]; i++)
		expect_fail("impossible GaLore option", gal[i].needle,
			    cu_run(out, sizeof out,
				   "%s train --model %s/init --data %s/data --out %s/g%zu --steps 1 "
				   "--optimizer galore-adamw %s " SMALL,
				   cu_bin(), dir, dir, dir, i, gal[i].flags));
}

Test(train, bad_data)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "baddata");
	cu_setup_run(dir, "");
	/* empty text */
	expect_fail("empty input", "empty",
		    cu_run(out, sizeof out, ": > %s/empty.txt && %s prepare --input %s/empty.txt --out %s/e",
			   dir, cu_bin(), dir, dir));
	/* too short for one window */
	cu_run(NULL, 0, "printf 'a short text.\\n' > %s/short.txt && %s prepare --input %s/short.txt --out %s/s --val-fraction 0",
	       dir, cu_bin(), dir, dir);
	expect_fail("too-short data", "fewer than one window",
		    cu_run(out, sizeof out, "%s train --model %s/init --data %s/s --out %s/r1 --steps 1 " SMALL,
			   cu_bin(), dir, dir, dir));
	/* the header's vocabulary (outside the checksum) against its tokens:
	 * 0, and 10 under byte tokens up to 257 (it used to train) */
	const char *vocab_bytes[] = {"\\000\\000\\000\\000", "\\012\\000\\000\\000"};
	const char *vocab_msg[] = {"the header's vocabulary size is 0",
				   "is past the vocabulary of 10 its header gives"};
	for (int i = 0; i < 2; i++)
		expect_fail("header vocabulary", vocab_msg[i],
			    cu_run(out, sizeof out, "cp %s/data/train.bin %s/hv.bin && printf '%s' | dd "
					    "of=%s/hv.bin bs=1 seek=16 conv=notrunc 2>/dev/null && %s train "
					    "--model %s/init --data %s/hv.bin --out %s/hv%d --steps 1 " SMALL,
				   dir, dir, vocab_bytes[i], dir, cu_bin(), dir, dir, dir, i));
	/* model vocabulary smaller than the shard's tokenizer */
	cu_run(NULL, 0, "%s init --config %s/cfg.json --vocab 200 --out %s/v200", cu_bin(), dir, dir);
	expect_fail("vocab mismatch", "vocabulary",
		    cu_run(out, sizeof out, "%s train --model %s/v200 --data %s/data --out %s/r2 --steps 1 " SMALL,
			   cu_bin(), dir, dir, dir));
	/* a shard whose header is consistent (vocabulary 40, hash right) but
	 * holds a token id >= 40: one token patched in place and the header's
	 * FNV-1a 64 hash recomputed, so only the per-token check can catch it */
	char path[512];
	snprintf(path, sizeof path, "%s/bad.bin", dir);
	uint32_t toks[200];
	for (int i = 0; i < 200; i++)
		toks[i] = (uint32_t)(i % 40);
	cr_assert_eq(shard_write(path, toks, 200, 40, "byte"), 0);
	FILE *f = fopen(path, "r+b");
	cr_assert(f);
	unsigned char buf[64 + 400];
	cr_assert_eq(fread(buf, 1, sizeof buf, f), sizeof buf);
	buf[64 + 2 * 7] = 45; /* token 7 (u16 little-endian) := 45 */
	buf[64 + 2 * 7 + 1] = 0;
	uint64_t h = 0xcbf29ce484222325ull;
	for (int i = 64; i < 64 + 400; i++)
		h = (h ^ buf[i]) * 0x100000001b3ull;
	for (int i = 0; i < 8; i++)
		buf[56 + i] = (unsigned char)(h >> (8 * i));
	rewind(f);
	cr_assert_eq(fwrite(buf, 1, sizeof buf, f), sizeof buf);
	fclose(f);
	cu_run(NULL, 0, "%s init --config %s/cfg.json --vocab 40 --out %s/v40", cu_bin(), dir, dir);
	expect_fail("token id >= vocab", "token 45 at position 7",
		    cu_run(out, sizeof out, "%s train --model %s/v40 --data %s --out %s/r4 --steps 1 " SMALL,
			   cu_bin(), dir, path, dir));
	/* corrupted shard bytes are caught by the checksum */
	cu_run(NULL, 0, "cp %s/data/train.bin %s/c.bin && printf 'Z' | dd of=%s/c.bin bs=1 seek=1000 conv=notrunc 2>/dev/null",
	       dir, dir, dir);
	expect_fail("corrupt shard", "c.bin",
		    cu_run(out, sizeof out, "%s train --model %s/init --data %s/c.bin --out %s/r3 --steps 1 " SMALL,
			   cu_bin(), dir, dir, dir));
}

/* A Hugging Face tokenizer.json through prepare, train and sample: the shards
 * record it (name and vocabulary), a model with a smaller vocabulary is
 * refused, a matching one trains (warned that it has no tokenizer.json), and
 * sample decodes with it. */
Test(train, hf_tokenizer_end_to_end)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "hftok");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out, "%s prepare --input %s/text.txt --out %s/bpe --tokenizer tests/data/tokenizers/llama3",
			cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "prepare failed: %s", out);
	cr_expect(strstr(out, "tokenizer bpe-") && strstr(out, "vocab 3002"), "prepare: %s", out);
	expect_fail("model vocabulary smaller than the tokenizer's", "vocabulary",
		    cu_run(out, sizeof out, "%s train --model %s/init --data %s/bpe --out %s/small --steps 1 " SMALL,
			   cu_bin(), dir, dir, dir));
	rc = cu_run(out, sizeof out,
		    "{ %s init --config %s/cfg.json --vocab 3002 --out %s/m3002 && "
		    "%s train --model %s/m3002 --data %s/bpe --out %s/run --steps 2 --eval-interval 0 " SMALL " && "
		    "%s sample --model %s/run --tokenizer tests/data/tokenizers/llama3 --prompt 'And the lord' --tokens 5 --seed 3; }",
		    cu_bin(), dir, dir, cu_bin(), dir, dir, dir, cu_bin(), dir);
	cr_assert_eq(rc, 0, "training or sampling with the tokenizer failed: %s", out);
	cr_expect(strstr(out, "And the lord"), "sample output lacks the prompt: %s", out);
	/* the model directory has no tokenizer.json: said, since its checkpoints
	 * would be sampled with the byte tokenizer */
	cr_expect(strstr(out, "/m3002 has no tokenizer.json: sample would read the model and its checkpoints with the byte tokenizer"),
		  "%s", out);
	/* a tokenizer.json strata cannot read: said at the start (train went
	 * on, copied it into every checkpoint, and advised preparing the data
	 * with it; sample then failed), and the run still trains on the ids */
	rc = cu_run(out, sizeof out,
		    "printf '{\"model\": ' > %s/m3002/tokenizer.json && %s train --model %s/m3002 --data %s/bpe "
		    "--out %s/bad --steps 1 --eval-interval 0 " SMALL,
		    dir, cu_bin(), dir, dir, dir);
	cr_expect(rc == 0 && strstr(out, "strata cannot read the model's tokenizer: ") &&
			  strstr(out, "/m3002/tokenizer.json: not valid JSON; the data's tokens are used") &&
			  !strstr(out, "run strata prepare with --tokenizer"),
		  "%s", out);
}

/* prepare's inputs: the same file twice (or through a link) is refused,
 * since its text would land in both splits; JSONL under a .json name and
 * text that is not UTF-8 are taken as text, with a warning saying so; the
 * share held out is said; 200 inputs are taken (more than the 128 options
 * the parser once held). */
Test(train, prepare_inputs_checked)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "inputs");
	char path[512];
	snprintf(path, sizeof path, "%s/a.txt", dir);
	cu_write_text(path, 30000, 3);
	int rc = cu_run(out, sizeof out, "ln -s %s/a.txt %s/link.txt && %s prepare --input %s/a.txt "
			"--input %s/link.txt --out %s/d",
			dir, dir, cu_bin(), dir, dir, dir);
	cr_expect(rc != 0 && strstr(out, "/link.txt is the same file as --input"), "%s", out);
	rc = cu_run(out, sizeof out, "printf '{\"text\": \"a\"}\\n' > %s/ex.json && "
			"printf 'caf\\351 ok\\n' > %s/latin1.txt && %s prepare --input %s/a.txt --input %s/ex.json "
			"--input %s/latin1.txt --out %s/d",
			dir, dir, cu_bin(), dir, dir, dir, dir);
	cr_expect(rc == 0 && strstr(out, "/ex.json is read as plain text") &&
			  strstr(out, "/latin1.txt is not UTF-8 text: 1 byte is NUL or invalid UTF-8, "
				      "the first at byte 3") &&
			  !strstr(out, "a.txt is not UTF-8") && strstr(out, "held out ") &&
			  strstr(out, "% of the tokens: one chunk in 20"),
		  "%s", out);
	/* a text without newlines is still cut near --chunk: it used to make
	 * chunks of 64 KiB, too few for a validation share under 1.3 MB */
	rc = cu_run(out, sizeof out, "tr '\\n' ' ' < %s/a.txt > %s/oneline.txt && "
			"%s prepare --input %s/oneline.txt --out %s/one",
			dir, dir, cu_bin(), dir, dir);
	cr_expect(rc == 0 && strstr(out, "% of the tokens: one chunk in 20") &&
			  !strstr(out, "--chunk"),
		  "one line: %s", out);
	/* a --chunk given and lowered for a small corpus is said (it was not) */
	rc = cu_run(out, sizeof out, "%s prepare --input %s/oneline.txt --out %s/onec --chunk 100000",
		    cu_bin(), dir, dir);
	cr_expect(rc == 0 && strstr(out, "--chunk 100000: ") &&
			  strstr(out, "give the held-out share about 20 chunks"),
		  "%s", out);
	/* a text without line breaks, in byte tokens, is cut where a character
	 * ends: cuts mid-character put byte sequences the text never had into
	 * train.bin (its chunks run together); every split decodes as UTF-8 */
	rc = cu_run(out, sizeof out, "python3 -c \"open('%s/cjk.txt', 'w').write('日本語のテキスト' * 20000)\" "
			"&& %s prepare --input %s/cjk.txt --out %s/cjk --chunk 1000 --val-fraction 0.1",
		    dir, cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	for (int k = 0; k < 2; k++) {
		snprintf(path, sizeof path, "%s/cjk/%s.bin", dir, k ? "val" : "train");
		struct st_shard sh;
		cr_assert_eq(shard_open(&sh, path), ST_OK);
		char *bytes = malloc(sh.n_tokens + 1);
		size_t nb = 0;
		for (uint64_t i = 0; i < sh.n_tokens; i++) {
			const uint32_t t = shard_token(&sh, i);
			if (t < 256)
				bytes[nb++] = (char)t;
		}
		cr_expect(nb > 10000 && st_utf8_bad(bytes, nb) < 0, "%s: %zu bytes, not UTF-8 at %ld", path, nb,
			  st_utf8_bad(bytes, nb));
		free(bytes);
		shard_close(&sh);
	}
	/* a --chunk below 256 given for a small corpus is kept: it became 256,
	 * and the refusal's hint to lower it could not help */
	rc = cu_run(out, sizeof out, "for i in $(seq 100); do echo \"line number $i of a small file\"; "
			"done > %s/small.txt && %s prepare --input %s/small.txt --out %s/sm --chunk 100",
		    dir, cu_bin(), dir, dir);
	cr_expect(rc == 0 && strstr(out, "% of the tokens: one chunk in 20"), "%s", out);
	/* too short to hold out a chunk: a smaller --chunk is offered only
	 * where it can help (25 bytes make no 20 chunks at any size, and
	 * --chunk 1 is the smallest; 81 bytes at --chunk 4096 do at 2) */
	rc = cu_run(out, sizeof out, "echo 'hello world this is text' | %s prepare --input - --out "
			"%s/short --chunk 1", cu_bin(), dir);
	cr_expect(rc != 0 && strstr(out, "hint: give more text, or --val-fraction 0"), "%s", out);
	rc = cu_run(out, sizeof out, "seq 1 30 > %s/s30.txt && %s prepare --input %s/s30.txt --out "
			"%s/s30 --chunk 4096", dir, cu_bin(), dir, dir);
	cr_expect(rc != 0 && strstr(out, "hint: give more text, a smaller --chunk, or --val-fraction 0"),
		  "%s", out);
	/* a strata shard is not text; JSONL's invalid UTF-8 and a .json array
	 * of examples are said */
	rc = cu_run(out, sizeof out, "%s prepare --input %s/d/train.bin --out %s/again", cu_bin(), dir,
		    dir);
	cr_expect(rc != 0 && strstr(out, "/d/train.bin is a strata token shard, not text"), "%s", out);
	rc = cu_run(out, sizeof out, "printf '{\"text\": \"caf\\351\"}\\n' > %s/l1.jsonl && "
			"printf '[{\"text\": \"a\"}]' > %s/arr.json && %s prepare --input %s/l1.jsonl "
			"--input %s/arr.json --out %s/j --val-fraction 0",
			dir, dir, cu_bin(), dir, dir, dir);
	cr_expect(rc == 0 && strstr(out, "/l1.jsonl is not UTF-8 text: 1 byte is invalid UTF-8") &&
			  strstr(out, "/arr.json is read as plain text; if it is a JSON array of examples"),
		  "%s", out);
	char cmd[1 << 15], bin[PATH_MAX];
	int len = snprintf(cmd, sizeof cmd, "cd %s && for i in $(seq 200); do printf 'line %%s\\n' $i > m$i.txt; "
			   "done && %s prepare --out m --val-fraction 0", dir, realpath(cu_bin(), bin));
	for (int i = 1; i <= 200; i++) /* short names: cu_run takes 8 KiB of command */
		len += snprintf(cmd + len, sizeof cmd - (size_t)len, " --input m%d.txt", i);
	rc = cu_run(out, sizeof out, "%s", cmd);
	cr_expect(rc == 0 && strstr(out, "wrote "), "200 inputs: %s", out);
}

/* Each file ends with <eos> in the split its last chunk went to: with one
 * chunk per file and every second one held out, train.bin and val.bin each
 * hold their files with one <eos> after each (and, with --bos, a <bos>
 * before each: a document's start, as transformers encodes one). Every <eos> went to train.bin,
 * so validation files ran together and train.bin held <eos><eos> pairs. A
 * tokenizer that names no <eos> (the GPT-2 test tokenizer with its
 * <|endoftext|> renamed) is warned about: the files, and examples, would
 * have nothing to end them. */
Test(train, prepare_eos_in_each_split)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "eos");
	int rc = cu_run(out, sizeof out, "cd %s && for i in $(seq 8); do echo \"file $i line\" > f$i.txt; "
			"done && %s prepare --input f1.txt --input f2.txt --input f3.txt --input f4.txt "
			"--input f5.txt --input f6.txt --input f7.txt --input f8.txt --out d --val-fraction 0.5",
			dir, cu_bin());
	cr_assert_eq(rc, 0, "%s", out);
	for (int split = 0; split < 4; split++) {
		/* 2, 3: with --bos, each file starts with <bos>, in its split */
		if (split == 2) {
			rc = cu_run(out, sizeof out, "cd %s && %s prepare --input f1.txt --input f2.txt "
					"--input f3.txt --input f4.txt --input f5.txt --input f6.txt --input f7.txt "
					"--input f8.txt --out db --val-fraction 0.5 --bos",
				    dir, cu_bin());
			cr_assert_eq(rc, 0, "%s", out);
		}
		char path[512];
		snprintf(path, sizeof path, "%s/%s/%s.bin", dir, split < 2 ? "d" : "db",
			 split % 2 ? "val" : "train");
		struct st_shard sh;
		cr_assert_eq(shard_open(&sh, path), ST_OK);
		char got[256];
		size_t n = 0;
		for (uint64_t i = 0; i < sh.n_tokens && n + 6 < sizeof got; i++) {
			const uint32_t t = shard_token(&sh, i);
			n += t == ST_BYTE_EOS   ? (size_t)snprintf(got + n, sizeof got - n, "<eos>")
			     : t == ST_BYTE_BOS ? (size_t)snprintf(got + n, sizeof got - n, "<bos>")
						: (size_t)snprintf(got + n, sizeof got - n, "%c", (char)t);
		}
		shard_close(&sh);
		const char *want[4] = {
			"file 1 line\n<eos>file 3 line\n<eos>file 5 line\n<eos>file 7 line\n<eos>",
			"file 2 line\n<eos>file 4 line\n<eos>file 6 line\n<eos>file 8 line\n<eos>",
			"<bos>file 1 line\n<eos><bos>file 3 line\n<eos><bos>file 5 line\n<eos><bos>file 7 line\n<eos>",
			"<bos>file 2 line\n<eos><bos>file 4 line\n<eos><bos>file 6 line\n<eos><bos>file 8 line\n<eos>"};
		cr_expect_str_eq(got, want[split], "%s %s.bin", split < 2 ? "d" : "db",
				 split % 2 ? "val" : "train");
	}
	/* a tokenizer without <bos>: --bos is refused, nothing written */
	rc = cu_run(out, sizeof out, "{ cd %s && %s prepare --input f1.txt --out g --bos --tokenizer "
			"%s/tests/data/tokenizers/gpt2/tokenizer.json; e=$?; test ! -e g && exit $e; }",
		    dir, cu_bin(), getcwd((char[PATH_MAX]){0}, PATH_MAX));
	cr_expect(rc != 0 && strstr(out, "has no <bos>"), "%s", out);
	rc = cu_run(out, sizeof out, "cd %s && python3 -c \"import json; j = json.load(open('%s/tests/data/"
			"tokenizers/gpt2/tokenizer.json'))\nfor a in j['added_tokens']:\n    a['content'] = "
			"a['content'].replace('endoftext', 'end-of-doc')\nv = j['model']['vocab']\n"
			"v['<|end-of-doc|>'] = v.pop('<|endoftext|>')\njson.dump(j, open('noeos.json', 'w'))\" && "
			"%s prepare --input f1.txt --input f2.txt --out n --val-fraction 0 --tokenizer noeos.json",
			dir, getcwd((char[PATH_MAX]){0}, PATH_MAX), cu_bin());
	cr_expect(rc == 0 && strstr(out, "names no end-of-text token (<eos>): the files are joined "
					 "with nothing between them"),
		  "%s", out);
}

/* prepare's shards hold the ids of each file encoded whole, cut into chunks
 * only afterwards: encoding chunk by chunk cut words of lines longer than
 * --chunk + 64 KiB (and split merges across a cut, and added a prefix space
 * per chunk, with tokenizers that have them). Here paragraphs, then one
 * 150 KB line, through the llama3 test tokenizer at --chunk 256: train.bin
 * is the whole file's encoding and its <eos>, read at once or in parts of
 * 7 bytes (tokenizer_encode_part); with a split, train and validation
 * together hold as many ids. An encoder out of memory fails the command. */
Test(train, prepare_encodes_each_file_whole)
{
	char dir[256], path[512];
	cu_tmpdir(dir, sizeof dir, "whole");
	snprintf(path, sizeof path, "%s/text.txt", dir);
	cu_write_text(path, 20000, 4);
	FILE *f = fopen(path, "a");
	cr_assert(f);
	for (int i = 0; i < 30000; i++)
		fputs(i % 7 ? "word " : "and 12345 ", f);
	fclose(f);
	int rc = cu_run(out, sizeof out, "%s prepare --input %s --out %s/d --chunk 256 --val-fraction 0 "
			"--tokenizer tests/data/tokenizers/llama3 && %s prepare --input %s --out %s/s --chunk 256 "
			"--val-fraction 0.1 --tokenizer tests/data/tokenizers/llama3 && "
			"STRATA_PREP_PART=7 %s prepare --input %s --out %s/p --chunk 256 --val-fraction 0 "
			"--tokenizer tests/data/tokenizers/llama3",
			cu_bin(), path, dir, cu_bin(), path, dir, cu_bin(), path, dir);
	cr_assert_eq(rc, 0, "%s", out);
	struct st_tokenizer tk;
	cr_assert_eq(tokenizer_load(&tk, "tests/data/tokenizers/llama3"), ST_OK);
	char *text;
	size_t len;
	cr_assert_eq(fs_read_file(path, &text, &len), ST_OK);
	uint32_t *want = malloc(tokenizer_max_ids(len) * sizeof *want);
	cr_assert(want);
	const size_t n = tokenizer_encode(&tk, want, text, len);
	want[n] = (uint32_t)tk.eos_id;
	struct st_shard sh, tr, va;
	for (int parts = 0; parts < 2; parts++) { /* read at once; in parts of 7 bytes */
		snprintf(path, sizeof path, "%s/%s/train.bin", dir, parts ? "p" : "d");
		cr_assert_eq(shard_open(&sh, path), ST_OK);
		cr_expect_eq(sh.n_tokens, n + 1, "%s: %llu ids, the whole file gives %zu + <eos>",
			     path, (unsigned long long)sh.n_tokens, n);
		size_t first_diff = n + 1;
		for (size_t i = 0; i < n + 1 && i < sh.n_tokens && first_diff > n; i++)
			if (shard_token(&sh, i) != want[i])
				first_diff = i;
		cr_expect_eq(first_diff, n + 1, "%s differs from the whole file's encoding at id %zu",
			     path, first_diff);
		shard_close(&sh);
	}
	snprintf(path, sizeof path, "%s/s/train.bin", dir);
	cr_assert_eq(shard_open(&tr, path), ST_OK);
	snprintf(path, sizeof path, "%s/s/val.bin", dir);
	cr_assert_eq(shard_open(&va, path), ST_OK);
	cr_expect(va.n_tokens > 0 && tr.n_tokens + va.n_tokens == n + 1, "%llu + %llu ids, want %zu",
		  (unsigned long long)tr.n_tokens, (unsigned long long)va.n_tokens, n + 1);
	shard_close(&tr);
	shard_close(&va);
	free(want);
	free(text);
	tokenizer_free(&tk);
	/* one 30 MB piece (a run of one letter) under a 1 GB address limit: the
	 * encoder runs out of memory, which is an error, not an empty train.bin
	 * (its failed allocations once ended the encoding at 0 ids, silently) */
	rc = cu_run(out, sizeof out, "head -c 30000000 /dev/zero | tr '\\0' a > %s/a.txt && (ulimit -v 1000000; "
			"export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1; " /* BLAS reserves per thread */
			"%s prepare --input %s/a.txt --out %s/a --val-fraction 0 "
			"--tokenizer tests/data/tokenizers/llama3)",
		    dir, cu_bin(), dir, dir);
	cr_expect(rc != 0 && strstr(out, "tokenizer: out of memory encoding 30000000 bytes") &&
			  strstr(out, "/a.txt could not be encoded; nothing was written"),
		  "%s", out);
	cr_expect_eq(cu_run(NULL, 0, "test ! -e %s/a/train.bin && rm %s/a.txt", dir, dir), 0);
}

/* prepare's memory is bounded by the part of a file it reads at a time
 * (16 MiB), not by the file or the corpus (byte tokenizer: 4 bytes of ids
 * a byte). Six 8 MB files peak within 16 MiB of one of them alone; the
 * same 48 MB in one file within a part's text and ids (5 x 16 MiB) + 64 MiB
 * for the program and its libraries (about 10 MiB measured), where holding
 * the file and its ids, as prepare did until 2026-11-25, needs 240 MB (372
 * MB peak for a 97 MB file with the llama3 test tokenizer, 76 MB read in
 * parts: README); in parts of 1 MiB, within 5 MiB + 64 MiB; from standard
 * input (read whole until 2026-11-25) within the same bound as the file; the
 * same shards every way. The shards hold every byte and each file's <eos>. */
Test(train, prepare_memory_bounded_by_a_part, .timeout = 180)
{
	char dir[256], path[512], cmd[4096];
	cu_tmpdir(dir, sizeof dir, "preprss");
	const size_t file_bytes = 8000000;
	int len = snprintf(cmd, sizeof cmd, "%s prepare --out %s/all", cu_bin(), dir);
	size_t total = 0;
	for (int f = 0; f < 6; f++) {
		snprintf(path, sizeof path, "%s/t%d.txt", dir, f);
		cu_write_text(path, file_bytes, 11 + (unsigned)f);
		struct stat st;
		cr_assert_eq(stat(path, &st), 0);
		total += (size_t)st.st_size;
		len += snprintf(cmd + len, sizeof cmd - (size_t)len, " --input %s", path);
	}
	int status;
	const size_t rss_all = cu_peak_rss(cmd, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "prepare of 6 files failed: %s", cmd);
	snprintf(cmd, sizeof cmd, "%s prepare --out %s/one --input %s/t0.txt", cu_bin(), dir, dir);
	const size_t rss_one = cu_peak_rss(cmd, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "prepare of one file failed: %s", cmd);
	cr_assert_eq(cu_run(NULL, 0, "cat %s/t?.txt > %s/big.txt", dir, dir), 0);
	snprintf(cmd, sizeof cmd, "%s prepare --out %s/big --input %s/big.txt", cu_bin(), dir, dir);
	const size_t rss_big = cu_peak_rss(cmd, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "prepare of 48 MB failed: %s", cmd);
	snprintf(cmd, sizeof cmd, "env STRATA_PREP_PART=1048576 %s prepare --out %s/parts --input %s/big.txt",
		 cu_bin(), dir, dir);
	const size_t rss_parts = cu_peak_rss(cmd, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "prepare in 1 MiB parts failed: %s",
		  cmd);
	/* from standard input, read a part at a time after the survey's first */
	snprintf(cmd, sizeof cmd, "cat %s/big.txt | %s prepare --out %s/stdin --input -", dir,
		 cu_bin(), dir);
	const size_t rss_stdin = cu_peak_rss(cmd, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "prepare from stdin failed: %s",
		  cmd);
	cr_log_info("prepare peak RSS: %.1f MiB for 6 files of 8 MB, %.1f MiB for one, %.1f MiB for "
		    "all in one file, %.1f MiB for it in 1 MiB parts, %.1f MiB from standard input",
		    rss_all / 1048576.0, rss_one / 1048576.0, rss_big / 1048576.0,
		    rss_parts / 1048576.0, rss_stdin / 1048576.0);
	cr_expect_leq(rss_all, rss_one + (16u << 20),
		      "prepare of 6 files peaked at %.1f MiB, one of them alone at %.1f MiB",
		      rss_all / 1048576.0, rss_one / 1048576.0);
	const size_t part = 16u << 20, bound = 5 * part + (64u << 20);
	cr_expect_leq(rss_big, bound, "prepare of one 48 MB file peaked at %.1f MiB, over %.1f MiB",
		      rss_big / 1048576.0, bound / 1048576.0);
	cr_expect_leq(rss_parts, 5 * (1u << 20) + (64u << 20),
		      "prepare in parts of 1 MiB peaked at %.1f MiB", rss_parts / 1048576.0);
	cr_expect_leq(rss_stdin, bound, "prepare of 48 MB from standard input peaked at %.1f MiB",
		      rss_stdin / 1048576.0);
	cr_expect_eq(cu_run(out, sizeof out, "cd %s && cmp big/train.bin parts/train.bin && "
			    "cmp big/val.bin parts/val.bin && cmp big/train.bin stdin/train.bin && "
			    "cmp big/val.bin stdin/val.bin", dir), 0,
		     "1 MiB parts or standard input gave other shards: %s", out);
	uint64_t n = 0;
	for (int split = 0; split < 2; split++) {
		struct st_shard sh;
		snprintf(path, sizeof path, "%s/all/%s.bin", dir, split ? "val" : "train");
		cr_assert_eq(shard_open(&sh, path), ST_OK);
		n += sh.n_tokens;
		shard_close(&sh);
	}
	cr_expect_eq(n, total + 6, "%llu ids for %zu bytes in 6 files", (unsigned long long)n,
		     total);
	cu_run(NULL, 0, "rm -rf %s", dir);
}

/* A corpus read in parts of a few bytes (STRATA_PREP_PART) gives the
 * shards, loss masks and messages of one read at once: plain text, JSONL
 * examples (a part ends at a line end; a line longer than a part is read
 * longer), standard input, text that is not UTF-8 (a character cut between
 * parts counted once; JSON under another name said once), with the byte
 * tokenizer and one that puts a prefix space on each piece. */
Test(train, prepare_in_parts_as_at_once)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "prepparts");
	char *text = NULL;
	size_t tl = 0;
	FILE *f = open_memstream(&text, &tl);
	for (int i = 0; i < 400; i++)
		fprintf(f, "Line %d: caf\xc3\xa9 na\xc3\xafve \xf0\x9f\x98\x80 %s\n\n  indent\twith\ttabs%s",
			i, i % 5 ? "words and 12345 numbers" : "bad \xff\xe2\x82 bytes",
			i % 7 ? "" : "<|end_of_text|>");
	fclose(f);
	char path[512];
	snprintf(path, sizeof path, "%s/t.txt", dir);
	cr_assert_eq(fs_write_file_atomic(path, text, tl), ST_OK);
	free(text);
	snprintf(path, sizeof path, "%s/e.jsonl", dir);
	f = fopen(path, "w");
	cr_assert(f);
	for (int i = 0; i < 80; i++)
		fprintf(f, i % 4 ? "{\"prompt\": \"Q%d caf\xc3\xa9?\", \"completion\": \" A %d\"}\n"
				 : "{\"text\": \"plain %d \\u00e9 and %d\"}\n\n",
			i, i);
	fclose(f);
	char xllama3[4200], cwd[4096];
	cr_assert(getcwd(cwd, sizeof cwd));
	snprintf(xllama3, sizeof xllama3, "%s/tests/data/tokenizers/xllama3", cwd);
	snprintf(path, sizeof path, "%s/j.json", dir);
	static const char json_text[] = "{\"a\": \"hello world\"}\n{\"b\": 2}\n";
	cr_assert_eq(fs_write_file_atomic(path, json_text, strlen(json_text)), ST_OK);
	const char *const toks[2] = {"byte", xllama3};
	for (int t = 0; t < 2; t++) {
		static const char *const parts[3] = {"", "STRATA_PREP_PART=1 ", "STRATA_PREP_PART=13 "};
		char first[sizeof out] = "";
		for (int p = 0; p < 3; p++) {
			int rc = cu_run(out, sizeof out,
					"cd %s && { %s%s prepare --input t.txt --input e.jsonl --input j.json --out p%d "
					"--tokenizer %s --chunk 128 --bos && cat t.txt | %s%s prepare "
					"--input - --out s%d --tokenizer %s --chunk 100; }",
					dir, parts[p], cu_bin(), p, toks[t], parts[p], cu_bin(), p, toks[t]);
			cr_assert_eq(rc, 0, "%s", out);
			for (char *q; (q = strstr(out, " p1")) || (q = strstr(out, " p2")) ||
				      (q = strstr(out, " s1")) || (q = strstr(out, " s2"));)
				q[2] = '0'; /* the directories' names aside */
			if (!p) {
				snprintf(first, sizeof first, "%s", out);
				cr_expect(strstr(out, "not UTF-8") && strstr(out, "examples;") &&
						  strstr(out, "j.json is read as plain text"),
					  "%s", out);
			} else {
				cr_expect_str_eq(out, first, "%s: %sanother message", toks[t], parts[p]);
			}
			if (p)
				cr_expect_eq(cu_run(out, sizeof out,
						    "cd %s && for f in train.bin val.bin train.mask.bin "
						    "val.mask.bin; do cmp p0/$f p%d/$f || exit 1; done && "
						    "cmp s0/train.bin s%d/train.bin && cmp s0/val.bin s%d/val.bin",
						    dir, p, p, p),
					     0, "%s: %sother shards: %s", toks[t], parts[p], out);
		}
		cu_run(NULL, 0, "cd %s && rm -rf p0 p1 p2 s0 s1 s2", dir);
	}
	cu_run(NULL, 0, "rm -rf %s", dir);
}

/* Sharded weights (model-0000k-of-0000n.safetensors + index, as Hugging
 * Face writes models above its shard size): init writes them, every command
 * reads them, checkpoints are sharded by --shard-size and resume exactly;
 * a broken index is a clear error. */
/* init makes and writes the weights a unit at a time: llama-130m (341 MB
 * of weights with the byte vocabulary) peaks under 128 MiB, where building
 * the whole model first took 343 MB (and a 7B init was killed for memory
 * on a 24 GiB machine, with no word). The weights are a whole-model
 * init's: a sharded, stable-embedding `small` model read back equals
 * session_init_random's with the same seed, every float. */
Test(train, init_streams_a_unit_at_a_time, .timeout = 300)
{
	char dir[256], cmd[1024], path[512];
	cu_tmpdir(dir, sizeof dir, "initmem");
	snprintf(cmd, sizeof cmd, "%s init --config llama-130m --out %s/m", cu_bin(), dir);
	int status;
	const size_t rss = cu_peak_rss(cmd, &status);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", cmd);
	snprintf(path, sizeof path, "%s/m/model.safetensors", dir);
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	cr_expect_gt(st.st_size, 300000000, "the model is %lld bytes", (long long)st.st_size);
	cr_expect_lt(rss, (size_t)128 << 20, "init of a %lld-byte model peaked at %zu MiB",
		     (long long)st.st_size, rss >> 20);
	cr_assert_eq(cu_run(out, sizeof out,
			    "%s init --config small --seed 5 --shard-size 1M --stable-embedding --out "
			    "%s/s && ls %s/s/model.safetensors.index.json",
			    cu_bin(), dir, dir),
		     0, "%s", out);
	struct st_config cfg;
	snprintf(path, sizeof path, "%s/s/config.json", dir);
	cr_assert_eq(config_load(&cfg, path), ST_OK);
	struct st_session a, b;
	cr_assert_eq(session_create(&a, ops_cpu(), &cfg, ST_GRADS_NONE), ST_OK);
	session_init_random(&a, 5);
	cr_assert_eq(session_create(&b, ops_cpu(), &cfg, ST_GRADS_NONE), ST_OK);
	snprintf(path, sizeof path, "%s/s", dir);
	cr_assert_eq(session_load_weights(&b, path), ST_OK);
	for (int u = 0; u < a.model.n_units; u++) {
		const float *x = store_acquire(&a.store, u, ST_SLAB_W);
		const float *y = store_acquire(&b.store, u, ST_SLAB_W);
		cr_expect(!memcmp(x, y, a.model.units[u].numel * sizeof(float)),
			  "unit %d differs from a whole-model init", u);
		store_release(&a.store, u, ST_SLAB_W, 0);
		store_release(&b.store, u, ST_SLAB_W, 0);
	}
	session_close(&a);
	session_close(&b);
	cu_run(NULL, 0, "rm -rf %s", dir);
}

Test(train, sharded_weights)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "shards");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s init --config %s/cfg.json --out %s/sharded --shard-size 40K && ls %s/sharded",
			cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "model-00001-of-") && strstr(out, "model.safetensors.index.json") &&
			  !strstr(out, "model.safetensors\n"),
		  "no sharded layout: %s", out);
	/* the same weights as the single-file init: the same training, bit for bit */
	rc = cu_run(out, sizeof out,
		    "%s train --model %s/sharded --data %s/data --out %s/a --steps 4 --ckpt-interval 2 --shard-size 40K " SMALL
		    " && %s train --model %s/init --data %s/data --out %s/b --steps 4 --ckpt-interval 2 " SMALL
		    " && %s train --resume %s/a/step-000002 --out %s/c --shard-size auto",
		    cu_bin(), dir, dir, dir, cu_bin(), dir, dir, dir, cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	rc = cu_run(out, sizeof out, "ls %s/a/step-000002 %s/c/step-000004", dir, dir);
	cr_expect(strstr(out, "model.safetensors.index.json") && strstr(out, "model.safetensors\n"),
		  "the checkpoints are not sharded, then single, as asked: %s", out);
	char a[512], b[512];
	snprintf(a, sizeof a, "%s/b/step-000004", dir);
	snprintf(b, sizeof b, "%s/c/step-000004", dir);
	cu_expect_same_state(a, b, "resumed from a sharded checkpoint");
	/* a broken index: a shard file missing, then an entry outside the dir */
	rc = cu_run(out, sizeof out, "cp -r %s/sharded %s/broken && rm %s/broken/model-00002-of-*.safetensors && "
		    "%s eval --model %s/broken --data %s/data", dir, dir, dir, cu_bin(), dir, dir);
	expect_fail("missing shard", "model-00002-of-", rc);
	rc = cu_run(out, sizeof out, "cp -r %s/sharded %s/broken2 && sed -i 's#model-00001-of#../model-00001-of#' "
		    "%s/broken2/model.safetensors.index.json && %s eval --model %s/broken2 --data %s/data",
		    dir, dir, dir, cu_bin(), dir, dir);
	expect_fail("index entry outside the directory", "bad entry", rc);
	/* a tensor in two shard files (a copy of shard 2 that the index names
	 * for one of its tensors): refused, not the first file's copy taken; an
	 * index that disagrees with the files (an entry for a tensor no file
	 * holds, a tensor it does not list) is warned as stale: tensors are
	 * looked up in the files, as transformers does */
	rc = cu_run(out, sizeof out, "cp -r %s/sharded %s/twice && cd %s/twice && for f in model-00002-of-*; "
		    "do cp $f extra-${f#model-}; done && sed -i '0,/model-00002-of/s//extra-00002-of/' "
		    "model.safetensors.index.json && %s eval --model %s/twice --data %s/data",
		    dir, dir, dir, cu_bin(), dir, dir);
	expect_fail("a tensor in two files", "is in two weight files", rc);
	rc = cu_run(out, sizeof out, "cp -r %s/sharded %s/ghost && cd %s/ghost && f=$(ls model-00001-of-*) && "
		    "sed -i \"s/\\\"weight_map\\\"[[:space:]]*:[[:space:]]*{/&\\\"foo.bar\\\": \\\"$f\\\", /\" "
		    "model.safetensors.index.json && %s eval --model %s/ghost --data %s/data",
		    dir, dir, dir, cu_bin(), dir, dir);
	cr_expect(rc == 0 && strstr(out, "the index puts tensor 'foo.bar' in model-00001-of-") &&
			  strstr(out, "a stale index"),
		  "%s", out);
	rc = cu_run(out, sizeof out, "cp -r %s/sharded %s/unlisted && cd %s/unlisted && sed -i "
		    "'/\"model.layers.0.input_layernorm.weight\"/d' model.safetensors.index.json && "
		    "%s eval --model %s/unlisted --data %s/data",
		    dir, dir, dir, cu_bin(), dir, dir);
	cr_expect(rc == 0 && strstr(out, "holds tensor 'model.layers.0.input_layernorm.weight', which the "
					 "index does not list"),
		  "%s", out);
	/* said once per command (it was said at each opening of the files) */
	const char *first = strstr(out, "a stale index");
	cr_expect(first && !strstr(first + 1, "a stale index"), "not said once: %s", out);
	/* a tied model's index listing lm_head.weight, which no file holds
	 * (some writers add it): not stale */
	rc = cu_run(out, sizeof out, "%s init --config %s/cfg.json --tied --out %s/tied --shard-size 40K && "
		    "cd %s/tied && f=$(ls model-00001-of-*) && "
		    "sed -i \"s/\\\"weight_map\\\"[[:space:]]*:[[:space:]]*{/&\\\"lm_head.weight\\\": \\\"$f\\\", /\" "
		    "model.safetensors.index.json && grep -q lm_head model.safetensors.index.json && "
		    "%s eval --model %s/tied --data %s/data",
		    cu_bin(), dir, dir, dir, cu_bin(), dir, dir);
	cr_expect(rc == 0 && !strstr(out, "stale index"), "%s", out);
}

/* JSONL fine-tuning data: loss only on completions. The byte tokenizer makes
 * the expected layout exact: <bos> prompt completion <eos>, the prompt's
 * targets -1 (context only), the completion's and <eos> counted. */
Test(train, jsonl_prompt_completion_masks)
{
	char dir[256], path[512];
	cu_tmpdir(dir, sizeof dir, "jsonl");
	snprintf(path, sizeof path, "%s/ex.jsonl", dir);
	FILE *f = fopen(path, "w");
	cr_assert(f);
	for (int i = 0; i < 40; i++)
		fprintf(f, "{\"prompt\": \"Q%d:\", \"completion\": \" A%d\"}\n", i, i);
	fprintf(f, "\n{\"text\": \"plain\"}\n");
	fclose(f);
	int rc = cu_run(out, sizeof out, "%s prepare --input %s --out %s/data --val-fraction 0.1", cu_bin(),
			path, dir);
	cr_assert_eq(rc, 0, "%s", out);
	/* the summary's counts: a training example is <bos> prompt completion
	 * <eos>, its completion and <eos> the targets; one in 10 held out */
	size_t targets = 6, tokens = 7; /* {"text": "plain"}: <bos> plain <eos> */
	for (int i = 0; i < 40; i++)
		if (i % 10 != 9) {
			const size_t digits = i < 10 ? 1 : 2;
			targets += 2 + digits + 1;
			tokens += 1 + (2 + digits) + (2 + digits) + 1;
		}
	char want[128];
	snprintf(want, sizeof want, "41 examples; %zu of %zu training tokens are loss targets", targets,
		 tokens);
	cr_expect(strstr(out, want), "want \"%s\": %s", want, out);
	struct st_data d;
	snprintf(path, sizeof path, "%s/data", dir);
	cr_assert_eq(data_open(&d, path, NULL, 258, 1), ST_OK);
	cr_assert(d.has_train_mask && d.has_val_mask, "no loss masks opened");
	/* a mask given as the data is named as such, not scored as tokens */
	rc = cu_run(out, sizeof out, "%s init --config tiny --out %s/m >/dev/null && %s eval --model %s/m "
			"--data %s/val.mask.bin", cu_bin(), dir, cu_bin(), dir, path);
	cr_expect(rc != 0 && strstr(out, "/val.mask.bin is a loss mask"), "%s", out);
	/* the first example: <bos> Q 0 : ' ' A 0 <eos> */
	const char *ex = "Q0: A0";
	cr_assert_eq(shard_token(&d.train, 0), 256u);
	for (int i = 0; i < 6; i++)
		cr_expect_eq(shard_token(&d.train, 1 + (uint64_t)i), (uint32_t)(unsigned char)ex[i]);
	cr_expect_eq(shard_token(&d.train, 7), 257u);
	const uint32_t want_mask[8] = {0, 0, 0, 0, 1, 1, 1, 1};
	for (int i = 0; i < 8; i++)
		cr_expect_eq(shard_token(&d.train_mask, (uint64_t)i), want_mask[i], "mask at %d", i);
	/* a validation window: targets -1 exactly where the mask is 0 */
	int32_t tok[16], tgt[16];
	data_val_batch(&d, tok, tgt, 1, 16, 0);
	for (int i = 0; i < 16; i++) {
		uint32_t m = shard_token(&d.val_mask, (uint64_t)i + 1);
		cr_expect_eq(tgt[i], m ? (int32_t)shard_token(&d.val, (uint64_t)i + 1) : -1, "target %d", i);
	}
	data_close(&d);
	/* training on it runs (loss on completions only) */
	rc = cu_run(out, sizeof out, "%s train --model %s/init --data %s/data --out %s/run --steps 2 "
		    "--eval-interval 0 --micro-batch 2 --seq-len 16", cu_bin(), dir, dir, dir);
	cr_expect_neq(rc, 0, "no model yet: must fail");
	cu_run(NULL, 0, "%s init --config tiny --out %s/init", cu_bin(), dir);
	rc = cu_run(out, sizeof out, "%s train --model %s/init --data %s/data --out %s/run --steps 2 "
		    "--eval-interval 0 --micro-batch 2 --seq-len 16", cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	/* a malformed line: the file and line number */
	snprintf(path, sizeof path, "%s/bad.jsonl", dir);
	f = fopen(path, "w");
	fprintf(f, "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": 3}\n");
	fclose(f);
	rc = cu_run(out, sizeof out, "%s prepare --input %s --out %s/bad --val-fraction 0", cu_bin(), path, dir);
	expect_fail("malformed JSONL", "bad.jsonl:2", rc);
	/* lines that would lose text or meaning silently: a NUL escape (the
	 * text would end there), text beside prompt/completion; an escaped
	 * backslash before u0000 is text, not a NUL */
	const struct {
		const char *line, *needle;
	} odd[] = {
		{"{\"text\": \"abc\\u0000def\"}", "odd.jsonl:1: a NUL character"},
		{"{\"prompt\": \"a\", \"completion\": \"b\", \"text\": \"c\"}",
		 "odd.jsonl:1: both text and prompt/completion"},
		/* a text that is no string too (it was left out silently) */
		{"{\"prompt\": \"a\", \"completion\": \"b\", \"text\": null}",
		 "odd.jsonl:1: both text and prompt/completion"},
		{"{\"text\": \"a\\\\u0000b\"}", NULL},
		{"{\"prompt\": \"a\", \"completion\": \"b\", \"completion\": \"c\"}",
		 "odd.jsonl:1: the key \"completion\" appears twice"},
		/* one repeated inside metadata strata does not read: nothing of
		 * the example is open (it was refused as the example's key) */
		{"{\"text\": \"a\", \"meta\": {\"id\": 1, \"id\": 2}}", NULL},
		/* half of a surrogate pair, which Python's json reads: named
		 * (it was "not valid JSON" alone); a whole pair is a character */
		{"{\"text\": \"a \\ud83d b\"}",
		 "odd.jsonl:1: not valid JSON: \\ud83d is half of a UTF-16 surrogate pair"},
		{"{\"text\": \"x \\udc00\"}", "odd.jsonl:1: not valid JSON: \\udc00 is half"},
		{"{\"text\": \"ok \\ud83d\\ude00\"}", NULL},
	};
	snprintf(path, sizeof path, "%s/odd.jsonl", dir);
	for (int i = 0; i < (int)(sizeof odd / sizeof odd[0]); i++) {
		f = fopen(path, "w");
		fprintf(f, "%s\n", odd[i].line);
		fclose(f);
		rc = cu_run(out, sizeof out, "%s prepare --input %s --out %s/odd%d --val-fraction 0",
			    cu_bin(), path, dir, i);
		if (odd[i].needle)
			expect_fail("odd JSONL", odd[i].needle, rc);
		else
			cr_expect_eq(rc, 0, "%s: %s", odd[i].line, out);
	}
	f = fopen(path, "w"); /* a raw 0 byte inside a value */
	fwrite("{\"text\": \"abc\0def\"}\n", 1, 20, f);
	fclose(f);
	rc = cu_run(out, sizeof out, "%s prepare --input %s --out %s/oddnul --val-fraction 0", cu_bin(),
		    path, dir);
	expect_fail("a raw NUL in JSONL", "odd.jsonl:1: a NUL character", rc);
	/* the extension in capitals is still JSONL; an empty completion is
	 * said; too few examples for the split name the count */
	snprintf(path, sizeof path, "%s/few.JSONL", dir);
	f = fopen(path, "w");
	for (int i = 0; i < 10; i++)
		fprintf(f, "{\"prompt\": \"q%d\", \"completion\": \"%s\"}\n", i, i ? "a" : "");
	fclose(f);
	rc = cu_run(out, sizeof out, "%s prepare --input %s --out %s/few --val-fraction 0", cu_bin(), path, dir);
	cr_expect(rc == 0 && strstr(out, "10 examples; ") &&
			  strstr(out, "1 example has an empty completion or text"),
		  "%s", out);
	rc = cu_run(out, sizeof out, "%s prepare --input %s --out %s/few2", cu_bin(), path, dir);
	expect_fail("too few examples", "10 examples are too few to hold out 5% for validation", rc);
	/* blank lines only: no example, refused (it wrote an empty train.bin) */
	rc = cu_run(out, sizeof out, "printf '\\n\\n   \\n' > %s/blank.jsonl && %s prepare --input "
			"%s/blank.jsonl --out %s/blank --val-fraction 0", dir, cu_bin(), dir, dir);
	expect_fail("no examples", "holds no example and no text", rc);
	cr_expect_neq(cu_run(NULL, 0, "test -e %s/blank/train.bin", dir), 0);
}

/* A token shard is read window by window without staying resident: its
 * hash at open (with its largest token) and a long run's random training
 * windows and a pass of evaluation over all of it raise the peak resident
 * set by a few MiB, not by the shard (a 291 MiB train.bin kept a run 252
 * MiB past its budgets + 64 MiB), and the windows are the shard's tokens.
 * (A token past the vocabulary, now found by the largest token the open
 * notes, is in `bad_data`.) */
Test(train, shards_read_without_staying_resident, .timeout = 120)
{
	char dir[256], path[512];
	cu_tmpdir(dir, sizeof dir, "bigshard");
	snprintf(path, sizeof path, "%s/train.bin", dir);
	const uint64_t n = (uint64_t)64 << 20; /* 128 MiB of 2-byte tokens */
	struct shard_writer w = {0};
	cr_assert_eq(shard_writer_open(&w, path, 258, "byte"), ST_OK);
	uint32_t *piece = malloc((1u << 20) * sizeof *piece);
	cr_assert(piece);
	for (uint64_t at = 0; at < n; at += 1u << 20) {
		for (uint32_t i = 0; i < 1u << 20; i++)
			piece[i] = (uint32_t)((at + i) * 7 % 257);
		cr_assert_eq(shard_writer_put(&w, piece, 1u << 20), ST_OK);
	}
	cr_assert_eq(shard_writer_finish(&w), ST_OK);
	free(piece);
	const long slack = 24 << 10; /* kB */
	struct st_data d;
	long base = tu_peak_from_now();
	cr_assert_eq(data_open(&d, path, path, 258, 1), ST_OK);
	cr_expect_leq(tu_status_kb("VmHWM") - base, slack, "open: the peak rose %ld kB",
		      tu_status_kb("VmHWM") - base);
	const int b = 8, t = 256;
	int32_t *tok = malloc((size_t)64 * t * sizeof *tok), *tgt = malloc((size_t)64 * t * sizeof *tgt);
	cr_assert(tok && tgt);
	base = tu_peak_from_now();
	int bad = 0;
	for (long step = 0; step < 4000; step++) {
		data_train_batch(&d, tok, tgt, b, t, 1, step, 0);
		for (int r = 0; r < b; r++)
			for (int i = r * t; i + 1 < (r + 1) * t; i++)
				bad += tgt[i] != tok[i + 1] || (tok[i + 1] - tok[i] + 257) % 257 != 7;
	}
	cr_expect_eq(bad, 0, "%d windows' tokens are not the shard's", bad);
	cr_expect_leq(tu_status_kb("VmHWM") - base, slack, "training windows: the peak rose %ld kB",
		      tu_status_kb("VmHWM") - base);
	base = tu_peak_from_now();
	const long windows = data_val_windows(&d, t);
	for (long first = 0; first < windows; first += 64) {
		data_val_batch(&d, tok, tgt, 64, t, first);
		for (int i = 0; i < 64 * t; i++) { /* the shard's token at its position */
			const uint64_t pos = (uint64_t)first * (uint64_t)t + (uint64_t)i;
			bad += pos + 1 < n && (tok[i] != (int32_t)(pos * 7 % 257) ||
					       tgt[i] != (int32_t)((pos + 1) * 7 % 257));
		}
	}
	cr_expect_eq(bad, 0, "%d evaluation tokens are not the shard's", bad);
	cr_expect_leq(tu_status_kb("VmHWM") - base, slack, "evaluation: the peak rose %ld kB",
		      tu_status_kb("VmHWM") - base);
	data_close(&d);
	free(tok);
	free(tgt);
}

Test(train, unwritable_out_and_existing_run)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "badout");
	cu_setup_run(dir, "");
	expect_fail("out under a file", "run directory",
		    cu_run(out, sizeof out, "touch %s/file && %s train --model %s/init --data %s/data --out %s/file/run --steps 1 " SMALL,
			   dir, cu_bin(), dir, dir, dir));
	int rc = cu_run(out, sizeof out, "%s train --model %s/init --data %s/data --out %s/run --steps 2 " SMALL,
			cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	cu_run(NULL, 0, "md5sum %s/run/step-000002/* > %s/sums", dir, dir);
	expect_fail("existing run", "already holds checkpoints",
		    cu_run(out, sizeof out, "%s train --model %s/init --data %s/data --out %s/run --steps 2 " SMALL,
			   cu_bin(), dir, dir, dir));
	expect_fail("resume with another optimizer", "optimizer",
		    cu_run(out, sizeof out, "%s train --resume %s/run --steps 4 --optimizer sgd", cu_bin(), dir));
	/* more bad input on resume: none of it may touch the saved checkpoint */
	cu_run(NULL, 0, "cp %s/data/train.bin %s/c.bin && printf 'Z' | dd of=%s/c.bin bs=1 seek=1000 conv=notrunc 2>/dev/null",
	       dir, dir, dir);
	expect_fail("resume on a damaged shard", "c.bin",
		    cu_run(out, sizeof out, "%s train --resume %s/run --steps 4 --data %s/c.bin", cu_bin(),
			   dir, dir));
	expect_fail("resume with too long a sequence", "max_position_embeddings",
		    cu_run(out, sizeof out, "%s train --resume %s/run --steps 4 --seq-len 4096", cu_bin(), dir));
	expect_fail("resume with an impossible option", "--micro-batch",
		    cu_run(out, sizeof out, "%s train --resume %s/run --steps 4 --micro-batch 0", cu_bin(), dir));
	cu_run(NULL, 0, "cp -r %s/run/step-000002 %s/trunc && truncate -s 1000 %s/trunc/model.safetensors",
	       dir, dir, dir);
	expect_fail("resume from a truncated checkpoint", "model.safetensors",
		    cu_run(out, sizeof out, "%s train --resume %s/trunc --out %s/run --steps 4", cu_bin(), dir,
			   dir));
	cr_expect_eq(cu_run(out, sizeof out, "md5sum -c --quiet %s/sums && readlink %s/run/latest", dir, dir),
		     0, "a failed run touched the saved checkpoint: %s", out);
	cr_expect(strstr(out, "step-000002"), "latest moved: %s", out);
}

/* The lr each step of metrics.jsonl records against lr_at's, at %.6g. */
static void expect_lrs(const char *metrics, const struct st_train_opts *o, long from, long to,
		       long total, long warmup)
{
	for (long step = from; step <= to; step++) {
		char want[64];
		snprintf(want, sizeof want, "\"lr\": %.6g,", lr_at(o, step, total, warmup));
		const int rc = cu_run(out, sizeof out,
				      "grep -E '^.\"step\": %ld, \"loss\"' %s | tail -n 1 | grep -qF '%s'",
				      step, metrics, want);
		cr_expect_eq(rc, 0, "step %ld of %s does not record %s", step, metrics, want);
	}
}

/* --schedule wsd end to end: the rate each step trains at is the schedule's,
 * trainer.json keeps it, and a resume with a longer --steps (no --schedule
 * given) holds the full rate longer and decays at the new end. */
Test(train, schedule_wsd_trains_and_resumes)
{
	char dir[256], m[512];
	cu_tmpdir(dir, sizeof dir, "wsd");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/r --steps 10 --warmup 2 "
			"--schedule wsd --decay-frac 0.25 --lr 2e-3 --min-lr-ratio 0.05 --ckpt-interval 5 "
			"--eval-interval 0 %s",
			cu_bin(), dir, dir, dir, SMALL);
	cr_assert_eq(rc, 0, "wsd run failed: %s", out);
	struct st_train_opts o;
	train_opts_defaults(&o);
	snprintf(o.schedule, sizeof o.schedule, "wsd");
	o.decay_frac = 0.25;
	o.lr = 2e-3;
	o.min_lr_ratio = 0.05;
	snprintf(m, sizeof m, "%s/r/metrics.jsonl", dir);
	/* 8 steps after warmup: ceil(0.25 * 8) = 2 decay (9 and 10) */
	cr_expect_gt(lr_at(&o, 8, 10, 2), lr_at(&o, 9, 10, 2));
	expect_lrs(m, &o, 1, 10, 10, 2);
	rc = cu_run(out, sizeof out, "grep -q '\"schedule\":.*\"wsd\"' %s/r/step-000005/trainer.json",
		    dir);
	cr_expect_eq(rc, 0, "trainer.json does not keep the schedule");
	rc = cu_run(out, sizeof out, "%s train --resume %s/r/step-000005 --out %s/s --steps 20 %s",
		    cu_bin(), dir, dir, "--progress lines");
	cr_assert_eq(rc, 0, "resume failed: %s", out);
	snprintf(m, sizeof m, "%s/s/metrics.jsonl", dir);
	/* 18 steps after warmup: ceil(0.25 * 18) = 5 decay (16 to 20) */
	cr_expect_eq(lr_at(&o, 15, 20, 2), 2e-3);
	expect_lrs(m, &o, 6, 20, 20, 2);
	/* a new floor changes no rate of the stable phase, but the decay's: said */
	rc = cu_run(out, sizeof out, "%s train --resume %s/r/step-000005 --out %s/f "
			"--min-lr-ratio 0.5 --progress lines", cu_bin(), dir, dir);
	cr_expect(rc == 0 && strstr(out, "the learning-rate schedule changed"), "%s", out);
	/* and a warmup up to the last step still leaves wsd a decayed last step:
	 * not warned as never decaying (it was, as cosine's is) */
	rc = cu_run(out, sizeof out, "%s train --model %s/init --data %s/data --out %s/w --steps 4 "
			"--warmup 3 --schedule wsd --eval-interval 0 %s",
		    cu_bin(), dir, dir, dir, SMALL);
	cr_expect(rc == 0 && !strstr(out, "never decays"), "%s", out);
	rc = cu_run(out, sizeof out, "%s train --model %s/init --data %s/data --out %s/c --steps 4 "
			"--warmup 3 --eval-interval 0 %s",
		    cu_bin(), dir, dir, dir, SMALL);
	cr_expect(rc == 0 && strstr(out, "never decays"), "%s", out);
}

/* The default warmup (--warmup -1, a tenth of the run) is fixed when the
 * run starts: a resume at 8x the length keeps the run's 1 step, where it
 * grew to 8 and sent steps 6 and 7 back into warmup (0.75 and 0.875 of a
 * stable wsd rate). trainer.json records it; a --warmup given again on the
 * resume, -1 too, is the new leg's. */
Test(train, default_warmup_kept_on_resume)
{
	char dir[256], m[512];
	cu_tmpdir(dir, sizeof dir, "warm");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/r --steps 10 --schedule wsd "
			"--lr 2e-3 --ckpt-interval 5 --eval-interval 0 %s",
			cu_bin(), dir, dir, dir, SMALL);
	cr_assert_eq(rc, 0, "run failed: %s", out);
	cr_expect_eq(cu_run(out, sizeof out, "grep -q '\"warmup_steps\":[[:space:]]*1,' "
					      "%s/r/step-000005/trainer.json",
			    dir),
		     0, "trainer.json does not record the warmup");
	struct st_train_opts o;
	train_opts_defaults(&o);
	snprintf(o.schedule, sizeof o.schedule, "wsd");
	o.lr = 2e-3;
	rc = cu_run(out, sizeof out, "%s train --resume %s/r/step-000005 --out %s/s --steps 80 %s",
		    cu_bin(), dir, dir, "--progress lines --eval-interval 0");
	cr_assert_eq(rc, 0, "resume failed: %s", out);
	cr_expect(strstr(out, "the schedule now spans 80 steps (warmup 1), not 10 (warmup 1)"), "%s",
		  out);
	snprintf(m, sizeof m, "%s/s/metrics.jsonl", dir);
	expect_lrs(m, &o, 6, 12, 80, 1);
	cr_expect_eq(lr_at(&o, 6, 80, 1), 2e-3);
	/* that resume's own checkpoints carry the kept warmup on */
	rc = cu_run(out, sizeof out, "%s train --resume %s/s --steps 90 %s", cu_bin(), dir,
		    "--progress lines --eval-interval 0");
	cr_expect(rc == 0 && strstr(out, "spans 90 steps (warmup 1), not 80 (warmup 1)"), "%s", out);
	/* given again: the new length's tenth */
	rc = cu_run(out, sizeof out,
		    "%s train --resume %s/r/step-000005 --out %s/g --steps 80 --warmup -1 %s", cu_bin(),
		    dir, dir, "--progress lines --eval-interval 0");
	cr_assert_eq(rc, 0, "resume failed: %s", out);
	snprintf(m, sizeof m, "%s/g/metrics.jsonl", dir);
	expect_lrs(m, &o, 6, 9, 80, 8);
	cr_expect_lt(lr_at(&o, 6, 80, 8), 2e-3);
}

/* A non-finite gradient skips the update (weights and moments untouched),
 * is counted, and stops training once more than --max-skipped-steps. */
Test(train, nonfinite_gradient_skips_step)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "nan");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/a --steps 2 --ckpt-interval 1 "
			"--optimizer adamw8bit --quant-min-size 512 " SMALL,
			cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	/* poison step 3 of a resumed run: its update is skipped, and the
	 * checkpoint due at step 3 waits for step 4, the next that updates */
	rc = cu_run(out, sizeof out,
		    "STRATA_FAULT_NAN_AT_STEP=3 %s train --resume %s/a/step-000002 --out %s/s --steps 4 --ckpt-interval 1 --keep-ckpts 0",
		    cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "a single non-finite step must not stop training: %s", out);
	cr_expect(strstr(out, "step 3: non-finite gradient") != NULL, "no warning: %s", out);
	cr_expect(strstr(out, "done: step 4 (1 skipped for a non-finite loss or gradient, or one too large)") != NULL,
		  "the summary does not count the skipped step: %s", out);
	cr_expect(strstr(out, "step 3 was skipped: its checkpoint waits for the next step that updates"),
		  "%s", out);
	cr_expect_eq(cu_run(NULL, 0, "test ! -e %s/s/step-000003 && test -e %s/s/step-000004", dir, dir), 0,
		     "the checkpoint due at the skipped step was not deferred to the next");
	/* a skipped last step is saved: it holds exactly step 2's weights and
	 * optimizer state */
	rc = cu_run(out, sizeof out,
		    "STRATA_FAULT_NAN_AT_STEP=3 %s train --resume %s/a/step-000002 --out %s/b --steps 3",
		    cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	char ca[512], cb[512];
	snprintf(ca, sizeof ca, "%s/a/step-000002", dir);
	snprintf(cb, sizeof cb, "%s/b/step-000003", dir);
	cu_expect_same_state(ca, cb, "a skipped step");
	cr_expect_eq(cu_run(out, sizeof out, "grep -qE '\"skipped\":[[:space:]]*1,' %s/b/step-000003/trainer.json && "
				    "grep -qE '\"updates\":[[:space:]]*2,' %s/b/step-000003/trainer.json && "
				    "grep -qE '\"updates\":[[:space:]]*3,' %s/s/step-000004/trainer.json", dir, dir, dir), 0,
		     "skip and update counts not recorded");
	/* resuming from the skipped step's checkpoint counts its updates from
	 * trainer.json (2, not the step, 3): the same step 4 as straight on */
	rc = cu_run(out, sizeof out, "%s train --resume %s/b/step-000003 --out %s/d --steps 4",
		    cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	snprintf(ca, sizeof ca, "%s/s/step-000004", dir);
	snprintf(cb, sizeof cb, "%s/d/step-000004", dir);
	cu_expect_same_state(ca, cb, "a resume from a skipped step");
	/* the skip count carries over a resume ... */
	cr_expect_eq(cu_run(out, sizeof out, "grep -qE '\"skipped\":[[:space:]]*1,' %s/d/step-000004/trainer.json", dir), 0,
		     "the skip count was not carried over the resume");
	/* ... and adds up: one more skip after it is the second */
	rc = cu_run(out, sizeof out,
		    "STRATA_FAULT_NAN_AT_STEP=4 %s train --resume %s/b/step-000003 --out %s/e --steps 4",
		    cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "done: step 4 (2 skipped") != NULL, "skips not added up: %s", out);
	cr_expect_eq(cu_run(out, sizeof out, "grep -qE '\"skipped\":[[:space:]]*2,' %s/e/step-000004/trainer.json", dir), 0,
		     "the second skip was not recorded");
	/* the skipped step has one training row, marked skipped (and its
	 * evaluation row) */
	cr_expect_eq(cu_run(out, sizeof out,
			    "test \"$(grep '\"step\": 4[,}]' %s/e/metrics.jsonl | grep -vc val_loss)\" = 1 && "
			    "grep -q '\"step\": 4, \"skipped\": true' %s/e/metrics.jsonl",
			    dir, dir),
		     0, "the skipped step's metrics rows are wrong");
	/* every row is JSON (no nan), the skipped one with numbers or null */
	cr_expect_eq(cu_run(out, sizeof out,
			    "python3 -c \"import json, sys; rows = [json.loads(l) for l in open(sys.argv[1])]; "
			    "s = [r for r in rows if r.get('skipped')]; assert len(s) == 1, s; "
			    "assert s[0]['grad_norm'] is None and isinstance(s[0]['loss'], float), s\" "
			    "%s/e/metrics.jsonl",
			    dir),
		     0, "metrics.jsonl: %s", out);
	/* --max-skipped-steps N tolerates N: 1 allows one skip ... */
	rc = cu_run(out, sizeof out,
		    "STRATA_FAULT_NAN_AT_STEP=3 %s train --resume %s/a/step-000002 --out %s/f --steps 4 --max-skipped-steps 1",
		    cu_bin(), dir, dir);
	cr_expect_eq(rc, 0, "--max-skipped-steps 1 did not tolerate one skip: %s", out);
	cr_expect(strstr(out, "(1 skipped") != NULL, "%s", out);
	/* ... but not a second, counting the one before the resume */
	rc = cu_run(out, sizeof out,
		    "STRATA_FAULT_NAN_AT_STEP=4 %s train --resume %s/b/step-000003 --out %s/g --steps 4 --max-skipped-steps 1",
		    cu_bin(), dir, dir);
	expect_fail("a second skip over a resume", "2 steps skipped for non-finite or overflowing gradients (limit --max-skipped-steps 1)", rc);
	/* a limit already passed by the checkpoint's count is said at start */
	rc = cu_run(out, sizeof out, "%s train --resume %s/b/step-000003 --out %s/h --steps 4 --max-skipped-steps 0",
		    cu_bin(), dir, dir);
	cr_expect(rc == 0 && strstr(out, "the run has skipped 1 step already, more than "
					 "--max-skipped-steps 0: the next skip stops it"),
		  "%s", out);
	/* with no skips allowed, the same fault stops the run with an error */
	rc = cu_run(out, sizeof out,
		    "STRATA_FAULT_NAN_AT_STEP=3 %s train --resume %s/a/step-000002 --out %s/c --steps 4 --max-skipped-steps 0",
		    cu_bin(), dir, dir);
	expect_fail("too many skipped steps", "1 step skipped for non-finite or overflowing gradients (limit --max-skipped-steps 0)", rc);
	cr_expect(strstr(out, "step 3: non-finite") != NULL, "the run did not get to step 3: %s", out);
	/* a resume into a fresh --out that saved nothing names its checkpoint */
	char from[1000];
	snprintf(from, sizeof from, "the run saved no checkpoint; it resumed from %s/a/step-000002: `strata "
		 "train --resume %s/a/step-000002 --out %s/c` starts again", dir, dir, dir);
	cr_expect(strstr(out, from), "%s", out);
	cr_expect_eq(cu_run(out, sizeof out, "test ! -e %s/c/step-000003", dir), 0, "a failed step was saved");
	/* the checkpoint of step 3 still being written (slowly) when step 4
	 * fails: it is finished, and named as the one to go on from (step 2
	 * was named before the save in flight was waited for) */
	rc = cu_run(out, sizeof out,
		    "STRATA_FAULT_SLOW_CKPT=500 STRATA_FAULT_NAN_AT_STEP=4 %s train --resume %s/a/step-000002 "
		    "--out %s/i --steps 5 --ckpt-interval 1 --max-skipped-steps 0",
		    cu_bin(), dir, dir);
	expect_fail("a failure during a checkpoint", "(limit --max-skipped-steps 0)", rc);
	cr_expect(strstr(out, "the run's last checkpoint is ") && strstr(out, "/i/step-000003: `strata train"),
		  "%s", out);
	cr_expect_eq(cu_run(NULL, 0, "test -d %s/i/step-000003", dir), 0, "step 3 was not saved");
}

/* A finite gradient of 1e20 with --grad-clip 0: its square is inf in fp32,
 * which made an 8-bit block's v absmax inf, zeroed the block's other codes,
 * and turned the block's weights NaN at the next step. Such a step is
 * skipped as a non-finite one, said, and the run ends with a loadable
 * checkpoint; fp32 AdamW, whose v would freeze that weight, too. A clipped
 * gradient (the default --grad-clip 1) is not touched by it. */
Test(train, overflowing_gradient_skipped)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "gradovf");
	cu_setup_run(dir, "");
	const char *optims[] = {"adamw8bit --quant-min-size 512", "adamw"};
	for (int i = 0; i < 2; i++) {
		int rc = cu_run(out, sizeof out,
				"STRATA_FAULT_NAN_AT_STEP=2 STRATA_FAULT_GRAD_VALUE=1e20 %s train --model %s/init "
				"--data %s/data --out %s/r%d --steps 4 --grad-clip 0 --optimizer %s "
				"--eval-interval 0 " SMALL,
				cu_bin(), dir, dir, dir, i, optims[i]);
		cr_expect_eq(rc, 0, "%s: %s", optims[i], out);
		cr_expect(strstr(out, "step 2: gradient too large for fp32 (its square overflows)"),
			  "%s: %s", optims[i], out);
		cr_expect(strstr(out, "done: step 4 (1 skipped"), "%s: %s", optims[i], out);
		rc = cu_run(out, sizeof out, "%s eval --model %s/r%d --data %s/data", cu_bin(), dir, i,
			    dir);
		cr_expect_eq(rc, 0, "%s: the checkpoint does not load: %s", optims[i], out);
	}
	int rc = cu_run(out, sizeof out,
			"STRATA_FAULT_NAN_AT_STEP=2 STRATA_FAULT_GRAD_VALUE=1e20 %s train --model %s/init "
			"--data %s/data --out %s/clipped --steps 4 --optimizer adamw8bit "
			"--quant-min-size 512 --eval-interval 0 " SMALL,
			cu_bin(), dir, dir, dir);
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "done: step 4, train loss") && !strstr(out, "skipped"),
		  "a clipped gradient was skipped: %s", out);
}

/* An update that overflows the weights (lr 3e38, near the largest float: a
 * finite gradient, inf or NaN weights; every later step is then skipped;
 * lr x weight decay >= 1 is refused up front, hence weight decay 0). Its
 * checkpoint, due at that step (--ckpt-interval 1), is refused naming the
 * weight, and the run stops; with --ckpt-interval 2 the checkpoints due
 * at the skipped steps after it wait for an update that never comes, and
 * the run stops at --max-skipped-steps. Either way the good checkpoints
 * stay under --keep-ckpts 2 (before, the bad ones pushed them out). */
Test(train, overflowed_weights_not_checkpointed)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "overflow");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/run --steps 4 --ckpt-interval 2 "
			"--keep-ckpts 2 --optimizer adamw8bit --eval-interval 0 " SMALL,
			cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	cu_run(NULL, 0, "md5sum %s/run/step-00000[24]/* > %s/sums", dir, dir);
	for (int interval = 1; interval <= 2; interval++) {
		rc = cu_run(out, sizeof out,
			    "%s train --resume %s/run --steps 40 --lr 3e38 --weight-decay 0 --warmup 0 "
			    "--ckpt-interval %d",
			    cu_bin(), dir, interval);
		if (interval == 1) {
			expect_fail("overflowed weights", "went non-finite", rc);
			cr_expect(strstr(out, "holds inf") || strstr(out, "holds nan") ||
					  strstr(out, "holds -inf") || strstr(out, "holds -nan"),
				  "the weight is not named: %s", out);
			cr_expect(strstr(out, "latest -> step-000004"), "the kept checkpoint is not named: %s",
				  out);
		} else {
			expect_fail("skipped after overflow", "11 steps skipped for non-finite or overflowing gradients", rc);
		}
		cr_expect_eq(cu_run(out, sizeof out,
				    "md5sum -c --quiet %s/sums && test \"$(readlink %s/run/latest)\" = step-000004 && "
				    "test \"$(ls -A %s/run | grep -vxF .lock | tr '\\n' ' ')\" = 'latest metrics.jsonl step-000002 step-000004 '",
				    dir, dir, dir),
			     0, "--ckpt-interval %d: the good checkpoints were touched, or a bad one left files: %s",
			     interval, out);
	}
}

/* Inf in one weight or one optimizer-state tensor, and not the first of its
 * unit or file, as a save reads it (STRATA_FAULT_POISON_CKPT): the save is
 * refused naming that tensor and element, and the last checkpoint is kept. */
Test(train, nonfinite_tensor_named_at_save)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "poison");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/run --steps 2 --ckpt-interval 2 "
			"--optimizer adamw8bit --quant-min-size 512 --eval-interval 0 " SMALL,
			cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	const struct {
		const char *poison, *needle;
	} cases[] = {
		{"model.layers.1.mlp.up_proj.weight:7",
		 "the weight model.layers.1.mlp.up_proj.weight holds inf at element 7"},
		{"model.layers.1.mlp.up_proj.weight.exp_avg_sq.absmax:3",
		 "the optimizer state model.layers.1.mlp.up_proj.weight.exp_avg_sq.absmax holds inf at element 3"},
		{"model.norm.weight.exp_avg:5", "the optimizer state model.norm.weight.exp_avg holds inf at element 5"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		rc = cu_run(out, sizeof out,
			    "rm -rf %s/c && cp -r %s/run %s/c && "
			    "STRATA_FAULT_POISON_CKPT=%s %s train --resume %s/c --steps 4 --ckpt-interval 2",
			    dir, dir, dir, cases[i].poison, cu_bin(), dir);
		expect_fail("a poisoned save", cases[i].needle, rc);
		cr_expect(strstr(out, "latest -> step-000002"), "the kept checkpoint is not named: %s", out);
		cr_expect_eq(cu_run(out, sizeof out,
				    "test \"$(readlink %s/c/latest)\" = step-000002 && "
				    "test \"$(ls -A %s/c | grep -vxF .lock | tr '\\n' ' ')\" = 'latest metrics.jsonl step-000002 '",
				    dir, dir),
			     0, "case %zu: a refused save left files or moved latest: %s", i, out);
	}
}

/* Optimizer state edited in a copy of a checkpoint: a tensor replaced, one
 * added, or the metadata changed. */
enum state_edit { EDIT_NAN_ABSMAX, EDIT_NEG_ABSMAX, EDIT_ZERO_ABSMAX, EDIT_EXTRA, EDIT_UPDATES,
		  EDIT_UPDATES_JUNK, EDIT_MIN_SIZE, EDIT_MIN_SIZE_JUNK, EDIT_NO_MIN_SIZE, EDIT_BLOCK_JUNK,
		  EDIT_NAN_WEIGHT, EDIT_NEG_V, EDIT_NO_OPTIMIZER, EDIT_NO_BLOCK, EDIT_NO_UPDATES, EDIT_BLOCK_SPACE };

/* The edit goes to element `at` of the tensor (-1: its last). */
static void edit_state(const char *src, const char *dst, enum state_edit e, long at)
{
	struct st_safetensors sf;
	cr_assert_eq(safetensors_open(&sf, src), ST_OK);
	struct st_tensor_out *t = calloc((size_t)sf.n + 1, sizeof *t);
	void **copies = calloc((size_t)sf.n, sizeof *copies);
	int n = 0, edited = 0;
	for (int i = 0; i < sf.n; i++, n++) {
		const struct st_tensor_info *ti = &sf.tensors[i];
		const size_t bytes = (size_t)(ti->end - ti->begin);
		copies[i] = malloc(bytes + 1);
		memcpy(copies[i], safetensors_data(&sf, ti), bytes);
		t[n] = (struct st_tensor_out){ti->name, ti->dtype, ti->ndim, {0}, copies[i]};
		memcpy(t[n].shape, ti->shape, sizeof ti->shape);
		const char *dot = strrchr(ti->name, '.');
		const long el = at >= 0 ? at : (long)(bytes / sizeof(float)) - 1;
		if (!edited && (e == EDIT_NAN_ABSMAX || e == EDIT_NEG_ABSMAX || e == EDIT_ZERO_ABSMAX) &&
		    !strcmp(dot, ".absmax") && strstr(ti->name, "exp_avg_sq")) {
			((float *)copies[i])[el] = e == EDIT_NAN_ABSMAX	  ? NAN
						   : e == EDIT_NEG_ABSMAX ? -1.0f
									  : 0.0f;
			edited = 1;
		}
		if (e == EDIT_NAN_WEIGHT && !strcmp(ti->name, "model.layers.1.mlp.up_proj.weight"))
			((float *)copies[i])[el] = NAN;
		if (e == EDIT_NEG_V && !strcmp(ti->name, "model.norm.weight.exp_avg_sq")) /* fp32 state */
			((float *)copies[i])[el] = -1.0f;
	}
	static const float extra[4];
	if (e == EDIT_EXTRA)
		t[n++] = (struct st_tensor_out){"model.norm.weight.extra", ST_DT_F32, 1, {4}, extra};
	const char **meta = calloc(2 * (size_t)sf.n_meta + 2, sizeof *meta);
	int nm = 0;
	for (int i = 0; i < sf.n_meta; i++) {
		const char *k = sf.meta_keys[i], *v = sf.meta_vals[i];
		if (e == EDIT_UPDATES && !strcmp(k, "updates"))
			v = "99";
		if (e == EDIT_UPDATES_JUNK && !strcmp(k, "updates"))
			v = "2x";
		if (e == EDIT_MIN_SIZE && !strcmp(k, "quant_min_size"))
			v = "100";
		if (e == EDIT_MIN_SIZE_JUNK && !strcmp(k, "quant_min_size"))
			v = "512x";
		if (e == EDIT_BLOCK_JUNK && !strcmp(k, "quant_block"))
			v = "256x";
		if (e == EDIT_BLOCK_SPACE && !strcmp(k, "quant_block"))
			v = " 256";
		if (e == EDIT_NO_MIN_SIZE && !strcmp(k, "quant_min_size"))
			continue; /* as written before the key was recorded */
		if ((e == EDIT_NO_OPTIMIZER && !strcmp(k, "optimizer")) ||
		    (e == EDIT_NO_BLOCK && !strcmp(k, "quant_block")) ||
		    (e == EDIT_NO_UPDATES && !strcmp(k, "updates")))
			continue;
		meta[2 * nm] = k;
		meta[2 * nm + 1] = v;
		nm++;
	}
	cr_assert_eq(safetensors_write(dst, t, n, meta, nm), ST_OK);
	free(meta);
	for (int i = 0; i < sf.n; i++)
		free(copies[i]);
	free(copies);
	free(t);
	safetensors_close(&sf);
}

/* The file's codes and absmax of moment `name` of `pname` (as stored). */
static void decoded_from_file_form(uint8_t *codes, float *absmax, const struct st_safetensors *sf,
				   const char *pname, const char *name, size_t n, size_t nb)
{
	char t[256];
	snprintf(t, sizeof t, "%s.%s.codes", pname, name);
	memcpy(codes, safetensors_data(sf, safetensors_find(sf, t)), n);
	snprintf(t, sizeof t, "%s.%s.absmax", pname, name);
	memcpy(absmax, safetensors_data(sf, safetensors_find(sf, t)), nb * sizeof *absmax);
}

/* Opens a trainer resuming ckpt with another optimizer / block / threshold
 * (in-process, as `strata train --resume CKPT --optimizer ...` would), and
 * checks every state tensor it laid out against the file's moments
 * converted in the test: decoded with the file's block if 8-bit there, then
 * quantized with quant_blockwise at the run's block if 8-bit here; 8-bit at
 * the same block on both sides, the file's codes and absmax as they are. */
static void check_conversion(const char *dir, const char *ckpt, const char *opt, int block,
			     long min_size, int from_block)
{
	struct st_train_opts o;
	train_opts_defaults(&o);
	cr_assert_eq(ckpt_read_options(&o, ckpt), ST_OK);
	snprintf(o.resume, sizeof o.resume, "%s", ckpt);
	snprintf(o.out, sizeof o.out, "%s/conv-%s-%d-%ld", dir, opt, block, min_size);
	snprintf(o.optimizer, sizeof o.optimizer, "%s", opt);
	o.quant_block = block;
	o.quant_min_size = min_size;
	o.steps = 100;
	struct st_trainer *tr = calloc(1, sizeof *tr);
	cr_assert_eq(trainer_open(tr, &o), ST_OK, "%s: the conversion was refused", opt);
	char path[600];
	snprintf(path, sizeof path, "%s/optimizer.safetensors", ckpt);
	struct st_safetensors sf;
	cr_assert_eq(safetensors_open(&sf, path), ST_OK);
	const struct st_model *m = &tr->s.model;
	const struct st_optim *op = &tr->opt;
	long checked = 0, q8 = 0;
	for (int i = 0; i < m->n_params; i++) {
		const struct st_pstate *ps = &op->ps[i];
		const struct st_param *p = &m->params[i];
		const char *state = store_acquire(&tr->s.store, p->unit, ST_SLAB_S);
		for (int k = 0; k < ps->n_states; k++) {
			const char *name = strncmp(opt, "sgd", 3) ? (k ? "exp_avg_sq" : "exp_avg")
								  : "momentum_buffer";
			const float *map = k == 1 ? op->map_unsigned : op->map_signed;
			const size_t n = ps->state_numel, nb = (n + (size_t)from_block - 1) / (size_t)from_block;
			float *x = malloc(n * sizeof *x), *absmax = malloc(n * sizeof *absmax);
			uint8_t *codes = malloc(n);
			char t[256];
			snprintf(t, sizeof t, "%s.%s", p->name, name);
			const struct st_tensor_info *ti = safetensors_find(&sf, t);
			if (ti) {
				memcpy(x, safetensors_data(&sf, ti), n * sizeof *x);
			} else {
				snprintf(t, sizeof t, "%s.%s.codes", p->name, name);
				const struct st_tensor_info *tc = safetensors_find(&sf, t);
				snprintf(t, sizeof t, "%s.%s.absmax", p->name, name);
				const struct st_tensor_info *ta = safetensors_find(&sf, t);
				cr_assert(tc && ta, "%s.%s is in the file in no form", p->name, name);
				memcpy(codes, safetensors_data(&sf, tc), n);
				memcpy(absmax, safetensors_data(&sf, ta), nb * sizeof *absmax);
				dequant_blockwise(x, codes, absmax, n, from_block, map);
			}
			if (ps->q8 && !ti && from_block == block) {
				/* 8-bit at the same block on both sides: copied as it is */
				decoded_from_file_form(codes, absmax, &sf, p->name, name, n, nb);
				cr_expect_eq(memcmp(codes, state + ps->off[k], n), 0, "%s.%s: codes not copied",
					     p->name, name);
				cr_expect_eq(memcmp(absmax, state + ps->absmax_off[k], nb * sizeof(float)), 0,
					     "%s.%s: absmax not copied", p->name, name);
				q8++;
			} else if (ps->q8) {
				quant_blockwise(codes, absmax, x, n, block, map);
				cr_expect_eq(memcmp(codes, state + ps->off[k], n), 0, "%s.%s: codes differ",
					     p->name, name);
				cr_expect_eq(memcmp(absmax, state + ps->absmax_off[k], ps->n_blocks * sizeof(float)),
					     0, "%s.%s: absmax differs", p->name, name);
				q8++;
			} else {
				cr_expect_eq(memcmp(x, state + ps->off[k], n * sizeof *x), 0,
					     "%s.%s: fp32 state differs", p->name, name);
			}
			checked++;
			free(x);
			free(absmax);
			free(codes);
		}
		store_release(&tr->s.store, p->unit, ST_SLAB_S, 0);
	}
	cr_expect_gt(checked, 0);
	if (!strcmp(opt, "adamw8bit") || !strcmp(opt, "sgd8bit"))
		cr_expect_gt(q8, 0, "%s: no 8-bit tensor was checked", opt);
	safetensors_close(&sf);
	trainer_close(tr);
	free(tr);
}

/* Resuming with another optimizer of the same family, or another 8-bit
 * block or threshold, converts the state: exactly the file's moments,
 * decoded and requantized as the test does it with the library; through
 * the binary, the run says so and trains on. GaLore and another family are
 * refused. */
Test(train, optimizer_state_converted_on_resume)
{
	char dir[256], a[512], b[512], c[512], d[512];
	cu_tmpdir(dir, sizeof dir, "convert");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/a --steps 2 --eval-interval 0 " SMALL
			" && %s train --model %s/init --data %s/data --out %s/b --steps 2 --eval-interval 0 "
			"--optimizer adamw8bit --quant-min-size 512 " SMALL
			" && %s train --model %s/init --data %s/data --out %s/c --steps 2 --eval-interval 0 "
			"--optimizer sgd --momentum 0.9 --lr 0.05 " SMALL
			" && %s train --model %s/init --data %s/data --out %s/d --steps 2 --eval-interval 0 "
			"--optimizer sgd8bit --momentum 0.9 --lr 0.05 --quant-min-size 512 --quant-block 64 " SMALL,
			cu_bin(), dir, dir, dir, cu_bin(), dir, dir, dir, cu_bin(), dir, dir, dir, cu_bin(),
			dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	snprintf(a, sizeof a, "%s/a/step-000002", dir);
	snprintf(b, sizeof b, "%s/b/step-000002", dir);
	snprintf(c, sizeof c, "%s/c/step-000002", dir);
	snprintf(d, sizeof d, "%s/d/step-000002", dir);
	check_conversion(dir, a, "adamw8bit", 256, 512, 256);  /* fp32 -> 8-bit */
	check_conversion(dir, a, "adamw8bit", 64, 0, 256);     /* every tensor 8-bit */
	check_conversion(dir, b, "adamw", 256, 4096, 256);     /* 8-bit -> fp32 */
	check_conversion(dir, b, "adamw8bit", 1024, 512, 256); /* another block */
	/* another threshold: the 2048- and 4096-element matrices fp32 now */
	check_conversion(dir, b, "adamw8bit", 256, 5000, 256);
	check_conversion(dir, c, "sgd8bit", 128, 512, 128);
	check_conversion(dir, d, "sgd", 256, 4096, 64);
	/* files whose tensors start at odd bytes (a header one byte longer, as
	 * another writer may leave it): the same conversions, read from
	 * aligned copies. On x86 a misaligned load works, so this tests the
	 * copies' path; the old loads, undefined behaviour, showed only under
	 * -fsanitize=alignment. */
	char am[600], bm[600];
	snprintf(am, sizeof am, "%s/am/step-000002", dir);
	snprintf(bm, sizeof bm, "%s/bm/step-000002", dir);
	rc = cu_run(out, sizeof out, "cd %s && cp -a a am && cp -a b bm && python3 -c \"\n"
			"import struct\n"
			"for r in ('am', 'bm'):\n"
			"    p = r + '/step-000002/optimizer.safetensors'\n"
			"    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]\n"
			"    open(p, 'wb').write(struct.pack('<Q', n + 1) + b[8:8 + n] + b' ' + b[8 + n:])\"",
		    dir);
	cr_assert_eq(rc, 0, "%s", out);
	check_conversion(dir, am, "adamw8bit", 256, 512, 256); /* fp32 moments, misaligned */
	check_conversion(dir, bm, "adamw", 256, 4096, 256);    /* absmax, misaligned */
	check_conversion(dir, bm, "adamw8bit", 1024, 512, 256);
	/* through the binary: said, and training goes on */
	rc = cu_run(out, sizeof out, "%s train --resume %s --out %s/a8 --steps 3 --optimizer adamw8bit",
		    cu_bin(), a, dir);
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "optimizer state converted from adamw to adamw8bit (block 256, fp32 under "
			      "4096 elements): 0 moments decoded from 8 bits, "),
		  "%s", out);
	rc = cu_run(out, sizeof out, "%s train --resume %s --out %s/b2 --steps 3 --quant-block 64", cu_bin(),
		    b, dir);
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "converted from adamw8bit (block 256) to adamw8bit (block 64, fp32 under 512"),
		  "%s", out);
	/* a plain resume converts nothing */
	rc = cu_run(out, sizeof out, "%s train --resume %s --out %s/b3 --steps 3", cu_bin(), b, dir);
	cr_expect(rc == 0 && !strstr(out, "converted"), "%s", out);
	/* another family, or GaLore: refused, naming what converts */
	expect_fail("adamw state as sgd",
		    "the run trained with --optimizer adamw, whose state cannot become --optimizer sgd's",
		    cu_run(out, sizeof out, "%s train --resume %s --out %s/x1 --steps 3 --optimizer sgd "
					    "--momentum 0.9",
			   cu_bin(), a, dir));
	cr_expect(strstr(out, "adamw and adamw8bit convert into each other"), "%s", out);
	/* said before sgd8bit's own demand for a --momentum it could not use */
	expect_fail("adamw state as sgd8bit", "cannot become --optimizer sgd8bit's",
		    cu_run(out, sizeof out, "%s train --resume %s --out %s/x3 --steps 3 --optimizer sgd8bit",
			   cu_bin(), a, dir));
	expect_fail("adamw state as galore", "cannot become --optimizer galore-adamw's",
		    cu_run(out, sizeof out, "%s train --resume %s --out %s/x2 --steps 3 --optimizer galore-adamw",
			   cu_bin(), a, dir));
	/* a trainer.json naming another optimizer than its state file holds */
	expect_fail("state file disagreeing with trainer.json",
		    "holds adamw state, but the run asks for --optimizer sgd",
		    cu_run(out, sizeof out, "cp -r %s %s/x4 && sed -i 's/\"optimizer\":[[:space:]]*\"adamw\"/"
					    "\"optimizer\": \"sgd\"/' %s/x4/trainer.json && "
					    "%s train --resume %s/x4 --out %s/x5 --steps 3 --momentum 0.9",
			   a, dir, dir, cu_bin(), dir, dir));
	/* GaLore's 8-bit state is not re-quantized at another block */
	expect_fail("galore-adamw8bit at another block",
		    "was written with quantization block 256 and --quant-min-size 4096, the run asks for 64 and 4096",
		    cu_run(out, sizeof out,
			   "%s train --model %s/init --data %s/data --out %s/g --steps 1 --eval-interval 0 "
			   "--optimizer galore-adamw8bit --galore-rank 8 " SMALL
			   " && %s train --resume %s/g --out %s/g2 --steps 2 --quant-block 64",
			   cu_bin(), dir, dir, dir, cu_bin(), dir, dir));
	/* plain SGD has no momentum buffer to quantize */
	expect_fail("plain sgd as sgd8bit",
		    "the run trained with --optimizer sgd and no momentum: its checkpoint has no "
		    "momentum buffer for sgd8bit to quantize",
		    cu_run(out, sizeof out,
			   "%s train --model %s/init --data %s/data --out %s/p --steps 1 --eval-interval 0 "
			   "--optimizer sgd --momentum 0 " SMALL
			   " && %s train --resume %s/p --out %s/p2 --steps 2 --optimizer sgd8bit --momentum 0.9",
			   cu_bin(), dir, dir, dir, cu_bin(), dir, dir));
	cr_expect(strstr(out, "resume with --optimizer sgd --momentum 0"), "%s", out);
}

/* Damaged or mismatched 8-bit state is refused on resume with a message
 * naming the tensor or setting; the checkpoint itself is left as it was. */
Test(train, damaged_optimizer_state_refused)
{
	char dir[256], src[512], dst[512];
	cu_tmpdir(dir, sizeof dir, "badstate");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/run --steps 2 --optimizer adamw8bit "
			"--quant-min-size 512 --eval-interval 0 " SMALL,
			cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	/* needle NULL: a state that is sound, which must resume */
	const struct {
		enum state_edit e;
		long at;
		const char *needle;
	} cases[] = {
		{EDIT_NAN_ABSMAX, 1, "exp_avg_sq.absmax holds nan at element 1"},
		{EDIT_NAN_ABSMAX, 0, "exp_avg_sq.absmax holds nan at element 0"},
		{EDIT_NEG_ABSMAX, 1, "holds a negative absmax (-1) at element 1"},
		{EDIT_NEG_ABSMAX, -1, "holds a negative absmax (-1) at element"}, /* the last */
		{EDIT_ZERO_ABSMAX, 1, NULL}, /* a block of zeros: the encoder divides by 1 */
		{EDIT_NEG_V, 3, "model.norm.weight.exp_avg_sq holds a negative second moment (-1) at element 3"},
		{EDIT_EXTRA, 0, "model.norm.weight.extra is not one of them"},
		{EDIT_UPDATES, 0, "state after 99 updates, but trainer.json counts 2"},
		{EDIT_UPDATES_JUNK, 0, "state after 2x updates, but trainer.json counts 2"},
		/* another threshold on record converts, tensor by tensor as found */
		{EDIT_MIN_SIZE, 0, NULL},
		{EDIT_MIN_SIZE_JUNK, 0, "written with --quant-min-size 512x, which is not a whole number"},
		{EDIT_BLOCK_JUNK, 0, "written with quantization block 256x, not a power of two"},
		{EDIT_BLOCK_SPACE, 0, "written with quantization block  256, not a power of two"},
		{EDIT_NO_MIN_SIZE, 0, NULL}, /* written before the key: that check skipped */
		{EDIT_NO_OPTIMIZER, 0, "optimizer.safetensors has no 'optimizer' in its metadata"},
		{EDIT_NO_BLOCK, 0, "optimizer.safetensors has no 'quant_block' in its metadata"},
		{EDIT_NO_UPDATES, 0, "optimizer.safetensors has no 'updates' in its metadata"},
		{EDIT_NAN_WEIGHT, 1, "tensor 'model.layers.1.mlp.up_proj.weight' holds nan at element 1"},
		{EDIT_NAN_WEIGHT, 0, "tensor 'model.layers.1.mlp.up_proj.weight' holds nan at element 0"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *file = cases[i].e == EDIT_NAN_WEIGHT ? "model" : "optimizer";
		cu_run(NULL, 0, "rm -rf %s/c && cp -r %s/run/step-000002 %s/c", dir, dir, dir);
		snprintf(src, sizeof src, "%s/run/step-000002/%s.safetensors", dir, file);
		snprintf(dst, sizeof dst, "%s/c/%s.safetensors", dir, file);
		edit_state(src, dst, cases[i].e, cases[i].at);
		cu_run(NULL, 0, "md5sum %s/c/* > %s/sums", dir, dir);
		rc = cu_run(out, sizeof out, "%s train --resume %s/c --out %s/o%zu --steps 3", cu_bin(),
			    dir, dir, i);
		if (!cases[i].needle) {
			cr_expect_eq(rc, 0, "case %zu: a sound state was refused: %s", i, out);
			continue;
		}
		expect_fail("damaged optimizer state", cases[i].needle, rc);
		/* damage, not a setting: no advice to resume with other settings */
		cr_expect(!strstr(out, "with the run's own settings"), "case %zu: %s", i, out);
		cr_expect_eq(cu_run(NULL, 0, "md5sum -c --quiet %s/sums", dir), 0,
			     "a refused resume changed the checkpoint");
		cr_expect_eq(cu_run(NULL, 0, "test ! -e %s/o%zu", dir, i), 0,
			     "a refused resume left its new run directory behind");
	}
	/* one changed byte in the 8-bit codes, or in the weights: the checksums */
	const char *files[] = {"optimizer.safetensors", "model.safetensors"};
	for (int k = 0; k < 2; k++) {
		cu_run(NULL, 0, "rm -rf %s/c && cp -r %s/run/step-000002 %s/c", dir, dir, dir);
		snprintf(dst, sizeof dst, "%s/c/%s", dir, files[k]);
		struct st_safetensors sf;
		cr_assert_eq(safetensors_open(&sf, dst), ST_OK);
		const struct st_tensor_info *ti =
			safetensors_find(&sf, k ? "model.layers.1.mlp.up_proj.weight"
						: "model.layers.1.mlp.up_proj.weight.exp_avg_sq.codes");
		cr_assert_not_null(ti);
		const long at = (long)(sf.data_start + ti->begin + 100);
		safetensors_close(&sf);
		FILE *f = fopen(dst, "r+b");
		cr_assert(f && fseek(f, at, SEEK_SET) == 0);
		const int byte = fgetc(f);
		cr_assert(fseek(f, at, SEEK_SET) == 0 && fputc(byte ^ 1, f) != EOF && fclose(f) == 0);
		expect_fail("a changed byte", "fails its checksum",
			    cu_run(out, sizeof out, "%s train --resume %s/c --out %s/x%d --steps 3",
				   cu_bin(), dir, dir, k));
	}
	/* --quant-block does not concern fp32 AdamW: resuming one with another
	 * value is not refused */
	rc = cu_run(out, sizeof out,
		    "%s train --model %s/init --data %s/data --out %s/f --steps 1 --eval-interval 0 " SMALL
		    " && %s train --resume %s/f --steps 2 --quant-block 128 --quant-min-size 0",
		    cu_bin(), dir, dir, dir, cu_bin(), dir);
	cr_expect_eq(rc, 0, "fp32 AdamW resume refused over --quant-block or --quant-min-size: %s", out);
	cr_expect(!strstr(out, "converted"), "fp32 AdamW state converted for --quant-block: %s", out);
	/* adamw8bit with every tensor under --quant-min-size has the same fp32
	 * exp_avg / exp_avg_sq tensors as adamw: only the recorded kind tells
	 * that the resume as adamw converts (nothing to decode) */
	rc = cu_run(out, sizeof out,
		    "%s train --model %s/init --data %s/data --out %s/s --steps 1 --eval-interval 0 "
		    "--optimizer adamw8bit --quant-min-size 100000000 " SMALL
		    " && %s train --resume %s/s --out %s/s2 --steps 2 --optimizer adamw",
		    cu_bin(), dir, dir, dir, cu_bin(), dir, dir);
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "optimizer state of adamw8bit (block 256) taken as adamw unchanged"), "%s",
		  out);
	/* another threshold that moves no tensor: nothing said to change */
	rc = cu_run(out, sizeof out, "%s train --resume %s/s --out %s/s3 --steps 2 --quant-min-size 200000000",
		    cu_bin(), dir, dir);
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "optimizer state of adamw8bit (block 256) taken as adamw8bit (block 256, fp32 "
			      "under 200000000 elements) unchanged") && !strstr(out, "converted"),
		  "%s", out);
}

/* `strata init --stable-embedding` writes the stable embedding (its config
 * key and the layer norm's tensors), and the start-of-run line states the
 * optimizer state optim_init lays out for that model:
 * "optimizer state: KIND, BYTES (X B/param; fp32 AdamW: BYTES, 8 B/param)". */
Test(train, stable_init_and_state_report)
{
	char dir[256], path[512];
	cu_tmpdir(dir, sizeof dir, "stablerep");
	cu_setup_run(dir, "--stable-embedding");
	struct st_config cfg;
	snprintf(path, sizeof path, "%s/init/config.json", dir);
	cr_assert_eq(config_load(&cfg, path), ST_OK);
	cr_expect_eq(cfg.stable_embedding, 1, "init --stable-embedding wrote a model without it");
	struct st_safetensors sf;
	snprintf(path, sizeof path, "%s/init/model.safetensors", dir);
	cr_assert_eq(safetensors_open(&sf, path), ST_OK);
	cr_expect(safetensors_find(&sf, "model.embed_norm.weight") &&
			  safetensors_find(&sf, "model.embed_norm.bias"),
		  "no embed_norm tensors in the model written");
	safetensors_close(&sf);
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/r --steps 1 --eval-interval 0 "
			"--optimizer adamw8bit --quant-min-size 512 " SMALL,
			cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	struct st_model m;
	cr_assert_eq(model_build(&m, &cfg), ST_OK);
	const struct st_optim_cfg oc = {.kind = ST_OPT_ADAMW8, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
					.quant_block = 256, .quant_min_numel = 512};
	struct st_optim o;
	cr_assert_eq(optim_init(&o, &oc, &m), ST_OK);
	char b1[32], b2[32], want[256];
	snprintf(want, sizeof want, "optimizer state: adamw8bit, %s (%.3f B/param; fp32 AdamW: %s, 8 B/param)",
		 fmt_bytes(b1, sizeof b1, (double)o.total_bytes), (double)o.total_bytes / (double)m.numel,
		 fmt_bytes(b2, sizeof b2, 8.0 * (double)m.numel));
	cr_expect(strstr(out, want), "missing \"%s\" in:\n%s", want, out);
	optim_free(&o);
	model_free(&m);
	/* tied, its output projection is the Xavier-initialized embedding:
	 * said at init, with the first loss it gives (15.5 against 5.6 for
	 * the tiny preset; said nowhere before), and not said untied */
	rc = cu_run(out, sizeof out, "{ %s init --out %s/st --stable-embedding --tied && %s eval --model "
				     "%s/st --data %s/data --json; }",
		    cu_bin(), dir, cu_bin(), dir, dir);
	cr_expect(rc == 0 && strstr(out, "warning: --stable-embedding with a tied output: the output "
					 "projection is the Xavier-initialized embedding (std 0.0624), "
					 "so each input token's own logit starts near 16"),
		  "%s", out);
	const char *loss = strstr(out, "\"loss\":");
	cr_expect(loss && atof(loss + 7) > 10, "the tied stable model's first loss: %s", out);
	rc = cu_run(out, sizeof out, "%s init --out %s/su --stable-embedding", cu_bin(), dir);
	cr_expect(rc == 0 && !strstr(out, "warning"), "%s", out);
}

/* A resumed run writes its checkpoints beside the one resumed: into a copy of
 * a run directory, never into the original its trainer.json names. Re-saving
 * a step that exists replaces it whole, and a step directory moved aside by
 * a save killed between its renames is put back. */
/* Bit-identical resume holds for the same thread count: another one is
 * warned, naming the run's own; the saved count (the default) is not. */
Test(train, resume_with_other_thread_count_warned)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "resumethreads");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/run --steps 2 --ckpt-interval 1 "
			"--eval-interval 0 " SMALL " --threads 1",
			cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	rc = cu_run(out, sizeof out, "grep -qE '\"threads\":[[:space:]]*1,' %s/run/step-000002/trainer.json", dir);
	cr_expect_eq(rc, 0, "trainer.json does not record the thread count");
	rc = cu_run(out, sizeof out, "%s train --resume %s/run/step-000001 --steps 2", cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(!strstr(out, "bit for bit"), "same thread count warned: %s", out);
	rc = cu_run(out, sizeof out, "%s train --resume %s/run/step-000001 --steps 2 --threads 2",
		    cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "used 1 thread, this one 2") && strstr(out, "give --threads 1"),
		  "another thread count not warned: %s", out);
}

/* Other data on resume is said; a --val saved with the run, which would go
 * on scoring the old data, is warned, and --val '' takes the new data's. */
/* --trace is the leg's that gives it: a resume without it writes no trace
 * (the saved one was replayed and wrote over the first leg's trace without
 * a word); one given again writes its own. */
Test(train, trace_not_replayed_on_resume)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "trace");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/r --steps 2 --eval-interval 0 "
			"--trace %s/t.json " SMALL " && md5sum %s/t.json > %s/sum",
			cu_bin(), dir, dir, dir, dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	rc = cu_run(out, sizeof out, "%s train --resume %s/r --steps 3 && md5sum -c --quiet %s/sum",
		    cu_bin(), dir, dir);
	cr_expect_eq(rc, 0, "the first leg's trace was written over: %s", out);
	rc = cu_run(out, sizeof out,
		    "%s train --resume %s/r --steps 4 --trace %s/t2.json && grep -q traceEvents %s/t2.json",
		    cu_bin(), dir, dir, dir);
	cr_expect_eq(rc, 0, "a --trace given on resume: %s", out);
}

Test(train, resume_with_other_data_said)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "resumedata");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"cp -r %s/data %s/data2 && %s train --model %s/init --data %s/data --val "
			"%s/data/val.bin --out %s/run --steps 2 --eval-interval 0 " SMALL,
			dir, dir, cu_bin(), dir, dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	rc = cu_run(out, sizeof out, "%s train --resume %s/run/step-000002 --out %s/b --steps 3",
		    cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(!strstr(out, "training data:") && !strstr(out, "still reads"), "%s", out);
	rc = cu_run(out, sizeof out, "%s train --resume %s/run/step-000002 --out %s/c --steps 3 "
			"--data %s/data2", cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "/data2 (the run trained on ") &&
			  strstr(out, "the held-out loss still reads ") && strstr(out, "give --val ''"),
		  "%s", out);
	rc = cu_run(out, sizeof out, "{ %s train --resume %s/run/step-000002 --out %s/d --steps 3 "
			"--data %s/data2 --val '' 2>&1; } && grep -E '\"val\":[[:space:]]*\"\"' %s/d/step-000003/trainer.json",
			cu_bin(), dir, dir, dir, dir);
	cr_expect(rc == 0 && strstr(out, "training data:") && !strstr(out, "still reads"), "%s", out);
}

Test(train, resume_writes_beside_the_checkpoint)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "resumeout");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/run --steps 4 --ckpt-interval 2 "
			"--eval-interval 0 " SMALL,
			cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	cu_run(NULL, 0, "md5sum %s/run/step-*/* > %s/sums", dir, dir);
	rc = cu_run(out, sizeof out, "cp -r %s/run %s/copy && %s train --resume %s/copy --steps 6 --ckpt-interval 2",
		    dir, dir, cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect_eq(cu_run(out, sizeof out,
			    "test -d %s/copy/step-000006 && test ! -e %s/run/step-000006 && md5sum -c --quiet %s/sums",
			    dir, dir, dir),
		     0, "the resumed copy wrote into the original run: %s", out);
	/* step 4 again, from step 2 with another lr: swapped in whole */
	cu_run(NULL, 0, "md5sum %s/copy/step-000004/model.safetensors > %s/s4", dir, dir);
	rc = cu_run(out, sizeof out, "%s train --resume %s/copy/step-000002 --steps 4 --lr 0.003", cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect_neq(cu_run(NULL, 0, "md5sum -c --quiet %s/s4", dir), 0, "step 4 was not re-saved");
	cr_expect_eq(cu_run(out, sizeof out, "ls -A %s/copy; test -z \"$(ls -A %s/copy | grep -vxF .lock | grep '^\\.')\"",
			    dir, dir),
		     0, "temp or aside directories left behind: %s", out);
	/* the same on a file system without RENAME_EXCHANGE: the old step is
	 * moved aside, the new one renamed in, the old one removed */
	cu_run(NULL, 0, "md5sum %s/copy/step-000004/model.safetensors > %s/s4", dir, dir);
	rc = cu_run(out, sizeof out,
		    "STRATA_FAULT_NO_EXCHANGE=1 %s train --resume %s/copy/step-000002 --steps 4 --lr 0.002",
		    cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect_neq(cu_run(NULL, 0, "md5sum -c --quiet %s/s4", dir), 0, "step 4 was not re-saved");
	cr_expect_eq(cu_run(out, sizeof out, "test -z \"$(ls -A %s/copy | grep -vxF .lock | grep '^\\.')\"", dir), 0,
		     "the fallback left temp or aside directories: %s", out);
	/* a kill between "move step 6 aside" and "rename the new one in" */
	rc = cu_run(out, sizeof out,
		    "mv %s/copy/step-000006 %s/copy/.old-step-000006.4242 && %s train --resume %s/copy --steps 7",
		    dir, dir, cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "restored"), "no word of the restored checkpoint: %s", out);
	cr_expect_eq(cu_run(out, sizeof out, "test -d %s/copy/step-000006 && test -d %s/copy/step-000007 && "
					     "test -z \"$(ls -A %s/copy | grep old)\"",
			    dir, dir, dir),
		     0, "step 6 not restored: %s", out);
	/* the same found by a save's pruning (resuming from a step directory,
	 * to a step short of 6, so nothing rewrites it): step 6 comes back
	 * under its own name with its own bytes, and a stale aside copy of a
	 * step that exists (step 4) is removed */
	cu_run(NULL, 0, "md5sum %s/copy/step-000006/* > %s/s6", dir, dir);
	rc = cu_run(out, sizeof out,
		    "mv %s/copy/step-000006 %s/copy/.old-step-000006.4242 && "
		    "cp -r %s/copy/step-000004 %s/copy/.old-step-000004.4243 && "
		    "%s train --resume %s/copy/step-000004 --steps 5",
		    dir, dir, dir, dir, cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "restored"), "no word of the restored checkpoint: %s", out);
	cr_expect_eq(cu_run(out, sizeof out, "md5sum -c --quiet %s/s6 && test -d %s/copy/step-000005 && "
					     "test -z \"$(ls -A %s/copy | grep old)\"",
			    dir, dir, dir),
		     0, "step 6 not restored by the save, or an aside copy left: %s", out);
	/* "step-N/." and an "out" in the --config the run started with name the
	 * checkpoint's run all the same */
	rc = cu_run(out, sizeof out,
		    "echo '{\"out\": \"%s/run\"}' > %s/c.json && "
		    "%s train --resume %s/copy/step-000007/. --config %s/c.json --steps 8",
		    dir, dir, cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect_eq(cu_run(out, sizeof out,
			    "test -d %s/copy/step-000008 && test ! -e %s/run/step-000008 && "
			    "test ! -e %s/copy/step-000007/step-000008",
			    dir, dir, dir),
		     0, "step 8 written elsewhere than the copy: %s", out);
}

/* SIGKILL in the middle of writing a checkpoint leaves the previous one as
 * `latest`, loadable, and resumable. */
Test(train, kill_during_save_keeps_previous_checkpoint)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "kill");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out, "%s train --model %s/init --data %s/data --out %s/run --steps 2 " SMALL,
			cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	cu_run(NULL, 0, "md5sum %s/run/step-000002/* > %s/sums", dir, dir);
	rc = cu_run(out, sizeof out, "STRATA_FAULT_KILL_IN_SAVE=1 %s train --resume %s/run --steps 4", cu_bin(), dir);
	cr_assert_eq(rc, 128 + 9, "expected death by SIGKILL, got %d: %s", rc, out);
	cr_expect_eq(cu_run(out, sizeof out, "test \"$(readlink %s/run/latest)\" = step-000002", dir), 0,
		     "latest moved: %s", out);
	cr_expect_eq(cu_run(out, sizeof out, "md5sum -c --quiet %s/sums", dir), 0, "checkpoint changed: %s", out);
	cr_expect_eq(cu_run(out, sizeof out, "test ! -e %s/run/step-000004", dir), 0, "partial checkpoint visible");
	rc = cu_run(out, sizeof out, "%s eval --model %s/run --data %s/data --seq-len 32", cu_bin(), dir, dir);
	cr_expect_eq(rc, 0, "previous checkpoint not loadable: %s", out);
	rc = cu_run(out, sizeof out, "%s train --resume %s/run --steps 4 && ls -a %s/run", cu_bin(), dir, dir);
	cr_expect_eq(rc, 0, "resume after the crash failed: %s", out);
	cr_expect(strstr(out, ".tmp-") == NULL, "stale temp dir left behind: %s", out);
}

/* sample never ends its text inside a character: one byte-tokenizer
 * token from an untrained model over 40 seeds lands on lead bytes of
 * multi-byte characters now and then, and those are printed as U+FFFD (as
 * the tokenizers library decodes such a tail), not as a lone lead byte,
 * which is invalid UTF-8 (found by a helper's audit against transformers). */
Test(train, sample_ends_on_whole_characters, .timeout = 120)
{
	char dir[256], path[512];
	cu_tmpdir(dir, sizeof dir, "samputf8");
	int rc = cu_run(out, sizeof out, "%s init --config tiny --out %s/m --seed 3", cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	int leads = 0;
	for (int seed = 1; seed <= 40; seed++) {
		rc = cu_run(out, sizeof out, "%s sample --model %s/m --prompt a --tokens 1 --temperature 1 "
				"--top-p 1 --seed %d --threads 2 > %s/o.txt 2>/dev/null", cu_bin(), dir, seed,
			    dir);
		cr_assert_eq(rc, 0, "seed %d: %s", seed, out);
		snprintf(path, sizeof path, "%s/o.txt", dir);
		char *text = NULL;
		size_t len = 0;
		cr_assert_eq(fs_read_file(path, &text, &len), ST_OK);
		cr_assert(len >= 1 && text[0] == 'a', "seed %d: no prompt", seed);
		const unsigned char *t = (const unsigned char *)text + 1;
		const size_t n = len - 1;
		cr_expect_eq(st_utf8_incomplete_tail(t, n), 0,
			     "seed %d ends inside a character (%zu bytes, the last 0x%02x)", seed, n,
			     n ? t[n - 1] : 0);
		leads += n == 3 && !memcmp(t, "\xef\xbf\xbd", 3);
		free(text);
	}
	cr_expect_gt(leads, 0, "no seed drew a lead byte: the test proves nothing");
}

Test(train, eval_and_sample_cli)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "evsample");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out, "%s eval --model %s/init --data %s/data --seq-len 32 --json", cu_bin(), dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	double loss = atof(strstr(out, "\"loss\": ") + 8);
	cr_expect(loss > 5.0 && loss < 6.2, "untrained loss %.3f should be near ln(258) = 5.55", loss);
	static char a[1 << 16];
	rc = cu_run(out, sizeof out, "%s sample --model %s/init --prompt 'the lord' --tokens 20 --seed 3", cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	snprintf(a, sizeof a, "%s", out);
	rc = cu_run(out, sizeof out, "%s sample --model %s/init --prompt 'the lord' --tokens 20 --seed 3", cu_bin(), dir);
	cr_expect_str_eq(out, a, "sampling with the same seed differs");
	cr_expect(strncmp(out, "the lord", 8) == 0, "sample does not start with the prompt: %s", out);
	/* every target of the validation shard is scored, the last window
	 * short: 100 tokens are 99 targets in windows of 32 (96 until the
	 * short tail was dropped) */
	char shard[512];
	snprintf(shard, sizeof shard, "%s/v100.bin", dir);
	uint32_t toks[100];
	for (int i = 0; i < 100; i++)
		toks[i] = (uint32_t)('a' + i % 26);
	cr_assert_eq(shard_write(shard, toks, 100, 258, "byte"), 0);
	rc = cu_run(out, sizeof out, "%s eval --model %s/init --data %s --seq-len 32 --json", cu_bin(),
		    dir, shard);
	cr_expect(rc == 0 && strstr(out, "\"tokens\": 99}"), "%s", out);
	/* --micro-batch beyond the windows scored: no rows past them (16M rows
	 * of 32 tokens used to be allocated for these two) */
	rc = cu_run(out, sizeof out, "%s eval --model %s/init --data %s/data --seq-len 32 --max-tokens 64 "
			"--micro-batch 16777216 --json", cu_bin(), dir, dir);
	cr_expect(rc == 0 && strstr(out, "\"tokens\": 64"), "%s", out);
	/* the largest --max-tokens scores the whole shard, as 0 does (rounding
	 * it up to whole windows overflowed into none: "hold no loss targets") */
	rc = cu_run(out, sizeof out, "%s eval --model %s/init --data %s --seq-len 32 "
			"--max-tokens 9223372036854775807 --json", cu_bin(), dir, shard);
	cr_expect(rc == 0 && strstr(out, "\"tokens\": 99}"), "%s", out);
	/* at any --seq-len: a window past the shard is lowered to its 99
	 * targets (a model of 2^31 - 1 positions asked for 37.6 GiB of
	 * activations at --seq-len 1000000) with the same loss */
	rc = cu_run(out, sizeof out, "%s eval --model %s/init --data %s --seq-len 99 --json",
		    cu_bin(), dir, shard);
	cr_assert_eq(rc, 0, "%s", out);
	char whole[256];
	snprintf(whole, sizeof whole, "%s", strstr(out, "{\"loss\""));
	rc = cu_run(out, sizeof out, "mkdir -p %s/long && cp %s/init/* %s/long/ && sed -i "
			"'s/\"max_position_embeddings\":[[:space:]]*[0-9]*/\"max_position_embeddings\": 2147483647/' "
			"%s/long/config.json && %s eval --model %s/long --data %s --seq-len 1000000 --json",
		    dir, dir, dir, dir, cu_bin(), dir, shard);
	cr_expect(rc == 0 && strstr(out, "--seq-len 1000000: 99, the targets") &&
			  strstr(out, whole),
		  "%s\nat --seq-len 99: %s", out, whole);
	/* a directory with no shards at all (empty, or a prepare stopped
	 * before its swap) is named as such, not as one without val.bin */
	rc = cu_run(out, sizeof out, "mkdir -p %s/noshards && %s eval --model %s/init --data %s/noshards",
		    dir, cu_bin(), dir, dir);
	cr_expect(rc != 0 && strstr(out, "/noshards holds no token shards (no val.bin, no train.bin)"),
		  "%s", out);
	/* --prompt-file (a file, or - for standard input) is --prompt with the
	 * file's text; both at once are refused; --top-k 1 at any temperature
	 * is greedy */
	rc = cu_run(out, sizeof out, "printf 'the lord' > %s/p.txt && %s sample --model %s/init "
			"--prompt-file %s/p.txt --tokens 20 --seed 3",
		    dir, cu_bin(), dir, dir);
	cr_expect(rc == 0 && !strcmp(out, a), "--prompt-file gave another sample: %s", out);
	rc = cu_run(out, sizeof out, "printf 'the lord' | %s sample --model %s/init --prompt-file - "
			"--tokens 20 --seed 3",
		    cu_bin(), dir);
	cr_expect(rc == 0 && !strcmp(out, a), "--prompt-file -: %s", out);
	rc = cu_run(out, sizeof out, "%s sample --model %s/init --prompt-file %s/p.txt --prompt x",
		    cu_bin(), dir, dir);
	cr_expect(rc != 0 && strstr(out, "both --prompt and --prompt-file"), "%s", out);
	rc = cu_run(out, sizeof out, "%s sample --model %s/init --prompt 'the lord' --tokens 20 "
			"--temperature 0", cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	snprintf(a, sizeof a, "%s", out);
	rc = cu_run(out, sizeof out, "%s sample --model %s/init --prompt 'the lord' --tokens 20 "
			"--temperature 5 --top-k 1 --seed 7", cu_bin(), dir);
	cr_expect(rc == 0 && !strcmp(out, a), "--top-k 1 is not greedy: %s\ngreedy: %s", out, a);
	/* the key/value-cache decoder picks what recomputing the window for
	 * every token picks (test hook STRATA_SAMPLE_WINDOW), while the text
	 * fits in --context (the 8 bytes of the prompt and 16 new ones); past
	 * it, the decoder goes on from the cache's last half */
	rc = cu_run(out, sizeof out, "STRATA_SAMPLE_WINDOW=1 %s sample --model %s/init --prompt "
			"'the lord' --tokens 20 --temperature 0", cu_bin(), dir);
	cr_expect(rc == 0 && !strcmp(out, a), "the windowed recompute: %s\ndecoder: %s", out, a);
	char w[4096];
	rc = cu_run(w, sizeof w, "STRATA_SAMPLE_WINDOW=1 %s sample --model %s/init --prompt "
			"'the lord' --tokens 60 --context 24 --temperature 0 2>/dev/null", cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", w);
	rc = cu_run(out, sizeof out, "%s sample --model %s/init --prompt 'the lord' --tokens 60 "
			"--context 24 --temperature 0 2>/dev/null", cu_bin(), dir);
	cr_expect(rc == 0 && strlen(out) > 8 + 16 && !strncmp(out, w, 8 + 16),
		  "past --context: %s\nwindowed: %s", out, w);
	/* the rate is said to a terminal (script(1) gives one), not to a pipe */
	rc = cu_run(out, sizeof out, "script -qec \"%s sample --model %s/init --prompt 'the lord' "
			"--tokens 20 --temperature 0\" /dev/null", cu_bin(), dir);
	cr_expect(rc == 0 && strstr(out, " tokens in ") && strstr(out, "tokens/s (reading the "),
		  "%s", out);
	/* there a newline ends the text, before the rate's line */
	cr_expect(strstr(out, "\r\n20 tokens in "), "no newline after the text: %s", out);
	rc = cu_run(out, sizeof out, "%s sample --model %s/init --prompt 'the lord' --tokens 20 "
			"--temperature 0", cu_bin(), dir);
	cr_expect(rc == 0 && !strstr(out, "tokens/s"), "%s", out);
	/* a text that may outgrow --context is said; --context defaults to the
	 * model's max_position_embeddings (a 300-position model: the prompt and
	 * 285 tokens fit; in 256, the default before the cache, they would not) */
	rc = cu_run(out, sizeof out, "{ %s sample --model %s/init --prompt 'the lord' --tokens 60 "
			"--context 24 --temperature 0 > /dev/null; }", cu_bin(), dir);
	cr_expect(rc == 0 && strstr(out, "may outgrow --context 24 (") &&
			  strstr(out, "from its last 12 tokens"), "%s", out);
	rc = cu_run(out, sizeof out, "sed 's/\"max_position_embeddings\":[^,]*,/\"max_position_embeddings\": "
			"300,/' %s/init/config.json > %s/c300.json && %s init --config %s/c300.json --out "
			"%s/m300 > /dev/null && { %s sample --model %s/m300 --prompt 'the lord' --tokens 285 "
			"--temperature 0 > /dev/null; }",
			dir, dir, cu_bin(), dir, dir, cu_bin(), dir);
	cr_expect(rc == 0 && !strstr(out, "outgrow"), "%s", out);
	rc = cu_run(out, sizeof out, "{ %s sample --model %s/m300 --prompt 'the lord' --tokens 285 "
			"--temperature 0 --context 256 > /dev/null; }", cu_bin(), dir);
	cr_expect(rc == 0 && strstr(out, "may outgrow --context 256"), "%s", out);
	/* --bos puts <bos> before the prompt: another continuation, same seed */
	rc = cu_run(out, sizeof out, "%s sample --model %s/init --prompt 'the lord' --tokens 20 --seed 3",
		    cu_bin(), dir);
	snprintf(a, sizeof a, "%s", out);
	rc = cu_run(out, sizeof out, "%s sample --model %s/init --prompt 'the lord' --tokens 20 --seed 3 --bos",
		    cu_bin(), dir);
	cr_expect(rc == 0 && strncmp(out, "the lord", 8) == 0 && strcmp(out, a) != 0, "%s", out);
	/* a model far beyond the byte tokenizer's 258 ids, without tokenizer.json */
	rc = cu_run(out, sizeof out, "%s init --config tiny --vocab 2000 --out %s/v2000 >/dev/null && "
			"%s sample --model %s/v2000 --tokens 2", cu_bin(), dir, cu_bin(), dir);
	cr_expect(rc == 0 && strstr(out, "/v2000 has no tokenizer.json: sampling with the byte "
				      "tokenizer, whose 258 ids are not this model's 2000"),
		  "%s", out);
	/* finite weights whose outputs overflow (the final norm's gains at 3e38;
	 * the checksums dropped): eval fails with a loss of null in valid JSON,
	 * sample fails instead of printing token 0, and training's held-out
	 * rows in metrics.jsonl stay JSON */
	rc = cu_run(out, sizeof out, "cp -r %s/init %s/big && python3 -c \"\n"
			"import json, struct\n"
			"p = '%s/big/model.safetensors'\n"
			"b = bytearray(open(p, 'rb').read())\n"
			"n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)\n"
			"a, z = h['model.norm.weight']['data_offsets']\n"
			"b[8 + n + a:8 + n + z] = struct.pack('<f', 3e38) * ((z - a) // 4)\n"
			"s = json.dumps(h).encode(); b[8:8 + n] = s + b' ' * (n - len(s))\n"
			"open(p, 'wb').write(b)\"", dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	rc = cu_run(out, sizeof out, "%s eval --model %s/big --data %s/data --seq-len 32 --json "
			"--max-tokens 64 2>/dev/null | python3 -c 'import json, sys; "
			"assert json.load(sys.stdin)[\"loss\"] is None'",
		    cu_bin(), dir, dir);
	cr_expect_eq(rc, 0, "eval --json of an overflowing model: %s", out);
	rc = cu_run(out, sizeof out, "%s eval --model %s/big --data %s/data --seq-len 32", cu_bin(),
		    dir, dir);
	cr_expect(rc != 0 && strstr(out, "/big is not finite"), "%s", out);
	/* a finite loss past e^709 (gains at 1e5): its perplexity is past a
	 * double, given as null in --json with a warning; the exit is 0 */
	rc = cu_run(out, sizeof out, "cp -r %s/big %s/hot && python3 -c \"\n"
			"import json, struct\n"
			"p = '%s/hot/model.safetensors'\n"
			"b = bytearray(open(p, 'rb').read())\n"
			"n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])\n"
			"a, z = h['model.norm.weight']['data_offsets']\n"
			"b[8 + n + a:8 + n + z] = struct.pack('<f', 1e5) * ((z - a) // 4)\n"
			"open(p, 'wb').write(b)\" && %s eval --model %s/hot --data %s/data --seq-len 32 "
			"--json --max-tokens 64 2>&1 >%s/hot.json && python3 -c 'import json, sys; "
			"r = json.load(open(sys.argv[1])); "
			"assert r[\"loss\"] > 709 and r[\"perplexity\"] is None, r' %s/hot.json",
		    dir, dir, dir, cu_bin(), dir, dir, dir, dir);
	cr_expect(rc == 0 && strstr(out, "is past a double's range: --json gives it as null"), "%s",
		  out);
	rc = cu_run(out, sizeof out, "%s sample --model %s/big --tokens 3", cu_bin(), dir);
	cr_expect(rc != 0 && strstr(out, "next-token scores are not finite") && !memchr(out, 0, 3),
		  "%s", out);
	rc = cu_run(out, sizeof out, "{ %s train --model %s/big --data %s/data --out %s/bigrun --steps 2 "
			"--max-skipped-steps 5 " SMALL " 2>&1; } ; python3 -c 'import json, sys; "
			"rows = [json.loads(l) for l in open(sys.argv[1])]; "
			"assert any(\"val_loss\" in r and r[\"val_loss\"] is None for r in rows)' "
			"%s/bigrun/metrics.jsonl", cu_bin(), dir, dir, dir, dir);
	cr_expect(rc == 0 && strstr(out, "held-out loss at step 0 is not finite"), "%s", out);
	/* a directory that is no model, run or checkpoint (here the data) is
	 * named as such, not as a run without checkpoints */
	rc = cu_run(out, sizeof out, "%s eval --model %s/data --data %s/data", cu_bin(), dir, dir);
	cr_expect(rc != 0 && strstr(out, "/data holds no model: no config.json, and it is not a run"),
		  "%s", out);
}

/* prepare --tokenizer RUN (a run directory, as sample takes one): the
 * tokenizer.json its latest checkpoint carries, the same shards as naming
 * the file (it said "no tokenizer at RUN/tokenizer.json"). */
Test(train, prepare_tokenizer_from_a_run)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "preptok");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"mkdir -p %s/run/step-000001 && cp %s/init/* tests/data/tokenizers/gpt2/tokenizer.json "
			"%s/run/step-000001/ && echo '{}' > %s/run/step-000001/trainer.json && "
			"ln -s step-000001 %s/run/latest && "
			"%s prepare --input %s/text.txt --out %s/a --tokenizer %s/run && "
			"%s prepare --input %s/text.txt --out %s/b --tokenizer tests/data/tokenizers/gpt2/tokenizer.json && "
			"cmp %s/a/train.bin %s/b/train.bin",
			dir, dir, dir, dir, dir, cu_bin(), dir, dir, dir, cu_bin(), dir, dir, dir, dir);
	cr_expect_eq(rc, 0, "%s", out);
	/* --input - is standard input: the same shards as the file; twice is
	 * refused; a slip of --input is named */
	rc = cu_run(out, sizeof out, "%s prepare --input - --out %s/s < %s/text.txt && "
			"%s prepare --input %s/text.txt --out %s/f && cmp %s/s/train.bin %s/f/train.bin",
		    cu_bin(), dir, dir, cu_bin(), dir, dir, dir, dir);
	cr_expect_eq(rc, 0, "%s", out);
	rc = cu_run(out, sizeof out, "%s prepare --input - --input - --out %s/t < /dev/null", cu_bin(), dir);
	cr_expect(rc != 0 && strstr(out, "--input - is given twice"), "%s", out);
	/* named as standard input in messages, not as the /dev/stdin it is read
	 * through: empty, a token shard, bytes that are not UTF-8 */
	rc = cu_run(out, sizeof out, "%s prepare --input - --out %s/e < /dev/null", cu_bin(), dir);
	cr_expect(rc != 0 && strstr(out, "--input - (standard input) is empty") && !strstr(out, "/dev/stdin"),
		  "%s", out);
	rc = cu_run(out, sizeof out, "%s prepare --input - --out %s/e < %s/s/train.bin", cu_bin(), dir, dir);
	cr_expect(rc != 0 && strstr(out, "--input - (standard input) is a strata token shard") &&
			  !strstr(out, "/dev/stdin"),
		  "%s", out);
	rc = cu_run(out, sizeof out, "{ cat %s/text.txt; printf 'x\\377y'; } | %s prepare --input - --out %s/n",
		    dir, cu_bin(), dir);
	cr_expect(rc == 0 && strstr(out, "warning: - (standard input) is not UTF-8 text") &&
			  !strstr(out, "/dev/stdin"),
		  "%s", out);
	rc = cu_run(out, sizeof out, "%s prepare --inptu x --out %s/u", cu_bin(), dir);
	cr_expect(rc != 0 && strstr(out, "did you mean --input?"), "%s", out);
}

/* A token longer than 1024 bytes is printed whole by sample (it was cut at
 * 1024), with no newline added after the text. The tokenizer's id 0
 * is 1200 bytes ('a' x 1100, a line break, 'b' x 99) and the model's final
 * norm gains are 0, so every score is 0 and greedy picks id 0. */
Test(train, long_tokens_whole)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "longtok");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out, "cp -r %s/init %s/zero && python3 -c \"\n"
			"import json, struct\n"
			"p = '%s/zero/model.safetensors'\n"
			"b = bytearray(open(p, 'rb').read())\n"
			"n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)\n"
			"a, z = h['model.norm.weight']['data_offsets']\n"
			"b[8 + n + a:8 + n + z] = bytes(z - a)\n"
			"s = json.dumps(h).encode(); b[8:8 + n] = s + b' ' * (n - len(s))\n"
			"open(p, 'wb').write(b)\n"
			"cs = [x for x in range(256) if 33 <= x <= 126 or 161 <= x <= 172 or x >= 174]\n"
			"m = {x: chr(x) for x in cs}\n"
			"k = 0\n"
			"for x in range(256):\n"
			"    if x not in m: m[x] = chr(256 + k); k += 1\n"
			"v = {m[x]: x + 1 for x in range(256)}\n"
			"v['a' * 1100 + m[10] + 'b' * 99] = 0\n"
			"t = {'model': {'type': 'BPE', 'vocab': v, 'merges': []}, 'normalizer': None,\n"
			"     'pre_tokenizer': {'type': 'ByteLevel', 'add_prefix_space': False}, 'added_tokens': []}\n"
			"json.dump(t, open('%s/long.json', 'w'))\"",
			dir, dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	rc = cu_run(out, sizeof out, "%s sample --model %s/zero --tokenizer %s/long.json --prompt x "
			"--temperature 0 --tokens 2 2>/dev/null", cu_bin(), dir, dir);
	char want[2600] = "x";
	for (int k = 0; k < 2; k++) {
		memset(want + strlen(want), 'a', 1100);
		strcat(want, "\n");
		memset(want + strlen(want), 'b', 99);
	}
	/* and nothing after the text: a pipe gets it exactly (a newline was
	 * added, which could not be told from the model's) */
	cr_expect(rc == 0 && !strcmp(out, want), "sample printed %zu bytes, want %zu", strlen(out),
		  strlen(want));
}

/* A checkpoint's config.json carries the keys of the starting model's that
 * strata does not use (pad_token_id, use_cache, attention_dropout, a nested
 * object, a list of end tokens whose first is the one strata reads), on
 * through a resume; and not those that the save changes (dtype, the RoPE
 * block whose theta goes to the top level). They were all dropped. */
Test(train, checkpoint_config_keeps_unused_keys)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "cfgkeys");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out, "cd %s && python3 -c \"\n"
			"import json\n"
			"c = json.load(open('init/config.json'))\n"
			"c.update(pad_token_id=0, use_cache=False, attention_dropout=0.1, dtype='bfloat16',\n"
			"         eos_token_id=[257, 256], extra={'a': [1, 2]},\n"
			"         rope_parameters={'rope_type': 'default', 'rope_theta': 500000.0})\n"
			"c.pop('rope_theta', None); c.pop('torch_dtype', None)\n"
			"json.dump(c, open('init/config.json', 'w'))\"",
			dir);
	cr_assert_eq(rc, 0, "%s", out);
	rc = cu_run(out, sizeof out, "%s train --model %s/init --data %s/data --out %s/run --steps 1 "
			"--eval-interval 0 " SMALL " && %s train --resume %s/run --steps 2 --eval-interval 0",
		    cu_bin(), dir, dir, dir, cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	for (int step = 1; step <= 2; step++) {
		rc = cu_run(out, sizeof out, "cd %s && python3 -c \"\n"
				"import json\n"
				"c = json.load(open('run/step-%06d/config.json'))\n"
				"want = dict(pad_token_id=0, use_cache=False, attention_dropout=0.1,\n"
				"            eos_token_id=[257, 256], extra={'a': [1, 2]}, rope_theta=500000,\n"
				"            torch_dtype='float32', model_type='llama', hidden_size=64)\n"
				"bad = {k: c.get(k) for k in want if c.get(k) != want[k]}\n"
				"gone = [k for k in ('dtype', 'rope_parameters') if k in c]\n"
				"assert not bad and not gone, (bad, gone)\"",
				dir, step);
		cr_expect_eq(rc, 0, "step %d: %s", step, out);
	}
}

/* train --model RUN starts a new run from the run's latest weights (said;
 * with SGD at lr 1e-30 they come out unchanged), and without --seq-len on a model
 * shorter than the default 256 it trains at the model's length (said). */
Test(train, new_run_from_a_run_and_default_seq_len)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "fromrun");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"%s train --model %s/init --data %s/data --out %s/a --steps 2 --eval-interval 0 " SMALL,
			cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	rc = cu_run(out, sizeof out,
		    "%s train --model %s/a --data %s/data --out %s/b --steps 1 --optimizer sgd --lr 1e-30 --eval-interval 0 "
		    "--micro-batch 2 --progress lines",
		    cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "starting a new run from the weights of ") &&
			  strstr(out, "/a/step-000002 (a fresh optimizer") &&
			  strstr(out, "--seq-len 128: the model's max_position_embeddings") &&
			  strstr(out, "1 step of 256 tokens (2 x 128 x 1)"),
		  "%s", out);
	char wa[512], wb[512];
	snprintf(wa, sizeof wa, "%s/a/step-000002/model.safetensors", dir);
	snprintf(wb, sizeof wb, "%s/b/step-000001/model.safetensors", dir);
	cr_expect(cu_weights_equal(wa, wb), "lr 1e-30 from the run's weights changed them");
	/* plan reads --model RUN and fits --seq-len as train does */
	rc = cu_run(out, sizeof out, "%s plan --model %s/a --micro-batch 2", cu_bin(), dir);
	cr_expect(rc == 0 && strstr(out, "starting a new run from the weights of") &&
			  strstr(out, "x 128 tokens"),
		  "%s", out);
	/* a run killed before its first checkpoint is named as one; a file is
	 * named as a file */
	rc = cu_run(out, sizeof out, "mkdir -p %s/killed && touch %s/killed/metrics.jsonl && "
			"%s eval --model %s/killed --data %s/data", dir, dir, cu_bin(), dir, dir);
	cr_expect(rc != 0 && strstr(out, "stopped before its first checkpoint"), "%s", out);
	rc = cu_run(out, sizeof out, "%s eval --model %s --data %s/data", cu_bin(), wa, dir);
	cr_expect(rc != 0 && strstr(out, "model.safetensors is a file, not a model directory"), "%s",
		  out);
}

/* A checkpoint carries the tokenizer files the run started with, also after
 * the checkpoint they were read from is gone: a resume from step 1 with
 * --keep-ckpts 1 removes step 1 once step 2 is saved, and steps 3 and 4
 * used to be written without tokenizer.json. */
Test(train, tokenizer_files_outlive_their_source)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "tokfiles");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out,
			"printf '{\"bos_token\": \"<s>\"}' > %s/init/tokenizer_config.json && "
			"printf '{{ messages[0].content }}' > %s/init/chat_template.jinja && "
			"%s train --model %s/init --data %s/data --out %s/a --steps 1 --eval-interval 0 " SMALL
			" && %s train --resume %s/a/step-000001 --steps 4 --ckpt-interval 1 --keep-ckpts 1",
			dir, dir, cu_bin(), dir, dir, dir, cu_bin(), dir);
	cr_assert_eq(rc, 0, "%s", out);
	/* and the chat template transformers 5 saves beside them (it was left) */
	rc = cu_run(out, sizeof out, "test ! -e %s/a/step-000001 && cmp %s/init/tokenizer_config.json "
			"%s/a/step-000004/tokenizer_config.json && cmp %s/init/chat_template.jinja "
			"%s/a/step-000004/chat_template.jinja", dir, dir, dir, dir, dir);
	cr_expect_eq(rc, 0, "%s", out);
}

/* What a run prints around its steps: "saved checkpoint" lines start a line
 * of their own under --progress bar (the capture thread printed them into
 * the bar's line: "ETA 0ssaved checkpoint"); the data line gives the tokens
 * held and drawn, and a step that draws more than the data holds is warned;
 * a --threads above the CPUs is warned; plan refuses a --seq-len past the
 * model's positions, as train does (it planned a run train refuses). */
Test(train, run_output_lines)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "lines");
	cu_setup_run(dir, "");
	int rc = cu_run(out, sizeof out, "%s train --model %s/init --data %s/data --out %s/run "
			"--steps 12 --ckpt-interval 1 --keep-ckpts 0 --eval-interval 0 --micro-batch 4 "
			"--seq-len 32 --progress bar",
			cu_bin(), dir, dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	int saved = 0;
	for (const char *p = strstr(out, "saved checkpoint"); p; p = strstr(p + 1, "saved checkpoint")) {
		saved++;
		cr_expect(p > out && p[-1] == '\n', "a checkpoint line inside another: ...%.60s",
			  p - 40 > out ? p - 40 : out);
	}
	cr_expect_eq(saved, 12, "%d checkpoint lines, 12 saved: %s", saved, out);
	cr_expect(strstr(out, "data: ") && strstr(out, " training tokens; the run draws ") &&
			  strstr(out, " (1536 tokens, in windows at random offsets)"),
		  "%s", out);
	cr_expect(!strstr(out, "the training data holds"), "%s", out);
	/* every step and evaluation row has its elapsed wall-clock time, in order */
	rc = cu_run(out, sizeof out, "python3 -c \"import json\nrows = [json.loads(l) for l in "
			"open('%s/run/metrics.jsonl') if '\\\"step\\\"' in l]\nt = [r['elapsed_s'] for r in "
			"rows]\nassert len(t) == 13 and t == sorted(t) and t[0] >= 0, t\"",
			dir);
	cr_expect_eq(rc, 0, "%s", out);
	/* resumed with a longer run of larger steps: the 1536 tokens seen, then
	 * 8 steps of 2 x 4 x 32 (it said 20 steps at today's size, 5120) */
	rc = cu_run(out, sizeof out, "%s train --resume %s/run --steps 20 --grad-accum 2 "
			"--eval-interval 0 --progress none",
		    cu_bin(), dir);
	cr_expect(rc == 0 && strstr(out, " (3584 tokens, 1536 of them seen before the resume, in "
					 "windows at random offsets)"),
		  "%s", out);
	rc = cu_run(out, sizeof out, "head -c 3000 %s/text.txt > %s/small.txt && %s prepare --input "
			"%s/small.txt --out %s/small --val-fraction 0 && %s train --model %s/init --data "
			"%s/small --out %s/big --steps 1 --micro-batch 64 --seq-len 64 --threads %d",
			dir, dir, cu_bin(), dir, dir, cu_bin(), dir, dir, dir, 2 * (int)sysconf(_SC_NPROCESSORS_ONLN) + 1);
	cr_expect(rc == 0 && strstr(out, "one step draws 4096 tokens, more than the 3001 the training "
					 "data holds"),
		  "%s", out);
	cr_expect(strstr(out, "is more than the ") && strstr(out, " CPUs this process may use"), "%s",
		  out);
	rc = cu_run(out, sizeof out, "%s plan --model %s/init --seq-len 256 --micro-batch 2", cu_bin(),
		    dir);
	cr_expect(rc != 0 && strstr(out, "--seq-len 256 exceeds the model's max_position_embeddings 128"),
		  "%s", out);
}
