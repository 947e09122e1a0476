"""Cost of the untrusted-input checks on the read path: this checkout against a baseline
checkout (for example the commit before them), interleaved in the same run.

Each repeat runs, for each checkout in turn (order alternating), a fresh interpreter that
  open     calls open_dataset(DST) 200 times (manifest parse and checks),
  first    opens every shard once through a fresh dataset and reads its first sample (decode=None):
           the per-shard checks (regular file inside DST, HDF5 links/storage/chunks, .pt zip index),
  decode   reads every sample with decode="pil" in a fixed random order (the image allow-list).
Medians over the repeats, and the median of the per-repeat ratios candidate/baseline.

    git archive BASE | tar -x -C /tmp/base
    PYTHONPATH=. python benchmarks/security_overhead.py --baseline /tmp/base --repeats 7
    PYTHONPATH=. python benchmarks/security_overhead.py --baseline /tmp/base --samples-per-shard 0
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List

CHILD = r"""
import json, sys, time
import numpy as np
import shardkit
from shardkit.handles import HANDLES
dst = sys.argv[1]
out = {}
start = time.perf_counter()
for _ in range(200):
    shardkit.open_dataset(dst)
out["open"] = time.perf_counter() - start
ds = shardkit.open_dataset(dst, decode=None, max_open_shards=100000)
start = time.perf_counter()
for first in ds.shard_starts[:-1].tolist():
    ds[first]
out["first"] = time.perf_counter() - start
HANDLES.close_all()
ds = shardkit.open_dataset(dst, decode="pil")
order = np.random.default_rng(0).permutation(len(ds))
start = time.perf_counter()
for index in order.tolist():
    ds[index]
out["decode"] = time.perf_counter() - start
print(json.dumps(out))
"""


def run(code_dir: str, dst: str) -> Dict[str, float]:
    env = dict(os.environ, PYTHONPATH=code_dir)
    result = subprocess.run([sys.executable, "-c", CHILD, dst], env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="a checkout of the code to compare against")
    parser.add_argument("--images", type=int, default=600)
    parser.add_argument("--samples-per-shard", type=int, default=10,
                        help="0: the default shard size (%(default)s samples per shard otherwise)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--formats", default="hdf5,lmdb,pt")
    args = parser.parse_args()
    import shardkit
    from shardkit.samples import make_image_tree
    candidate = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        make_image_tree(src, num_images=args.images, seed=0)
        for fmt in args.formats.split(","):
            dst = os.path.join(tmp, fmt)
            shardkit.convert(src, dst, format=fmt, samples_per_shard=args.samples_per_shard or None, quiet=True)
            times: Dict[str, Dict[str, List[float]]] = {"baseline": {}, "candidate": {}}
            ratios: Dict[str, List[float]] = {}
            for repeat in range(args.repeats):
                order = [("baseline", args.baseline), ("candidate", candidate)]
                got = {name: run(code, dst) for name, code in (order if repeat % 2 else order[::-1])}
                for name in got:
                    for key, value in got[name].items():
                        times[name].setdefault(key, []).append(value)
                for key in got["candidate"]:
                    ratios.setdefault(key, []).append(got["candidate"][key] / got["baseline"][key])
            for key in ratios:
                print(f"{fmt:5} {key:6} baseline {statistics.median(times['baseline'][key]) * 1e3:8.1f} ms  "
                      f"candidate {statistics.median(times['candidate'][key]) * 1e3:8.1f} ms  "
                      f"ratio {statistics.median(ratios[key]):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
