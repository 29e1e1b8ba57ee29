/* Stopping a training run cleanly on SIGINT (Ctrl-C) or SIGTERM (a job
 * scheduler's preemption).
 *
 * interrupt_catch blocks both signals in the calling thread, so in every
 * thread created after it (call it before the run starts any), and starts a
 * watcher thread that takes them with sigwait: no handler runs inside a
 * worker, and no system call anywhere sees EINTR. The first signal is only
 * recorded (the trainer finishes its step, saves a checkpoint and stops); a
 * second one ends the process at once with status 128 + signal, which loses
 * nothing saved (checkpoints are written to a temp directory and renamed).
 * A signal the process started with ignored (SIG_IGN) is left alone. */
#ifndef ST_INTERRUPT_H
#define ST_INTERRUPT_H

int interrupt_catch(void);
/* 0, or the first signal received (SIGINT or SIGTERM) */
int interrupt_signal(void);

#endif
