/* shapetrace preload: run through the C preprocessor to make the linker's version script, so
 * that the exports are exactly the call list plus dlsym and the driver's cuGetProcAddress. */
#define SHP_CALLS_LIST_ONLY
#include "include/shapetrace/calls.h"
#define SHP_EXPORT(num, lib, cls, name, facts, params, args, desc) name;
{
global:
    dlsym;
    cuGetProcAddress;
    cuGetProcAddress_v2;
    SHP_CALLS(SHP_EXPORT)
local:
    *;
};
