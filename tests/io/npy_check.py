#!/usr/bin/env python3
"""numpy side of the .npy interop tests (tests/io/test_npy.cpp).

  npy_check.py check PATH COUNT SUM [INDEX=VALUE ...]
      Loads PATH with numpy.load and checks: dtype uint32, shape (COUNT,), the sum of
      all elements (mod 2^64) equals SUM, and each listed element has its value.
  npy_check.py make PATH DTYPE COUNT VERSION
      Writes a 1-D array of DTYPE (uint16 or uint32) whose element i is
      (i * 2654435761) mod 2^bits. VERSION "save" uses numpy.save (numpy picks the
      version); "1.0", "2.0" or "3.0" uses numpy.lib.format.write_array with it.

Exits 0 on success; otherwise prints what differs and exits 1.
"""
import sys

import numpy as np


def fail(message):
    print(f"npy_check.py: {message}")
    sys.exit(1)


def check(path, count, total, pairs):
    a = np.load(path, mmap_mode="r", allow_pickle=False)
    if a.dtype != np.dtype("<u4"):
        fail(f"{path}: dtype {a.dtype.str}, expected <u4")
    if a.shape != (count,):
        fail(f"{path}: shape {a.shape}, expected ({count},)")
    got = int(np.asarray(a, dtype=np.uint64).sum(dtype=np.uint64)) if count else 0
    if got != total:
        fail(f"{path}: sum {got}, expected {total}")
    for pair in pairs:
        index, value = (int(x) for x in pair.split("="))
        if int(a[index]) != value:
            fail(f"{path}: element {index} is {int(a[index])}, expected {value}")


def make(path, dtype, count, version):
    bits = {"uint16": 16, "uint32": 32}[dtype]
    values = (np.arange(count, dtype=np.uint64) * np.uint64(2654435761)) % np.uint64(1 << bits)
    a = values.astype(dtype)
    if version == "save":
        np.save(path, a)
        return
    major = int(version.split(".")[0])
    with open(path, "wb") as f:
        np.lib.format.write_array(f, a, version=(major, 0))


def main(argv):
    if len(argv) >= 5 and argv[1] == "check":
        check(argv[2], int(argv[3]), int(argv[4]), argv[5:])
    elif len(argv) == 6 and argv[1] == "make":
        make(argv[2], argv[3], int(argv[4]), argv[5])
    else:
        fail(f"bad arguments {argv[1:]}; see the docstring")


if __name__ == "__main__":
    main(sys.argv)
