"""Fashion-MNIST's IDX files for the framework benchmarks (bench/torch_compare.py,
bench/jax_compare.py)."""
import gzip
import os
import struct

import numpy as np


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    rank = data[3]
    dims = struct.unpack(">" + "I" * rank, data[4 : 4 + 4 * rank])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def find(data_dir, base):
    for name in (base + ".gz", base):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    raise SystemExit("no %s in %s" % (base, data_dir))
