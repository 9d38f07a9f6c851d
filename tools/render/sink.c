/* shapetrace render: the writer thread of a timeline (sink.h). Two buffers go round: the
 * drawing fills one while the thread writes the other. */
#include "tools/render/sink.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#define QUEUE 2

struct shp_sink {
    FILE *out;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct chunk {
        char *p;
        size_t len, cap;
    } q[QUEUE], spare; /* q: handed over, in order; spare: written, to be given back */
    size_t head, n;
    bool done, oom;
    int err; /* the first write error, as a positive errno */
};

static void *writer(void *arg)
{
    struct shp_sink *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->n && !s->done)
            pthread_cond_wait(&s->cond, &s->lock);
        if (!s->n)
            break;
        struct chunk c = s->q[s->head];
        pthread_mutex_unlock(&s->lock);
        bool ok = !s->err && fwrite(c.p, 1, c.len, s->out) == c.len;
        pthread_mutex_lock(&s->lock);
        if (!ok && !s->err)
            s->err = ferror(s->out) && errno ? errno : EIO;
        s->head = (s->head + 1) % QUEUE;
        s->n--;
        if (!s->spare.p) {
            c.len = 0;
            s->spare = c;
        } else {
            free(c.p);
        }
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

struct shp_sink *shp_sink_open(FILE *out)
{
    struct shp_sink *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->out = out;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    if (pthread_create(&s->thread, NULL, writer, s) != 0) {
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
        return NULL;
    }
    return s;
}

int shp_sink_put(struct shp_sink *s, char **buf, size_t len, size_t *cap)
{
    pthread_mutex_lock(&s->lock);
    while (s->n == QUEUE)
        pthread_cond_wait(&s->cond, &s->lock);
    struct chunk next = s->spare;
    s->spare = (struct chunk){0};
    if (!next.p || next.cap < SHP_SINK_CHUNK) {
        free(next.p);
        next = (struct chunk){.p = malloc(SHP_SINK_CHUNK), .cap = SHP_SINK_CHUNK};
    }
    if (!next.p) {
        s->oom = true;
        pthread_mutex_unlock(&s->lock);
        return -ENOMEM;
    }
    s->q[(s->head + s->n) % QUEUE] = (struct chunk){*buf, len, *cap};
    s->n++;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    *buf = next.p;
    *cap = next.cap;
    return 0;
}

int shp_sink_close(struct shp_sink *s)
{
    pthread_mutex_lock(&s->lock);
    s->done = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    int rc = s->err ? -s->err : s->oom ? -ENOMEM : 0;
    free(s->spare.p);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
    return rc;
}
