#!/usr/bin/env python3
"""Rewrites model.h5's /expert_shards (format version 2) from the shard files next to it: the
record of which shards the dense part was written with. Tests use it to build reference models
from other models' parts on purpose (a's dense weights with b's experts), which moerun otherwise
refuses. The identity is docs/FORMATS.md's: xxh64 (seed 0) over u64 14, b"moe-hdf5 shard", then
(i64 layer, i64 expert, u64 xxh64 attribute) little-endian for each expert in (layer, expert) order.
usage: rebind_shards.py MODEL_DIR"""
import glob
import os
import struct
import sys

import h5py
import numpy as np
import xxhash


def shard_identity(path):
    entries = []
    with h5py.File(path, "r") as f:
        for ls, layer in f.get("layers", {}).items():
            for es, g in layer.get("experts", {}).items():
                entries.append((int(ls), int(es), int(g.attrs["xxh64"])))
    data = struct.pack("<Q", 14) + b"moe-hdf5 shard"
    data += b"".join(struct.pack("<qqQ", l, e, x) for l, e, x in sorted(entries))
    return xxhash.xxh64(data, seed=0).intdigest()


def main():
    model = sys.argv[1]
    ids = [shard_identity(p) for p in sorted(glob.glob(os.path.join(model, "experts-*.h5")))]
    with h5py.File(os.path.join(model, "model.h5"), "r+") as f:
        if "expert_shards" in f:
            del f["expert_shards"]
        f.create_dataset("expert_shards", data=np.array(ids, dtype="<u8"))


if __name__ == "__main__":
    main()
