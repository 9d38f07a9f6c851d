/* shapetrace tests: dlsym(RTLD_NEXT) must keep its meaning under the dlsym hook. This library
 * defines shp_next_probe and asks for the next definition, which lives in libnext_b. If the hook
 * called libc's dlsym instead of jumping to it, glibc would search from the preload and not find
 * libnext_b's definition. */
#include <dlfcn.h>

int shp_next_probe(void);
int shp_next_probe(void)
{
    return 1;
}

void *next_of_probe(void);
void *next_of_probe(void)
{
    /* Not a tail call: the return address seen by dlsym must be this library's. */
    void *volatile p = dlsym(RTLD_NEXT, "shp_next_probe");
    return p;
}
