#!/bin/sh
# shapetrace: the man page, made at build time from the command's own --help texts, so that the
# two cannot disagree, and from the manual's facts: ENVIRONMENT from the tables of
# docs/tracing.md ("Configuration"), checked against include/shapetrace/env.h (a SHAPETRACE_*
# name that one has and the other lacks stops the build), EXIT STATUS from docs/CONTRACTS.md
# ("Exit statuses").
# Usage: mkman.sh BUILT_SHAPETRACE [ENV_H TRACING_MD CONTRACTS_MD] > shapetrace.1
set -eu
tool=$1
top=$(cd "$(dirname "$0")/.." && pwd)
env_h=${2:-$top/include/shapetrace/env.h}
tracing=${3:-$top/docs/tracing.md}
contracts=${4:-$top/docs/CONTRACTS.md}

# roff: a backslash is \e, and a line may not start with a control character.
roff() { sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"; }
# Markdown to roff: the escapes above, `code` in bold, [text](link) as its text; table rows
# (| `name` | meaning | default |) as tagged paragraphs, "- " items as bullets, other lines as
# running text; the lines of a paragraph or an item are joined first, so that `code` may span
# them.
md() {
    awk '
        /^\|/ || /^- / || /^[ \t]*$/ { if (cur != "") print cur; cur = ""; if (/^\|/ || /^[ \t]*$/) { print; next } }
        { s = $0; if (cur != "") { sub(/^[ \t]+/, "", s); cur = cur " " s } else cur = s }
        END { if (cur != "") print cur }' |
        sed -e 's/\\/\\e/g' -e 's/`\([^`]*\)`/\\fB\1\\fR/g' -e 's/\[\([^]]*\)\]([^)]*)/\1/g' |
        awk '
        function text(s) { if (s ~ /^[.'\'']/) s = "\\&" s; print s }
        /^\|[-| ]*\|$/ { next }
        /^\| \\fB/ {
            n = split($0, c, / \| /)
            name = c[1]; sub(/^\| /, "", name)
            what = c[2]; dflt = (n > 2) ? c[3] : ""
            sub(/ ?\|$/, "", what); sub(/ ?\|$/, "", dflt)
            print ".TP"; text(name)
            if (dflt != "") what = what "; default: " dflt
            text(what ~ /\.$/ ? what : what ".")
            para = 0; next
        }
        /^\|/ { next }
        /^- / { print ".IP \\(bu 2"; text(substr($0, 3)); para = 1; next }
        /^[ \t]*$/ { para = 0; next }
        { s = $0; sub(/^[ \t]+/, "", s); if (!para) { print ".PP"; para = 1 } text(s) }'
}

# The environment: every SHAPETRACE_* name of env.h has its row in the tables, and no other.
names_h=$(grep -o '"SHAPETRACE_[A-Z_]*"' "$env_h" | tr -d '"' | sort -u)
rows=$(grep '^| `SHAPETRACE_[A-Z_]*` |' "$tracing" || true)
names_doc=$(printf '%s\n' "$rows" | sed -n 's/^| `\(SHAPETRACE_[A-Z_]*\)`.*/\1/p' | sort -u)
bad=0
for n in $names_h; do
    printf '%s\n' "$names_doc" | grep -qx "$n" || {
        echo "mkman.sh: $n is in $env_h but has no row in the tables of $tracing" >&2
        bad=1
    }
done
for n in $names_doc; do
    printf '%s\n' "$names_h" | grep -qx "$n" || {
        echo "mkman.sh: $tracing has a row for $n, which $env_h does not define" >&2
        bad=1
    }
done
[ "$bad" = 0 ] || exit 1
# The exit statuses: the section of CONTRACTS.md, up to the next heading.
exits=$(awk '/^## Exit statuses/ { on = 1; next } on && /^#/ { exit } on' "$contracts")
[ -n "$exits" ] || {
    echo "mkman.sh: no \"## Exit statuses\" section in $contracts" >&2
    exit 1
}

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
echo ".SH ENVIRONMENT"
echo "The preload reads its variables once, at start-up; the options of"
echo ".B shapetrace run"
echo "set them and override them."
printf '%s\n' "$rows" | md
cat <<'ENV'
.TP
\fBRANK\fR, \fBOMPI_COMM_WORLD_RANK\fR, \fBPMI_RANK\fR, \fBSLURM_PROCID\fR
a traced process's global rank, the first of them that is set (else its rank in the first
communicator it joined).
.TP
\fBNO_COLOR\fR
set: no colour in the reports of analyze and status on a terminal.
.TP
\fBDEBUGINFOD_URLS\fR
set: libdw also asks those servers for debug information when native frames are named, which
can take much longer.
ENV
echo ".SH EXIT STATUS"
printf '%s\n' "$exits" | md
cat <<'TAIL'
.SH EXAMPLES
Trace every process of a job, then read what the traces say:
.PP
.nf
.RS
shapetrace run \-\- torchrun \-\-nproc\-per\-node 8 serve.py
shapetrace run \-\- vllm serve MODEL \-\-tensor\-parallel\-size 8
shapetrace dump shapetrace\-20261202\-114501/
shapetrace analyze \-\-dim hidden=7168 \-\-dim tp=8 shapetrace\-20261202\-114501/
shapetrace report \-\-html report.html shapetrace\-20261202\-114501/
shapetrace export \-\-format perfetto \-o trace.perfetto\-trace shapetrace\-20261202\-114501/
.RE
.fi
.PP
Trace dormant, and record only while a failure is being reproduced:
.PP
.nf
.RS
shapetrace run \-\-dormant \-\-dir repro \-\- torchrun \-\-nproc\-per\-node 8 serve.py &
shapetrace status \-\-watch repro
shapetrace attach repro \-\-on \-\-mark "request 4711 starts"
shapetrace attach repro \-\-off
.RE
.fi
.PP
Fingerprint the values that must agree across ranks, then compare them:
.PP
.nf
.RS
shapetrace run \-\-values \-\- torchrun \-\-nproc\-per\-node 4 serve.py
shapetrace analyze shapetrace\-20261202\-114501/
.RE
.fi
.PP
Where each rank of a hung job is, for a job that was not started under shapetrace:
.PP
.nf
.RS
shapetrace snapshot \-\-all
shapetrace snapshot \-\-all \-o node3.json
shapetrace snapshot \-\-merge node*.json
.RE
.fi
.SH FILES
.TP
\fIRUN_DIR\fB/\fIhost\fB\-\fIpid\fB.shptrace\fR
one trace per process that called NCCL or the CUDA runtime, mode 0600 in a run directory of
mode 0700, created at the process's first call.
.TP
\fIRUN_DIR\fB/\fIhost\fB.symbols\fR
the names of the run's native frames on that host, keyed by build id: written by run when the
job ends, or by shapetrace symbols.
.TP
\fIRUN_DIR\fB/control\fR
what attach asked of the processes that have no trace yet.
.TP
\fB./shapetrace\-\fIYYYYMMDD\fB\-\fIHHMMSS\fR
the run directory run makes when \fB\-\-dir\fR is not given (the preload alone, with
\fBSHAPETRACE_DIR\fR unset: \fB./shapetrace\-trace\fR).
.TP
\fBreport.html\fR, \fBtrace.json\fR, \fBtrace.perfetto\-trace\fR
what report and export write when \fB\-\-html\fR or \fB\-o\fR is not given.
.TP
\fIPREFIX\fB/lib/libshapetrace.so\fR
the preload; run takes the one in \fB../lib\fR next to the command, else the installed one.
.SH SEE ALSO
The README of the shapetrace sources, and its manual in docs/: tracing.md (tracing a job),
values.md, snapshot.md, analyzer.md (every rule the analyzer applies), pictures.md,
examples.md, limits.md, testing.md, CONTRACTS.md (the output contracts) and HACKING.md.
TAIL
