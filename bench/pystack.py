"""shapetrace bench: what Python call sites cost. Calls cudaMemcpyAsync of the libcudart it is
given through ctypes, N times, from a stack of 20 Python frames, two ways in alternating batches
of the same process (as bench/overhead.c does): through the address the library's handle gives
(the preload's wrapper, when it is loaded) and direct (the library's own function, looked up with
libc's dlsym past the preload's hook), both through one ctypes prototype. Prints
  pycopy NS         the bound calls' wall time a call
  pycopy_cpu NS     their mean in this thread's CPU time over the whole run, first batch included
  pycopy_direct_cpu NS  the same for the direct calls
  pycopy_added NS   pycopy_cpu less pycopy_direct_cpu: what the preload added a call
  pycopy_added_pairs NS  the median over the batch pairs after the first of the same difference
                    (each pair run back to back: steadier where the machine's speed drifts
                    within the process; stores of the first calls and page faults left out)
Run it untraced and traced with --stacks native and python: the differences are shapetrace's.
Usage: pystack.py LIBCUDART N"""
import ctypes
import sys
import time

cudart = ctypes.CDLL(sys.argv[1])
N = int(sys.argv[2])
DEPTH = 20  # Python frames at the call: <module>, 18 x nest, loop
BATCHES = 10

proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                         ctypes.c_int, ctypes.c_void_p)
bound = proto(ctypes.cast(cudart.cudaMemcpyAsync, ctypes.c_void_p).value)
libc = ctypes.CDLL(None)
libc.dlvsym.restype = ctypes.c_void_p
libc.dlvsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
real_dlsym = libc.dlvsym(None, b"dlsym", b"GLIBC_2.34") or libc.dlvsym(None, b"dlsym",
                                                                         b"GLIBC_2.2.5")
real_dlsym = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(real_dlsym)
direct = proto(real_dlsym(cudart._handle, b"cudaMemcpyAsync"))

dev = ctypes.c_void_p()
assert cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(4096)) == 0
host = ctypes.create_string_buffer(64)


def loop(f, n):
    t, c = time.perf_counter_ns(), time.thread_time_ns()
    for _ in range(n):
        f(dev, host, 64, 1, None)
    return time.perf_counter_ns() - t, time.thread_time_ns() - c


def nest(depth, f, n):
    return loop(f, n) if depth == 0 else nest(depth - 1, f, n)


# nest(DEPTH - 3) is 18 frames of nest; with <module> and loop, DEPTH. The first batch of each
# way warms up (stacks and code objects are stored once) and counts in the whole-run means.
per = max(N // BATCHES, 1)
ways = {"bound": bound, "direct": direct}
wall = dict.fromkeys(ways, 0)
cpu = dict.fromkeys(ways, 0)
calls = dict.fromkeys(ways, 0)
pairs = []  # each batch pair after the first: bound less direct, CPU ns a call
for b in range(BATCHES + 1):
    here = {}
    for k in (("bound", "direct") if b % 2 else ("direct", "bound")):
        w, c = nest(DEPTH - 3, ways[k], per)
        wall[k] += w
        cpu[k] += c
        calls[k] += per
        here[k] = c / per
    if b:
        pairs.append(here["bound"] - here["direct"])
print("pycopy %.1f" % (wall["bound"] / calls["bound"]))
print("pycopy_cpu %.1f" % (cpu["bound"] / calls["bound"]))
print("pycopy_direct_cpu %.1f" % (cpu["direct"] / calls["direct"]))
print("pycopy_added %.1f" % ((cpu["bound"] - cpu["direct"]) / calls["bound"]))
pairs.sort()
print("pycopy_added_pairs %.1f" % ((pairs[(len(pairs) - 1) // 2] + pairs[len(pairs) // 2]) / 2))
