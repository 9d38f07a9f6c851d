#!/bin/sh
# shapetrace: the dependency step. Usage: deps.sh [--install] SET...
#   build   the Debian packages the build needs, and the CUDA runtime and NCCL headers
#   check   what `make check` needs besides
#   format  what `make format` and `make format-check` need (clang-format 14)
# Without --install it only checks: a missing package is one line on stderr that names it and
# the command that gets it, and the step fails (every make target runs it this way, so that a
# build stops here, before a compiler error about a missing header). With --install (`make
# deps`, which `make demo`, `make check` and .ci/run take first) it installs the missing ones
# when run as root (one apt-get update, then one install) and says so first; as another user it
# prints that one line and fails. It never changes the system otherwise.
set -eu
install=0
if [ "${1:-}" = --install ]; then
    install=1
    shift
fi
[ $# -gt 0 ] || set -- build
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NCCL_HOME=${NCCL_HOME:-$CUDA_HOME}

pkgs=
headers=0
for set in "$@"; do
    case $set in
    build)
        # libunwind8: the native call stacks load it at run time (without it they fall back to
        # glibc's unwinder).
        pkgs="$pkgs gcc g++ make binutils libc6-dev libdw-dev libelf-dev libjansson-dev libunwind8"
        headers=1
        ;;
    check)
        # python3 runs the test suites, chromium the report's browser test, clang and its
        # runtime (libFuzzer, sanitizers) the reader's fuzz run, jq the README's commands,
        # strace the checks of what the preload and export open, util-linux's prlimit the limits
        # of the harm cases.
        pkgs="$pkgs python3 chromium clang libclang-rt-14-dev jq strace util-linux"
        ;;
    format)
        # .clang-format is read by version 14; other versions format some lines differently.
        pkgs="$pkgs clang-format-14"
        ;;
    *)
        echo "deps.sh: unknown set '$set' (build, check or format)" >&2
        exit 2
        ;;
    esac
done

sets=$(echo "$*" | sed 's/ /, /g')
if command -v dpkg-query >/dev/null 2>&1; then
    missing=
    for p in $pkgs; do
        case " $missing " in *" $p "*) continue ;; esac
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q ' installed$' ||
            missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        if [ $install = 0 ]; then
            echo "shapetrace: missing Debian packages:$missing; install them with" \
                "'apt-get install -y$missing' as root, or run 'make deps DEPS=\"$*\"' as root" >&2
            exit 1
        elif [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
            echo "shapetrace: make deps installs Debian packages as root; as root, run" \
                "'apt-get install -y$missing'" >&2
            exit 1
        fi
        echo "shapetrace: make deps ($sets): installing, as root:$missing"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        # shellcheck disable=SC2086 # one word per package
        apt-get install -y -qq --no-install-recommends $missing
    elif [ $install = 1 ]; then
        echo "shapetrace: make deps ($sets): every Debian package they need is installed"
    fi
else
    echo "shapetrace: not a Debian system (no dpkg-query): not checking packages; needed:$pkgs" >&2
fi

# The CUDA runtime and NCCL headers are not Debian packages: the preload and the test doubles
# compile against the real ones (NVIDIA's cuda-cudart-dev and libnccl-dev, or a toolkit).
if [ $headers = 1 ]; then
    for h in "$CUDA_HOME/include/cuda_runtime_api.h" "$NCCL_HOME/include/nccl.h"; do
        if [ ! -f "$h" ]; then
            echo "shapetrace: $h is missing: install NVIDIA's cuda-cudart-dev and libnccl-dev" \
                "(or the CUDA toolkit), or point CUDA_HOME / NCCL_HOME at them" >&2
            exit 1
        fi
    done
fi
