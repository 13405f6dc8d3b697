#!/usr/bin/env python3
"""A database's write pattern, for the mount benchmarks: 50 x (4 KiB pwrite + fsync) at
scattered offsets of an existing file of at least 100 MB. Usage: page_writes.py FILE"""
import os
import sys

fd = os.open(sys.argv[1], os.O_RDWR)
for i in range(50):
    os.pwrite(fd, bytes([i + 1]) * 4096, i * 1999993 % 100000000)
    os.fsync(fd)
os.close(fd)
