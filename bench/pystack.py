"""shapetrace bench: what Python call sites cost. Calls cudaMemcpyAsync of the libcudart it is
given through ctypes, N times, from a stack of 20 Python frames; prints "pycopy NS" (ns a call).
Run it untraced and traced with --stacks native and python: the differences are shapetrace's.
Usage: pystack.py LIBCUDART N"""
import ctypes
import sys
import time

cudart = ctypes.CDLL(sys.argv[1])
N = int(sys.argv[2])
DEPTH = 20  # Python frames at the call: <module>, 18 x nest, loop

copy = cudart.cudaMemcpyAsync
copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
copy.restype = ctypes.c_int
dev = ctypes.c_void_p()
assert cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(4096)) == 0
host = ctypes.create_string_buffer(64)


def loop(n):
    t = time.perf_counter_ns()
    for _ in range(n):
        copy(dev, host, 64, 1, None)
    return (time.perf_counter_ns() - t) / n


def nest(depth, n):
    return loop(n) if depth == 0 else nest(depth - 1, n)


# nest(DEPTH - 3) is 18 frames of nest; with <module> and loop, DEPTH. The first round warms up
# (stacks and code objects are stored once).
nest(DEPTH - 3, N // 10)
print("pycopy %.1f" % nest(DEPTH - 3, N))
