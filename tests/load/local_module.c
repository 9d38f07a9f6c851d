/* shapetrace tests: NCCL reached only through a module opened RTLD_LOCAL (torch's way).
 * Usage: local_module MODULE N */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    int (*run)(int) = (int (*)(int))dlsym(h, "mod_run");
    int rc = run ? run(atoi(argv[2])) : 5;
    printf("local_module rc %d\n", rc);
    return rc;
}
