"""shapetrace tests: NCCL and cudart through Python's ctypes, from named functions several frames
deep and from two threads. Usage: ctypes_nccl.py LIBNCCL LIBCUDART

test_preload.py finds the lines of the calls in this file's text (keep each on its own line). The
threads reach the calls through a method, a generator and map() (C code between Python frames);
the main thread also makes one copy from a Python callback that libc's qsort calls, so that
native frames lie between two groups of Python frames."""
import ctypes
import sys
import threading

nccl = ctypes.CDLL(sys.argv[1])
cudart = ctypes.CDLL(sys.argv[2])
libc = ctypes.CDLL(None)


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def make_comm():
    uid = UniqueId()
    assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
    comm = ctypes.c_void_p()
    assert nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
    return comm


# NCCL forbids calls on one communicator from two threads at once (its Thread Safety page): the
# threads take turns, as a real program must (the preload counts a communicator's seq without a
# locked add on that rule, and concurrent calls here once gave two all-reduces one seq).
COMM_TURN = threading.Lock()


def reduce_layer(comm, buf, n):
    with COMM_TURN:
        assert nccl.ncclAllReduce(buf, buf, ctypes.c_size_t(n), 7, 0, comm, None) == 0


def copy_rows(dev, host, nbytes):
    assert cudart.cudaMemcpy(dev, host, ctypes.c_size_t(nbytes), 1) == 0


class Layer:
    def __init__(self, comm, dev, host):
        self.comm, self.dev, self.host = comm, dev, host

    def forward(self, step):
        copy_rows(self.dev, self.host, 256)
        reduce_layer(self.comm, self.dev, 64)
        return step


def steps(layer, n):
    yield from map(layer.forward, range(n))


def worker(comm, dev, host, n):
    layer = Layer(comm, dev, host)
    for _ in steps(layer, n):
        pass


COMPARE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                           ctypes.POINTER(ctypes.c_int))


def sort_rows(dev, host):
    copied = []

    def on_compare(a, b):
        if not copied:
            copied.append(cudart.cudaMemcpyAsync(dev, host, ctypes.c_size_t(128), 1, None))
        return a[0] - b[0]

    rows = (ctypes.c_int * 2)(2, 1)
    libc.qsort(rows, 2, ctypes.sizeof(ctypes.c_int), COMPARE(on_compare))
    assert copied == [0] and list(rows) == [1, 2]


def main():
    dev = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(4096)) == 0
    host = ctypes.create_string_buffer(4096)
    comm = make_comm()
    sort_rows(dev, host)
    threads = [threading.Thread(target=worker, args=(comm, dev, host, 10)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("ctypes ok")


main()
