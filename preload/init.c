/* shapetrace preload, top layer: the once-only start, fork and exit. Everything here may run
 * inside another library's constructor, before our own. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>

#include "preload/preload.h"
#include "preload/values.h"

static void atfork_child(void)
{
    shp_config_atfork_child();
    shp_writer_atfork_child();
    shp_stacks_atfork_child();
    shp_record_atfork_child();
    shp_values_atfork_child();
    shp_log_prefix_update(-1);
}

void shp_init(void)
{
    int expect = SHP_STATE_UNINIT;
    if (atomic_compare_exchange_strong(&shp_state, &expect, SHP_STATE_INITIALIZING)) {
        /* Marked before it runs, so that a call made from inside it (or from a constructor it
         * triggers) passes straight through instead of recursing. */
        int saved = shp_own_enter();
        shp_config_load();
        shp_values_config();
        /* A warning that the application's standard error cannot take goes into the trace. */
        shp_log.divert = shp_writer_note;
        pthread_atfork(shp_writer_atfork_prepare, shp_writer_atfork_parent, atfork_child);
        shp_own_leave(saved);
        atomic_store_explicit(&shp_state, shp_cfg.refused ? SHP_STATE_OFF : SHP_STATE_ON,
                              memory_order_release);
        return;
    }
    /* Another thread is initialising: wait for it; it does not call back into us. */
    while (atomic_load_explicit(&shp_state, memory_order_acquire) == SHP_STATE_INITIALIZING)
        sched_yield();
}

void shp_call_lost(const void *caller)
{
    struct shp_file_header *h = shp_writer_header();
    if (!h || (caller && shp_called_from_library(caller)))
        return;
    __atomic_fetch_add(&h->calls_lost, 1, __ATOMIC_RELAXED);
}

__attribute__((constructor)) static void shp_constructor(void)
{
    shp_init();
}

__attribute__((destructor)) static void shp_destructor(void)
{
    shp_stacks_report();
    shp_writer_close();
}
