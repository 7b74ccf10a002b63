"""The capi scenario's Python client: PING round trips and CHECKSUMs of a
64 MiB window buffer through the hec package, printed as one line:
    ping_p50_ns N ping_p99_ns N checksum_gbs X crc C
usage: bench.py TARGET PINGS   (HEC_LIB names libhec.so)"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "host", "libhec", "python"))
import hec  # noqa: E402


def main():
    target, n = sys.argv[1], int(sys.argv[2])
    with hec.Client(target, timeout=10) as c:
        for _ in range(n // 10):
            c.ping()
        d = []
        prev = time.perf_counter_ns()
        for _ in range(n):
            c.ping()
            t = time.perf_counter_ns()
            d.append(t - prev)
            prev = t
        d.sort()
        size = 64 << 20
        with c.alloc(size) as buf:
            # The same bytes as the C and Go clients.
            pattern = bytes((i * 31 + (i >> 8)) & 0xFF for i in range(1 << 16))
            for off in range(0, size, len(pattern)):
                buf.view[off:off + len(pattern)] = pattern
            ts = []
            for _ in range(15):
                t0 = time.perf_counter()
                crc = c.checksum(buf)
                ts.append(time.perf_counter() - t0)
            ts.sort()
    print("ping_p50_ns %d ping_p99_ns %d checksum_gbs %.3f crc %08x" % (d[n // 2], d[n * 99 // 100], size / ts[7] / 1e9, crc))


main()
