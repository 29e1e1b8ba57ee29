/* The live progress display: one line rewritten in place on a terminal
 * ("bar"), or a line every log interval when the output is a file or pipe
 * ("lines"). Shows step, loss, lr, tokens/s, achieved GFLOP/s and the ETA:
 * the mean step time times the steps left, plus the last evaluation's time
 * times the evaluations left. */
#ifndef ST_PROGRESS_H
#define ST_PROGRESS_H

enum st_progress_mode { PG_NONE, PG_LINES, PG_BAR };

struct st_progress {
	enum st_progress_mode mode;
	long total, start_step;
	int interval;
	double t_start;            /* wall clock at the first step */
	double win_tokens, win_flops, win_time; /* since the last printed line */
	double total_time;         /* training time spent since start (no eval) */
	long eval_interval;        /* evaluations at its multiples and the last step; */
	int evals;                 /* 0: none at all (no validation data) */
	double eval_s;             /* the last evaluation's time */
	int bar_open;              /* a bar line is on screen without newline */
};

void progress_init(struct st_progress *p, const char *mode, long total, long start_step,
		   int interval, long eval_interval, int evals);
void progress_step(struct st_progress *p, long step, double loss, double lr, double tokens,
		   double flops, double seconds);
void progress_eval(struct st_progress *p, long step, double loss, long n_tokens, double seconds);
/* End a bar line before other output (checkpoint messages). */
void progress_pause(struct st_progress *p);
void progress_done(struct st_progress *p);

#endif
