/* SIGINT / SIGTERM / SIGHUP: see interrupt.h. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "trainer/interrupt.h"
#include "util/check.h"

static atomic_int first_signal;
/* when the first signal came (CLOCK_MONOTONIC), for telling a second signal
 * from the first one delivered twice */
static struct timespec first_at;
static atomic_int training; /* the loop has begun: a signal waits for its step */
static sigset_t caught;

const char *interrupt_name(int sig)
{
	return sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM";
}

/* End the process by sig's default action, from the calling thread. */
static void die_by(int sig)
{
	sigset_t one;
	sigemptyset(&one);
	sigaddset(&one, sig);
	signal(sig, SIG_DFL);
	pthread_sigmask(SIG_UNBLOCK, &one, NULL);
	raise(sig);
	_exit(128 + sig); /* not reached */
}

/* One signal often arrives twice within microseconds: timeout(1) sends it
 * to the process and then to its process group, and a closed terminal's
 * SIGHUP comes from the kernel to the foreground group and again from the
 * shell to its jobs. Taken as "send it again", it quit the run with nothing
 * saved (5 of 8 `timeout -s TERM` runs). The same signal within this long of
 * the first is that first one; a person's second Ctrl-C comes later. */
#define REPEAT_WINDOW_S 0.5

static double since_first(void)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - first_at.tv_sec) + 1e-9 * (double)(now.tv_nsec - first_at.tv_nsec);
}

static void *watch(void *arg)
{
	(void)arg;
	for (;;) {
		int sig;
		if (sigwait(&caught, &sig) != 0)
			continue;
		int none = 0;
		if (sig == atomic_load(&first_signal) && since_first() < REPEAT_WINDOW_S) {
			/* the first signal, delivered again */
			dprintf(STDERR_FILENO, "strata: %s again at once: taken as the first (send it "
				"again later to quit at once)\n",
				interrupt_name(sig));
			continue;
		}
		if (atomic_load(&first_signal) == 0)
			clock_gettime(CLOCK_MONOTONIC, &first_at); /* only this thread writes it */
		if (atomic_compare_exchange_strong(&first_signal, &none, sig)) {
			if (atomic_load(&training))
				dprintf(STDERR_FILENO,
					"\nstrata: %s: stopping after the current step and saving a "
					"checkpoint (send it again to quit at once)\n",
					interrupt_name(sig));
			else
				dprintf(STDERR_FILENO,
					"\nstrata: %s: stopping before the first step, with nothing "
					"trained to save (send it again to quit at once)\n",
					interrupt_name(sig));
			continue;
		}
		dprintf(STDERR_FILENO,
			"\nstrata: %s, a second signal: quitting now; the checkpoints already saved "
			"are intact\n",
			interrupt_name(sig));
		/* The one exit outside the CLI (STYLE.md): asked twice, the user
		 * wants the process gone now, whatever the other threads hold, and
		 * every checkpoint is crash-safe. It dies by the signal, as the
		 * shell expects of a process it interrupted. */
		die_by(sig);
	}
	return NULL;
}

int interrupt_catch(void)
{
	/* a signal the process was started ignoring stays ignored (a shell
	 * script's background job ignores SIGINT: Ctrl-C at the terminal is
	 * not meant for it) */
	sigemptyset(&caught);
	/* SIGHUP: the terminal a run was started from closed (an ssh session
	 * dropped); it killed the run with nothing saved since its last
	 * checkpoint */
	const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
	for (int i = 0; i < 3; i++) {
		struct sigaction old;
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
			sigaddset(&caught, sigs[i]);
	}
	/* SIGPIPE: the reader of the run's output went away (`strata train |
	 * tee log`, and tee ended by a closed terminal); its default action
	 * killed the run at its next line with nothing saved. Ignored, the
	 * lost lines are lost and the run goes on, saving its checkpoints and
	 * metrics.jsonl, as under nohup (a closed terminal's SIGHUP, when it
	 * reaches the run, still saves and stops it). */
	signal(SIGPIPE, SIG_IGN);
	ST_CHECK(pthread_sigmask(SIG_BLOCK, &caught, NULL) == 0, NULL,
		 "cannot block SIGINT, SIGTERM and SIGHUP");
	pthread_t th;
	if (pthread_create(&th, NULL, watch, NULL) != 0) {
		pthread_sigmask(SIG_UNBLOCK, &caught, NULL); /* Ctrl-C must still work */
		ST_ERROR(NULL, "cannot start the signal watcher thread");
		return ST_FAIL;
	}
	pthread_detach(th);
	return ST_OK;
}

void interrupt_training(void)
{
	atomic_store(&training, 1);
}

int interrupt_signal(void)
{
	return atomic_load(&first_signal);
}

void interrupt_reraise(int sig)
{
	fflush(NULL);
	die_by(sig);
}
