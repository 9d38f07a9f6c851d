/* shapetrace tests: a target that must not notice shapetrace snapshot. It makes N ticks, each a
 * round of the blocking calls a stopped thread could be interrupted in (nanosleep, poll and read
 * on a pipe a thread feeds, a timed condition wait, a futex in pthread_join), and says so on
 * stdout if any of them failed with EINTR; it prints one line every 10 ticks and exits with
 * status 3. --spawn adds a thread that creates and joins threads all along (threads made while a
 * snapshot stops the process). --until-eof ends the ticks early, after the tick in which its
 * standard input reached its end (a thread blocked in read meanwhile), so that a test need not
 * wait out N ticks once it has done; it still waits for that end after N ticks.
 * Usage: snap_tick N [--spawn] [--until-eof] */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int pipefd[2];
static atomic_int done;

static void *feeder(void *arg)
{
    (void)arg;
    while (!atomic_load(&done)) {
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
        if (write(pipefd[1], "x", 1) != 1 && errno != EAGAIN)
            break;
    }
    return NULL;
}

static atomic_int stdin_ended;

static void *eof_waiter(void *arg)
{
    (void)arg;
    char buf[64];
    for (;;) {
        ssize_t got = read(0, buf, sizeof(buf));
        if (got < 0 && errno == EINTR)
            printf("EINTR in read of stdin\n");
        else if (got <= 0)
            break;
    }
    atomic_store(&stdin_ended, 1);
    return NULL;
}

static void *nothing(void *arg)
{
    return arg;
}

static void *spawner(void *arg)
{
    (void)arg;
    while (!atomic_load(&done)) {
        pthread_t t;
        if (pthread_create(&t, NULL, nothing, NULL) == 0)
            pthread_join(t, NULL);
    }
    return NULL;
}

static void check(const char *what, int rc)
{
    if (rc < 0 && errno == EINTR)
        printf("EINTR in %s\n", what);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100;
    bool spawn = false, until_eof = false;
    for (int i = 2; i < argc; i++) {
        spawn |= !strcmp(argv[i], "--spawn");
        until_eof |= !strcmp(argv[i], "--until-eof");
    }
    if (pipe(pipefd) != 0)
        return 1;
    pthread_t feed, sp, eof;
    pthread_create(&feed, NULL, feeder, NULL);
    if (spawn)
        pthread_create(&sp, NULL, spawner, NULL);
    if (until_eof)
        pthread_create(&eof, NULL, eof_waiter, NULL);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    printf("started\n");
    fflush(stdout);
    int i;
    for (i = 0; i < n && !atomic_load(&stdin_ended); i++) {
        struct timespec ts = {0, 3 * 1000 * 1000};
        check("nanosleep", nanosleep(&ts, NULL));
        struct pollfd pf = {.fd = pipefd[0], .events = POLLIN};
        check("poll", poll(&pf, 1, 1000));
        char c;
        check("read", (int)read(pipefd[0], &c, 1));
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 1000 * 1000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&mu);
        int rc = pthread_cond_timedwait(&cv, &mu, &until);
        pthread_mutex_unlock(&mu);
        if (rc == EINTR)
            printf("EINTR in pthread_cond_timedwait\n");
        if (i % 10 == 0) {
            printf("tick %d\n", i);
            fflush(stdout);
        }
    }
    atomic_store(&done, 1);
    pthread_join(feed, NULL);
    if (spawn)
        pthread_join(sp, NULL);
    if (until_eof)
        pthread_join(eof, NULL);
    printf("%d ticks done\n", i);
    return 3;
}
