/* shapetrace preload: records stored once and referred to by id (stacks, Python code objects),
 * and the stack table whose ids events carry. Native and Python stacks share that table and its
 * ids, so it sits below both of them. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>

#include "preload/preload.h"

/* Open addressing on the stack's hash (see shp_intern). */
#define STACK_SLOTS (1u << 16)
static struct shp_intern_slot *stack_tab;
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;
static _Atomic uint32_t next_stack_id;

/* 1 MiB, taken once, outside malloc: the wrappers may run inside an allocator's own calls. */
static void make_table(void)
{
    void *p = mmap(NULL, sizeof(struct shp_intern_slot) * STACK_SLOTS, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    stack_tab = p == MAP_FAILED ? NULL : p;
}

uint32_t shp_intern(struct shp_intern_slot *tab, uint32_t nslots, uint64_t h,
                    uint32_t (*store)(void *arg), void *arg)
{
    for (uint32_t i = 0; i < nslots; i++) {
        struct shp_intern_slot *s = &tab[(h + i) & (nslots - 1)];
        uint64_t cur = atomic_load_explicit(&s->hash, memory_order_acquire);
        if (cur == 0) {
            if (!atomic_compare_exchange_strong(&s->hash, &cur, h)) {
                if (cur != h)
                    continue;
                goto found;
            }
            uint32_t id = store(arg);
            /* id 0 (not stored) is published as UINT32_MAX so that waiters stop waiting. */
            atomic_store_explicit(&s->id, id ? id : UINT32_MAX, memory_order_release);
            return id;
        }
        if (cur != h)
            continue;
    found:
        for (;;) {
            uint32_t id = atomic_load_explicit(&s->id, memory_order_acquire);
            if (id)
                return id == UINT32_MAX ? 0 : id;
            sched_yield();
        }
    }
    struct shp_file_header *hdr = shp_writer_header();
    if (hdr)
        __atomic_fetch_add(&hdr->stacks_dropped, 1, __ATOMIC_RELAXED);
    return 0;
}

uint32_t shp_stack_intern(uint64_t h, uint32_t (*store)(void *arg), void *arg)
{
    pthread_once(&tab_once, make_table);
    return stack_tab ? shp_intern(stack_tab, STACK_SLOTS, h, store, arg) : 0;
}

uint32_t shp_stack_new_id(void)
{
    return atomic_fetch_add(&next_stack_id, 1) + 1;
}

void shp_stackid_atfork_child(void)
{
    if (stack_tab)
        memset(stack_tab, 0, sizeof(*stack_tab) * STACK_SLOTS);
    atomic_store(&next_stack_id, 0);
}
