#!/usr/bin/env python3
"""Makes a float32 moe-hdf5 model's weights finite but too large for float32 arithmetic (issue 63's
probe), checksums updated so that moerun loads the file as a valid model:
  overflow_weights.py MODEL_DIR lm_head ROW          rows of /lm_head set to 3e38
  overflow_weights.py MODEL_DIR expert LAYER EXPERT  one expert's w2 set to 3e38 (the tokens routed
                                                     to it overflow at that layer, others do not)
"""
import glob
import os
import sys

import h5py
import numpy as np
import xxhash

from rebind_shards import main as rebind

model, what = sys.argv[1], sys.argv[2]
if what == "lm_head":
    with h5py.File(os.path.join(model, "model.h5"), "r+") as f:
        a = f["lm_head"][...]
        a[int(sys.argv[3]), :] = 3e38
        f["lm_head"][...] = a
        f["lm_head"].attrs["xxh64"] = np.uint64(xxhash.xxh64(a.tobytes(), seed=0).intdigest())
else:
    group = f"layers/{sys.argv[3]}/experts/{sys.argv[4]}"
    for shard in sorted(glob.glob(os.path.join(model, "experts-*.h5"))):
        with h5py.File(shard, "r+") as f:
            if group not in f:
                continue
            g = f[group]
            w2 = g["w2"][...]
            w2[...] = 3e38
            g["w2"][...] = w2
            g.attrs["xxh64"] = np.uint64(xxhash.xxh64(g["w1"][...].tobytes() + g["w3"][...].tobytes() + w2.tobytes(), seed=0).intdigest())
    sys.argv = [sys.argv[0], model]
    rebind()
for cache in glob.glob(os.path.join(model, "experts-index.bin")) + glob.glob(os.path.join(model, "dense-*.bin")):
    os.remove(cache)
