/* Progress display; see progress.h. Writes to stderr so stdout stays clean
 * for results (eval numbers, samples). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "trainer/progress.h"

void progress_init(struct st_progress *p, const char *mode, long total, long start_step,
		   int interval, long eval_interval, int evals)
{
	memset(p, 0, sizeof *p);
	p->eval_interval = eval_interval;
	p->evals = evals;
	p->total = total;
	p->start_step = start_step;
	p->interval = interval > 0 ? interval : 1;
	if (!strcmp(mode, "none"))
		p->mode = PG_NONE;
	else if (!strcmp(mode, "lines"))
		p->mode = PG_LINES;
	else if (!strcmp(mode, "bar"))
		p->mode = PG_BAR;
	else
		p->mode = isatty(2) ? PG_BAR : PG_LINES;
}

/* Evaluations still to run once step's line is shown, its own included
 * (it runs after the line): at the multiples of the interval and at the
 * last step. */
static long evals_left(const struct st_progress *p, long step)
{
	if (!p->evals || step > p->total)
		return 0;
	const long ei = p->eval_interval;
	return ei > 0 ? p->total / ei - (step - 1) / ei + (p->total % ei != 0) : 1;
}

static void fmt_eta(char *buf, size_t n, double s)
{
	if (!isfinite(s) || s < 0)
		snprintf(buf, n, "?");
	else if (s < 60)
		snprintf(buf, n, "%.0fs", s);
	else if (s < 3600)
		snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
	else if (s < 100 * 3600.0)
		snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
	else if (s < 1000 * 86400.0) /* past 100 hours, days (the ints overflowed) */
		snprintf(buf, n, "%.0fd", s / 86400);
	else
		snprintf(buf, n, ">1000d");
}

void progress_step(struct st_progress *p, long step, double loss, double lr, double tokens,
		   double flops, double seconds)
{
	p->win_tokens += tokens;
	p->win_flops += flops;
	p->win_time += seconds;
	p->total_time += seconds;
	if (p->mode == PG_NONE)
		return;
	const int last = step == p->total;
	if (p->mode == PG_LINES && step % p->interval != 0 && !last && step != p->start_step + 1)
		return;
	double done = (double)(step - p->start_step);
	double eta = p->total_time / done * (double)(p->total - step) +
		     p->eval_s * (double)evals_left(p, step);
	char e[32];
	fmt_eta(e, sizeof e, eta);
	double tps = p->win_time > 0 ? p->win_tokens / p->win_time : 0;
	double gf = p->win_time > 0 ? p->win_flops / p->win_time / 1e9 : 0;
	int pct = (int)(100.0 * (double)step / (double)p->total);
	char l[32]; /* NaN: a step with no loss target */
	snprintf(l, sizeof l, isnan(loss) ? "   -  " : "%.4f", loss);
	fprintf(stderr, "%sstep %*ld/%ld %3d%% | loss %s | lr %.2e | %7.0f tok/s | %6.1f GFLOP/s | ETA %s%s",
		p->mode == PG_BAR ? "\r\033[K" : "", (int)snprintf(NULL, 0, "%ld", p->total), step,
		p->total, pct, l, lr, tps, gf, e, p->mode == PG_BAR ? "" : "\n");
	fflush(stderr);
	p->bar_open = p->mode == PG_BAR;
	p->win_tokens = p->win_flops = p->win_time = 0;
}

void progress_pause(struct st_progress *p)
{
	if (p->bar_open) {
		fputc('\n', stderr);
		p->bar_open = 0;
	}
}

void progress_eval(struct st_progress *p, long step, double loss, long n_tokens, double seconds)
{
	p->eval_s = seconds;
	progress_pause(p);
	if (p->mode != PG_NONE && !n_tokens)
		fprintf(stderr, "eval  step %ld | no loss target in the held-out windows\n", step);
	else if (p->mode != PG_NONE)
		fprintf(stderr, "eval  step %ld | val loss %.4f | val ppl %.3f | %ld tokens\n", step,
			loss, exp(loss), n_tokens);
}

void progress_done(struct st_progress *p)
{
	progress_pause(p);
}
