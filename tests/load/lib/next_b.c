/* shapetrace tests: the later definition that dlsym(RTLD_NEXT) from libnext_a must find. */
int shp_next_probe(void);
int shp_next_probe(void)
{
    return 2;
}
