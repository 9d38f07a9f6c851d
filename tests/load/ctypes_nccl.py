"""shapetrace tests: NCCL and cudart through Python's ctypes, from named functions several frames
deep and from two threads. Usage: ctypes_nccl.py LIBNCCL LIBCUDART"""
import ctypes
import sys
import threading

nccl = ctypes.CDLL(sys.argv[1])
cudart = ctypes.CDLL(sys.argv[2])


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def make_comm():
    uid = UniqueId()
    assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
    comm = ctypes.c_void_p()
    assert nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
    return comm


def reduce_layer(comm, buf, n):
    assert nccl.ncclAllReduce(buf, buf, ctypes.c_size_t(n), 7, 0, comm, None) == 0


def copy_rows(dev, host, nbytes):
    assert cudart.cudaMemcpy(dev, host, ctypes.c_size_t(nbytes), 1) == 0


def worker(comm, dev, host, n):
    for _ in range(n):
        copy_rows(dev, host, 256)
        reduce_layer(comm, dev, 64)


def main():
    dev = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(4096)) == 0
    host = ctypes.create_string_buffer(4096)
    comm = make_comm()
    threads = [threading.Thread(target=worker, args=(comm, dev, host, 10)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("ctypes ok")


main()
