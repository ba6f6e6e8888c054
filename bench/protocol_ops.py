"""Parrot Fig 5.2 on one mount: the latency of POSIX calls on a remote file and the
bandwidth of a cold sequential read, as a program sees them through whatever serves DIR.

Usage: python3 protocol_ops.py DIR TAG [N]
  DIR/ops/small   an existing 64 KiB file (stat, open/close, read 8 KB)
  DIR/ops/big     an existing large file, read once with 1 MiB reads (bandwidth)
  DIR/ops/w-TAG   created and removed here (write 8 KB)

Prints one line: "stat_ms open_close_ms read8k_ms write8k_ms MBps". The write figure is
(N writes + the close) / N: a remote file system may send the data at close, and the
program waits for that too; "-" where the store is read-only (HTTP). Every figure is the mean over N calls (default 200).
"""

import errno
import os
import sys
import time

KB8 = 8192


def per_call_ms(n, call):
    start = time.perf_counter()
    for i in range(n):
        call(i)
    return (time.perf_counter() - start) * 1000 / n


def write_ms(out, n):
    """(n pwrites of 8 KB + close) / n in ms, as text; "-" on a read-only store."""
    block = b"w" * KB8
    start = time.perf_counter()
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as e:
        if e.errno == errno.EROFS:
            return "-"
        raise
    for i in range(n):
        os.pwrite(fd, block, i * KB8)
    os.close(fd)
    ms = (time.perf_counter() - start) * 1000 / n
    os.unlink(out)
    return f"{ms:.3f}"


def main():
    top, tag = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    small, big = os.path.join(top, "ops/small"), os.path.join(top, "ops/big")
    size = os.stat(small).st_size

    stat = per_call_ms(n, lambda i: os.stat(small))
    open_close = per_call_ms(n, lambda i: os.close(os.open(small, os.O_RDONLY)))

    fd = os.open(small, os.O_RDONLY)
    read = per_call_ms(n, lambda i: os.pread(fd, KB8, (i * KB8) % size))
    os.close(fd)

    write = write_ms(os.path.join(top, f"ops/w-{tag}"), n)

    start, total = time.perf_counter(), 0
    fd = os.open(big, os.O_RDONLY)
    while chunk := os.read(fd, 1 << 20):
        total += len(chunk)
    os.close(fd)
    mbps = total / 1e6 / (time.perf_counter() - start)

    print(f"{stat:.3f} {open_close:.3f} {read:.3f} {write} {mbps:.0f}")


main()
