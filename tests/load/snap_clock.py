"""shapetrace tests: a Python target that spins in the kernel's vDSO (time.monotonic() is
clock_gettime), for snapshot's unwinding through it to the interpreter's frames. It prints
"started", spins in spin() for SECONDS (default 60), prints "done" and exits 0.
tests/test_snapshot.py finds the line below by its text. Usage: snap_clock.py [SECONDS]"""
import sys
import time


def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # the stops land here, most of them in the vDSO
        pass


def main():
    print("started", flush=True)
    spin(float(sys.argv[1]) if len(sys.argv) > 1 else 60)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
