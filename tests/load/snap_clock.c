/* shapetrace tests: a target whose threads spin in the kernel's vDSO, where CUDA's spin-waits
 * spend their time, for snapshot's unwinding through it. The main thread calls clock_gettime
 * (libc's wrapper calls the vDSO's) from spin_clock_gettime; a thread named "snap-tod" calls
 * gettimeofday (which glibc binds to the vDSO's function itself: no libc frame between) from
 * spin_gettimeofday. It prints "started", runs SECONDS (default 60), prints "done" and exits 0.
 * Usage: snap_clock [SECONDS] */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static atomic_int done;
static volatile long sink;

__attribute__((noinline)) static void spin_gettimeofday(void)
{
    while (!atomic_load_explicit(&done, memory_order_relaxed)) {
        struct timeval tv;
        gettimeofday(&tv, NULL);
        sink += tv.tv_usec;
    }
}

static void *tod_thread(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "snap-tod");
    spin_gettimeofday();
    return NULL;
}

__attribute__((noinline)) static void spin_clock_gettime(double seconds)
{
    struct timespec t0, ts;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        sink += ts.tv_nsec;
    } while ((double)(ts.tv_sec - t0.tv_sec) + (ts.tv_nsec - t0.tv_nsec) / 1e9 < seconds);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 60;
    pthread_t t;
    if (pthread_create(&t, NULL, tod_thread, NULL) != 0)
        return 1;
    printf("started\n");
    fflush(stdout);
    spin_clock_gettime(seconds);
    atomic_store(&done, 1);
    pthread_join(t, NULL);
    printf("done\n");
    return 0;
}
