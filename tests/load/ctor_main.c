/* shapetrace tests: main of the constructor test; the work happens in libctor's constructor. */
#include <stdio.h>

extern void *ctor_buffer;

int main(void)
{
    printf("ctor_main %s\n", ctor_buffer ? "ok" : "no buffer");
    return ctor_buffer ? 0 : 1;
}
