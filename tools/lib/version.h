/* shapetrace tools: the version every command prints (--version, the report page). */
#ifndef SHAPETRACE_VERSION_H
#define SHAPETRACE_VERSION_H

#define SHP_VERSION "0.1.0"

#endif
