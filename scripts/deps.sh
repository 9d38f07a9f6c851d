#!/bin/sh
# shapetrace: the Debian packages the build (`deps.sh build`) or the tests (`deps.sh check`) need.
# Missing ones are installed when run as root (one apt-get update, then one install); otherwise
# the one apt-get line to run is printed and the step fails, so that the build stops here
# instead of at a compiler error about a missing header. make and .ci/run call it first.
set -eu
what=${1:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NCCL_HOME=${NCCL_HOME:-$CUDA_HOME}

# libunwind8: the native call stacks load it at run time (without it they fall back to glibc).
pkgs="gcc g++ make binutils libc6-dev libdw-dev libelf-dev libjansson-dev libunwind8"
if [ "$what" = check ]; then
    # python3 runs the test suites, chromium the report's browser test, clang and its runtime
    # (libFuzzer, sanitizers) the reader's fuzz run.
    pkgs="$pkgs python3 chromium clang libclang-rt-14-dev"
fi

if command -v dpkg-query >/dev/null 2>&1; then
    missing=
    for p in $pkgs; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q ' installed$' ||
            missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "shapetrace: installing the Debian packages it needs:$missing"
            export DEBIAN_FRONTEND=noninteractive
            apt-get update -qq
            # shellcheck disable=SC2086 # one word per package
            apt-get install -y -qq --no-install-recommends $missing
        else
            echo "shapetrace: these Debian packages are missing; install them, then run make again:"
            echo "    apt-get install -y$missing"
            exit 1
        fi
    fi
else
    echo "shapetrace: not a Debian system (no dpkg-query): not checking packages; needed:" \
        "$pkgs" >&2
fi

# The CUDA runtime and NCCL headers are not Debian packages: the preload and the test doubles
# compile against the real ones (NVIDIA's cuda-cudart-dev and libnccl-dev, or a toolkit).
for h in "$CUDA_HOME/include/cuda_runtime_api.h" "$NCCL_HOME/include/nccl.h"; do
    if [ ! -f "$h" ]; then
        echo "shapetrace: $h is missing: the preload and the test doubles compile against the"
        echo "real CUDA runtime and NCCL headers. Install NVIDIA's cuda-cudart-dev and libnccl-dev"
        echo "(or the CUDA toolkit), or point CUDA_HOME / NCCL_HOME at them."
        exit 1
    fi
done
