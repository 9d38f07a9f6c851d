"""shapetrace tests: Python ranks with known frames and threads, for shapetrace snapshot, on the
NCCL double through ctypes (run by shp_launch; rank 0 hands out the unique id through
SHP_UID_FILE). tests/test_snapshot.py finds the lines below by their text: keep each call on its
own line. Every rank makes two all-reduces from its main thread; then the last rank sleeps in
warmup() while every other rank starts a thread named "reducer" whose all-reduce waits for it,
and joins that thread. When the file RELEASE exists (or after SLEEP_S seconds) the last rank
makes its all-reduce the same way and every rank finishes. Each rank also runs an idle thread
named "idler".
Usage: snap_py.py LIBNCCL LIBCUDART [SLEEP_S [RELEASE]]"""
import ctypes
import os
import sys
import threading
import time

nccl = ctypes.CDLL(sys.argv[1])
cudart = ctypes.CDLL(sys.argv[2])
SLEEP_S = float(sys.argv[3]) if len(sys.argv) > 3 else 20.0
RELEASE = sys.argv[4] if len(sys.argv) > 4 else None
RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
COUNT = 1024


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


def unique_id():
    path, uid = os.environ["SHP_UID_FILE"], UniqueId()
    if RANK == 0:
        assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
        with open(path + ".tmp", "wb") as f:
            f.write(bytes(uid.internal))
        os.rename(path + ".tmp", path)
        return uid
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        assert time.monotonic() < deadline, "no unique id"
        time.sleep(0.02)
    with open(path, "rb") as f:
        ctypes.memmove(uid.internal, f.read(128), 128)
    return uid


def say(line):
    os.write(1, (line + "\n").encode())  # one write: the ranks share the launcher's stdout


def reduce_layer(comm, buf):
    assert nccl.ncclAllReduce(buf, buf, ctypes.c_size_t(COUNT), 7, 0, comm, None) == 0


class Layer:
    def __init__(self, comm, buf):
        self.comm, self.buf = comm, buf

    def forward(self):
        reduce_layer(self.comm, self.buf)


def reducer(layer):
    return layer.forward()


def warmup(seconds):
    for _ in range(int(seconds * 100)):
        if RELEASE and os.path.exists(RELEASE):
            break
        time.sleep(0.01)


def idle(stop):
    stop.wait()


def main():
    stop = threading.Event()
    idler = threading.Thread(target=idle, args=(stop,), name="idler")
    idler.start()
    comm = ctypes.c_void_p()
    assert nccl.ncclCommInitRank(ctypes.byref(comm), WORLD, unique_id(), RANK) == 0
    buf = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(buf), ctypes.c_size_t(4 * COUNT)) == 0
    layer = Layer(comm, buf)
    for _ in range(2):
        layer.forward()
    say(f"rank {RANK}: blocking, pid {os.getpid()}")
    if RANK == WORLD - 1:
        warmup(SLEEP_S)
    worker = threading.Thread(target=reducer, args=(layer,), name="reducer")
    worker.start()
    worker.join()
    stop.set()
    idler.join()
    assert nccl.ncclCommDestroy(comm) == 0
    say(f"rank {RANK}: done")


main()
