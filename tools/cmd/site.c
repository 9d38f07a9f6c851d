/* shapetrace tools: --site-skip GLOB and SHAPETRACE_SITE_SKIP, the one home of their parsing for
 * every command that shows call sites (dump, analyze, export, report, snapshot). */
#include "tools/lib/site.h"

#include <errno.h>
#include <stdlib.h>

#include "include/shapetrace/env.h"
#include "tools/cmd/cmd.h"
#include "tools/lib/out.h"

int shp_cmd_site_env(struct shp_site_rule *r)
{
    const char *list = getenv(SHP_ENV_SITE_SKIP);
    int rc = shp_site_rule_add_list(r, list);
    if (rc == -ENOMEM)
        shp_err("out of memory");
    else if (rc < 0)
        shp_err("%s='%s': each comma-separated item must be a glob (GLOB, fn:GLOB or !GLOB)",
                SHP_ENV_SITE_SKIP, list);
    return rc < 0 ? -1 : 0;
}

int shp_cmd_site_skip(struct shp_site_rule *r, const char *cmd, const char *glob)
{
    int rc = shp_site_rule_add(r, glob);
    if (rc == -ENOMEM)
        shp_err("out of memory");
    else if (rc < 0)
        shp_usage_error(cmd, "--site-skip takes a glob (GLOB, fn:GLOB or !GLOB), not '%s'", glob);
    return rc < 0 ? -1 : 0;
}
