/* The benchmarks' command lines (the programs in bench/, parsed with the
 * CLI's parser, src/cli/args.c): --help prints the usage and exits 0 without
 * measuring anything; an unknown option, a number flag without its value, a
 * value that is not a number, a value out of range and a --json file that
 * cannot be opened each exit 2 with a message naming the problem, before any
 * work starts. The benchmarks themselves are run by `make bench`, not here. */
#include <libgen.h>

#include "cliutil.h"

static char out[1 << 14];

/* Built next to the CLI: build/bench/NAME for build/strata. */
static const char *bench_path(const char *name)
{
	static char path[1024], bin[1024];
	snprintf(bin, sizeof bin, "%s", cu_bin());
	snprintf(path, sizeof path, "%s/bench/%s", dirname(bin), name);
	return path;
}

/* rc 2 and `needle` in the output */
static void expect_refused(const char *name, const char *flags, const char *needle)
{
	int rc = cu_run(out, sizeof out, "%s %s", bench_path(name), flags);
	cr_expect_eq(rc, 2, "bench/%s %s: exit %d, want 2: %s", name, flags, rc, out);
	cr_expect(strstr(out, needle), "bench/%s %s: no '%s' in: %s", name, flags, needle, out);
}

static const struct {
	const char *name, *number_flag, *out_of_range;
	int json; /* takes --json FILE */
} benches[] = {
	{"optim", "--params", "--reps 0", 1},
	{"optim_cuda", "--reps", "--params 10", 1},
	{"q8_stages", "--reps", "--reps -3", 0},
	{"train", "--steps", "--batch 0", 1},
	{"galore", "--gap", "--steps 2", 1},
	{"io", "--depth", "--slab-mib 0", 1},
};

Test(bench_cli, help_prints_usage_and_measures_nothing)
{
	for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++) {
		const char *name = benches[i].name;
		int rc = cu_run(out, sizeof out, "%s --help", bench_path(name));
		cr_expect_eq(rc, 0, "bench/%s --help: exit %d: %s", name, rc, out);
		char want[64];
		snprintf(want, sizeof want, "usage: bench/%s [--", name);
		cr_expect(strncmp(out, want, strlen(want)) == 0, "bench/%s --help printed: %s", name, out);
		/* the usage and nothing else: no measurement ran */
		cr_expect(strlen(out) < 600, "bench/%s --help printed more than its usage: %s", name, out);
	}
}

/* The scripts' --help prints their whole header comment and runs nothing
 * (each dropped its header's last line, the usage line of some). */
Test(bench_cli, scripts_help_prints_the_whole_header)
{
	const char *scripts[] = {"scripts/galore-quality", "scripts/gpu-bundle", "scripts/gpu-check",
				 "scripts/offload-demo",   "scripts/quickstart", "bench/run.sh"};
	for (size_t i = 0; i < sizeof scripts / sizeof scripts[0]; i++) {
		int rc = cu_run(out, sizeof out,
				"awk 'NR > 1 && /^[^#]/ { exit } NR > 1 { sub(/^# ?/, \"\"); print }' %s > "
				"/tmp/strata-help-want.$$ && sh %s --help | cmp - /tmp/strata-help-want.$$; "
				"e=$?; rm -f /tmp/strata-help-want.$$; exit $e",
				scripts[i], scripts[i]);
		cr_expect_eq(rc, 0, "%s --help is not its header: %s", scripts[i], out);
	}
}

Test(bench_cli, bad_options_are_refused)
{
	char flags[128], needle[128];
	for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++) {
		const char *name = benches[i].name, *num = benches[i].number_flag;
		snprintf(needle, sizeof needle, "bench/%s: unknown option --no-such", name);
		expect_refused(name, "--no-such 1", needle);
		/* a trailing flag without its value (these used to be dropped) */
		snprintf(needle, sizeof needle, "%s needs a value", num);
		expect_refused(name, num, needle);
		snprintf(flags, sizeof flags, "%s 12abc", num);
		snprintf(needle, sizeof needle, "%s: '12abc' is not an integer", num);
		expect_refused(name, flags, needle);
		snprintf(needle, sizeof needle, "bench/%s: need", name);
		expect_refused(name, benches[i].out_of_range, needle);
		expect_refused(name, "positional", "unexpected argument 'positional'");
		/* the results file is opened before any measuring */
		if (benches[i].json)
			expect_refused(name, "--json /nonexistent-dir/r.json",
				       "--json: cannot write /nonexistent-dir/r.json");
	}
	expect_refused("optim", "--json", "--json needs a value");
	expect_refused("galore", "--proj qr", "--proj randomized or svd");
	expect_refused("io", "--dir", "give up to 16 --dir DIR");
	expect_refused("io", "--block 6000", "--block a multiple of 4K");
	expect_refused("io", "--gib 0.01", "--slab-mib <= --gib x 1024");
}

/* A results file that cannot be written in full (a full disk) fails the
 * run, with the reason, and the previous results file is left as it was. */
Test(bench_cli, full_disk_fails_the_run)
{
	char dir[256], cmd[600];
	cu_tmpdir(dir, sizeof dir, "benchjson");
	/* a previous results file, and the .tmp the run writes on a full disk */
	snprintf(cmd, sizeof cmd, "echo '{\"old\": 1}' > %s/r.json && ln -s /dev/full %s/r.json.tmp",
		 dir, dir);
	cr_assert_eq(cu_run(NULL, 0, "%s", cmd), 0);
	int rc = cu_run(out, sizeof out, "%s --params 65536 --reps 1 --json %s/r.json",
			bench_path("optim"), dir);
	cr_expect_eq(rc, 1, "exit %d: %s", rc, out);
	cr_expect(strstr(out, "No space left on device"), "%s", out);
	cr_expect(cu_run(out, sizeof out, "cat %s/r.json", dir) == 0 && !strcmp(out, "{\"old\": 1}\n"),
		  "the previous results file changed: %s", out);
	/* the failed run's temporary file is gone, as is a refused run's (an
	 * option checked after the file was opened) */
	cr_expect(cu_run(NULL, 0, "test ! -e %s/r.json.tmp && test ! -L %s/r.json.tmp", dir, dir) == 0,
		  "the failed run left r.json.tmp");
	rc = cu_run(out, sizeof out, "%s --params 5 --json %s/q.json; test ! -e %s/q.json.tmp",
		    bench_path("optim"), dir, dir);
	cr_expect_eq(rc, 0, "a refused run left q.json.tmp: %s", out);
	/* a run that completes replaces it */
	rc = cu_run(out, sizeof out, "%s --params 65536 --reps 1 --json %s/r.json",
		    bench_path("optim"), dir);
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect(cu_run(out, sizeof out, "grep -c speedup_8bit_over_fp32 %s/r.json", dir) == 0,
		  "results not written: %s", out);
}

/* The same parser's "needs a value", through the strata CLI. */
Test(bench_cli, strata_number_flag_without_value)
{
	int rc = cu_run(out, sizeof out, "%s eval --model nosuch --seq-len", cu_bin());
	cr_expect_eq(rc, 2, "exit %d: %s", rc, out);
	cr_expect(strstr(out, "--seq-len needs a value"), "%s", out);
}

/* bench/compare_optim.py pairs strata's optimizer results with the peers'
 * of the same device: bench/optim with the CPU peers, bench/optim_cuda
 * (whose JSON names its GPU) with optim_peers.py --device cuda. It used to
 * refuse every GPU pair, so scripts/gpu-check's GPU comparison failed. The
 * files are cut down to the keys the script reads. */
Test(bench_cli, compare_optim_pairs_one_device)
{
	char dir[256];
	cu_tmpdir(dir, sizeof dir, "compare-optim");
	const char *ours = "\"adamw_fp32\": {\"params_per_s\": 1e11}, "
			   "\"adamw_8bit\": {\"params_per_s\": 1.6e11}";
	const char *peers = "\"peers\": {\"torch_adamw_fused\": {\"params_per_s\": 8e10}}";
	int rc = cu_run(out, sizeof out,
			"cd %s && echo '{\"device\": \"NVIDIA H100\", \"params\": 4096, %s}' > gpu.json && "
			"echo '{\"params\": 4096, \"threads\": 2, %s}' > cpu.json && "
			"echo '{\"device\": \"cuda\", \"params\": 4096, \"threads\": 2, %s}' > peers-gpu.json && "
			"echo '{\"device\": \"cpu\", \"params\": 4096, \"threads\": 2, %s}' > peers-cpu.json",
			dir, ours, ours, peers, peers);
	cr_assert_eq(rc, 0, "%s", out);
	const char *script = "python3 bench/compare_optim.py";
	rc = cu_run(out, sizeof out, "%s %s/gpu.json %s/peers-gpu.json", script, dir, dir);
	cr_expect_eq(rc, 0, "GPU pair refused: %s", out);
	cr_expect(strstr(out, "fastest peer (torch_adamw_fused) = 2.00"), "%s", out);
	rc = cu_run(out, sizeof out, "%s %s/cpu.json %s/peers-cpu.json", script, dir, dir);
	cr_expect_eq(rc, 0, "CPU pair refused: %s", out);
	cr_expect(strstr(out, "fastest peer (torch_adamw_fused) = 2.00"), "%s", out);
	/* across devices: refused, naming both */
	rc = cu_run(out, sizeof out, "%s %s/gpu.json %s/peers-cpu.json", script, dir, dir);
	cr_expect_eq(rc, 1, "GPU results against CPU peers: exit %d: %s", rc, out);
	cr_expect(strstr(out, "measured on cpu") && strstr(out, "on the GPU"), "%s", out);
	rc = cu_run(out, sizeof out, "%s %s/cpu.json %s/peers-gpu.json", script, dir, dir);
	cr_expect_eq(rc, 1, "CPU results against GPU peers: exit %d: %s", rc, out);
	cr_expect(strstr(out, "measured on cuda") && strstr(out, "on the CPU"), "%s", out);
	/* bench/optim_cuda where no GPU answered: said, not a traceback */
	rc = cu_run(out, sizeof out, "echo '{\"device\": null, \"params\": 4096}' > %s/none.json && "
		    "%s %s/none.json %s/peers-gpu.json", dir, script, dir, dir);
	cr_expect_eq(rc, 1, "a run that measured nothing: exit %d: %s", rc, out);
	cr_expect(strstr(out, "measured nothing") && !strstr(out, "Traceback"), "%s", out);
}
