/* Stopping a training run cleanly on SIGINT (Ctrl-C), SIGTERM (a job
 * scheduler's preemption) or SIGHUP (the terminal it was started from
 * closed).
 *
 * interrupt_catch blocks the three signals in the calling thread, so in every
 * thread created after it (call it before the run starts any), and starts a
 * watcher thread that takes them with sigwait: no handler runs inside a
 * worker, and no system call anywhere sees EINTR. The first signal is only
 * recorded (the trainer finishes its step, saves a checkpoint and stops,
 * and the CLI then ends the process by that signal); a second one ends the
 * process at once, by the signal, which loses nothing saved (checkpoints
 * are written to a temp directory and renamed). The same signal again
 * within half a second is the first one delivered twice, not a second.
 * SIGPIPE is ignored: a run whose output's reader went away goes on.
 * A signal the process started with ignored (SIG_IGN) is left alone. */
#ifndef ST_INTERRUPT_H
#define ST_INTERRUPT_H

int interrupt_catch(void);
/* The training loop has begun: a signal from now on is said to wait for
 * the step in progress and its checkpoint (before, for the setup's end). */
void interrupt_training(void);
/* 0, or the first signal received (SIGINT, SIGTERM or SIGHUP) */
int interrupt_signal(void);
/* "SIGINT", "SIGTERM" or "SIGHUP" */
const char *interrupt_name(int sig);
/* After a run stopped by sig has saved and closed: end the process by sig
 * itself (stdio flushed), so that a shell loop running strata stops too;
 * bash goes on with a script's next command when a child merely exits 130. */
void interrupt_reraise(int sig);

#endif
