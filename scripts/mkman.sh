#!/bin/sh
# shapetrace: the man page, made at build time from the command's own --help texts, so that the
# two cannot disagree. Usage: mkman.sh BUILT_SHAPETRACE > shapetrace.1
set -eu
tool=$1
# roff: a backslash is \e, and a line may not start with a control character.
roff() { sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"; }
version=$("$tool" --version)
cat <<HEAD
.TH SHAPETRACE 1 "" "$version" "User Commands"
.SH NAME
shapetrace \- a debugger for distributed GPU inference: trace NCCL and CUDA copies, find where shapes diverge
.SH SYNOPSIS
.nf
HEAD
"$tool" --help | roff
echo ".fi"
echo ".SH VERSION"
echo "$version" | roff
echo ".SH COMMANDS"
for cmd in $("$tool" --help | awk '/^  [a-z]+ / && $1 != "shapetrace" {print $1}'); do
    echo ".SS $cmd"
    echo ".nf"
    "$tool" help "$cmd" | roff
    echo ".fi"
done
cat <<'TAIL'
.SH FILES
Traces are written to the run directory, one \fIhost\fR-\fIpid\fR.shptrace file per process,
and the names of their native frames, when the job ends, to \fIhost\fR.symbols.
.SH SEE ALSO
The README of the shapetrace sources: tracing a real job, what analyze says, the pictures, the
trace file and the output contracts.
TAIL
