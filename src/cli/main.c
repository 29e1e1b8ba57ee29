/* strata: train and fine-tune LLaMA-family models on one machine. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "engine/session.h"
#include "util/check.h"
#include "util/parse.h"

#define STRATA_VERSION "0.1.0"
/* The CUDA optimizer kernels are compiled where nvcc is found; the CUDA
 * backend that would run a whole step on the GPU is not built yet. */
#ifdef ST_HAVE_CUDA
#define ST_CUDA_BUILD "optimizer kernels compiled (nvcc found); the CUDA backend is not built yet, so commands run on the CPU"
#else
#define ST_CUDA_BUILD "not compiled (no nvcc): CPU only"
#endif

static void usage(FILE *f)
{
	fprintf(f,
		"usage: strata COMMAND [--option value ...]\n"
		"\n"
		"commands:\n"
		"  init     write a randomly initialized model (HF LLaMA directory)\n"
		"  prepare  turn text files into token shards (train.bin, val.bin)\n"
		"  train    train a model on prepared data, with checkpoints and resume\n"
		"  eval     loss and perplexity of a model on a token shard\n"
		"  sample   generate text from a model\n"
		"  import   turn a llama.cpp GGUF file into a Hugging Face model directory\n"
		"  plan     where a run's state would live and its predicted step, without training\n"
		"\n"
		"`strata COMMAND --help` lists a command's options; `strata --version` the build.\n");
}

/* The exit status, once what was printed has reached stdout: a full disk or
 * a closed file under it (> /dev/full) is an error, not exit 0 with the
 * output lost (eval --json, sample). */
int cli_stdout_errno;
int cli_stdin_closed, cli_stdout_closed;

/* A standard stream the caller closed (`>&-`): the next file strata opened
 * took its number, and what was printed to stdout went into that file (a
 * lock file, a checkpoint being written) when the buffer was flushed. Each
 * closed one is opened again: stdin and stderr onto /dev/null, stdout onto
 * /dev/full, so that printing to it still fails, said at exit as a closed
 * standard output. */
static void hold_std_fds(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		/* the lowest free number: fd, the ones below it being open */
		int got = open(fd == 1 ? "/dev/full" : "/dev/null", fd ? O_WRONLY : O_RDONLY);
		if (got < 0) /* a container without /dev/full */
			got = open("/dev/null", fd ? O_WRONLY : O_RDONLY);
		if (got >= 0 && got != fd) {
			dup2(got, fd);
			close(got);
		}
		if (fd == 0)
			cli_stdin_closed = 1;
		if (fd == 1)
			cli_stdout_closed = 1;
	}
}

static int finish(int status)
{
	errno = 0;
	const int flushed = fflush(stdout) == 0;
	if (flushed && !ferror(stdout))
		return status;
	/* the first failure's reason where a command kept it (a later flush
	 * may have nothing left to fail on) */
	const int err = cli_stdout_errno ? cli_stdout_errno : !flushed ? errno : 0;
	if (cli_stdout_closed) {
		fprintf(stderr, "strata: error: standard output was closed (>&-): what the command "
				"printed is lost\n  hint: send the output to a file, or to /dev/null\n");
		return status ? status : 1;
	}
	const char *hint = err == EPIPE ? "the reader of the output stopped reading (a pipe "
					  "closed early)"
			   : err == ENOSPC || err == EDQUOT || err == EFBIG
				   ? "free space where the output goes, or send it elsewhere"
				   : "send the output somewhere it can be written";
	fprintf(stderr,
		"strata: error: cannot write to standard output%s%s: what the command printed is "
		"incomplete\n  hint: %s\n",
		err ? ": " : "", err ? strerror(err) : "", hint);
	return status ? status : 1;
}

/* SIGBUS: a mapped input (weights, shards, a GGUF file) cut short or
 * replaced by another program while strata reads it, or a disk error under
 * the mapping. It ended the process with "Bus error" and nothing said. Said
 * here (write(2) only: a signal handler), then the default action, so the
 * status still tells the shell what ended it. What a command had saved is
 * whole: every file is written to a temporary name and renamed. */
static void on_sigbus(int sig)
{
	static const char msg[] =
		"strata: error: a file strata had mapped was cut short or changed by another "
		"program while being read (SIGBUS), or the disk under it failed\n"
		"  hint: leave the command's input files alone while it runs (a copy that is "
		"still being written, a checkpoint being replaced), then run it again\n";
	const ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
	(void)w;
	signal(sig, SIG_DFL);
	raise(sig);
}

int main(int argc, char **argv)
{
	hold_std_fds();
	if (argc < 2) { /* a mistake, said where errors go */
		usage(stderr);
		return 2;
	}
	signal(SIGBUS, on_sigbus);
	const int help = !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
			 !strcmp(argv[1], "help");
	const int version = !strcmp(argv[1], "--version") || !strcmp(argv[1], "version");
	if ((help || version) && argc > 2) {
		fprintf(stderr, "strata: error: unexpected argument '%s' after %s\n  hint: `strata "
				"COMMAND --help` lists a command's options\n",
			argv[2], argv[1]);
		return 2;
	}
	if (help) {
		usage(stdout);
		return finish(0);
	}
	if (version) {
		printf("strata %s (CUDA: %s)\n", STRATA_VERSION, ST_CUDA_BUILD);
		const char *impl;
		const int bf16 = session_cpu_bf16(&impl);
		if (bf16 && ops_bf16_amx(impl))
			printf("bf16 matmuls (--matmul-precision bf16): yes, on this CPU (oneDNN %s)\n",
			       impl);
		else if (bf16)
			printf("bf16 matmuls (--matmul-precision bf16): they run, without AMX (oneDNN "
			       "%s: AVX512-BF16 dot products, which ran at about half the fp32 matmul's "
			       "rate on a Xeon with AMX hidden; bench/train measures this CPU)\n",
			       impl);
		else
			printf("bf16 matmuls (--matmul-precision bf16): not on this CPU (no AMX or "
			       "AVX512-BF16 that oneDNN uses; its bf16 matmul here: %s)\n",
			       impl);
		return finish(0);
	}
	/* A file-size limit (ulimit -f) kills a process with SIGXFSZ at the
	 * write that passes it: exit 153 and not a word. Ignored, that write
	 * fails with EFBIG, and the path that made it says which file (every
	 * command: train, prepare, init and import write the large files, and
	 * eval and sample write to a redirected stdout). */
	signal(SIGXFSZ, SIG_IGN);
	const char *cmd = argv[1];
	struct {
		const char *name;
		int (*fn)(int, char **);
	} cmds[] = {{"init", cmd_init},   {"prepare", cmd_prepare}, {"train", cmd_train},
		    {"eval", cmd_eval},   {"sample", cmd_sample}, {"import", cmd_import}, {"plan", cmd_plan}};
	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
		if (!strcmp(cmd, cmds[i].name))
			return finish(cmds[i].fn(argc - 2, argv + 2) == 0 ? 0 : st_log_exit_status());
	/* worded as every other error, so a script that looks for "error:"
	 * finds it; an option before the command (`strata --out x init`) is
	 * the likely slip, and said */
	const char *near = NULL;
	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0] && !near; i++)
		if (st_is_near(cmd, cmds[i].name))
			near = cmds[i].name;
	fprintf(stderr, "strata: error: unknown command '%s'\n  hint: %s%s%s\n\n", cmd,
		near ? "did you mean " : "", near ? near : "",
		near ? "? the commands are listed below"
		: cmd[0] == '-' ? "the command comes first: strata COMMAND [--option value ...]"
				: "the commands are listed below");
	usage(stderr);
	return 2;
}
