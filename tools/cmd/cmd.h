/* shapetrace tools: the subcommands and what they share. */
#ifndef SHAPETRACE_CMD_H
#define SHAPETRACE_CMD_H

/* Exit statuses of the tools (the README lists them). */
#define SHP_EXIT_OK 0
#define SHP_EXIT_FINDINGS 1
#define SHP_EXIT_USAGE 2        /* bad usage, unreadable or foreign input */
#define SHP_EXIT_RUN_FAILED 125 /* `run` could not start the command's environment */

int shp_cmd_run(int argc, char **argv);
int shp_cmd_dump(int argc, char **argv);
int shp_cmd_attach(int argc, char **argv);
int shp_cmd_status(int argc, char **argv);
int shp_cmd_analyze(int argc, char **argv);
int shp_cmd_export(int argc, char **argv);
int shp_cmd_report(int argc, char **argv);

#endif
