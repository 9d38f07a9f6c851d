"""shapetrace bench: N copies of one trace, each as another process (its pid changed), for the
figures of commands over many small traces (make bench). The copies are cut at the trace's
tail, so each is as small as its records.
Usage: copies.py TRACE DIR N. Writes DIR/copy-PID.shptrace for PID 1000000 to 1000000 + N - 1."""
import os
import struct
import sys

src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(src, "rb").read()
data = bytearray(data[:struct.unpack_from("<Q", data, 72)[0]])  # the header's tail
os.makedirs(out, exist_ok=True)
for i in range(n):
    struct.pack_into("<Q", data, 24, 1000000 + i)  # the header's pid
    open(os.path.join(out, "copy-%d.shptrace" % (1000000 + i)), "wb").write(data)
