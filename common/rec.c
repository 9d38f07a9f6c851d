/* shapetrace: the record-writing protocol (see rec.h and include/shapetrace/trace.h). */
#include "common/rec.h"

void shp_rec_complete(struct shp_ev *ev, int result, int device, uint64_t out, int aux0, int aux1,
                      uint64_t dur)
{
    ev->result = result;
    ev->device = device;
    ev->out = out;
    ev->aux[0] = aux0;
    ev->aux[1] = aux1;
    if (dur == SHP_DUR_PENDING)
        dur--;
    __atomic_store_n(&ev->dur, dur, __ATOMIC_RELEASE);
}
