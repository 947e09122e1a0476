"""Cost of formats/hdf5.py's check_self_contained on a shard open, against the same open with the
check switched off, interleaved in one process (the end-to-end security_overhead.py runs fresh
interpreters and is too noisy on a shared machine to resolve a few percent).

Prints the median open + first read of one default-size shard with and without the check, the
median of the per-pair ratios, the cost of reading one sample (decode=None), and the check's
share of opening and reading a whole shard.

    PYTHONPATH=. python benchmarks/hdf5_open_checks.py --images 600 --pairs 400
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=600)
    parser.add_argument("--pairs", type=int, default=400)
    args = parser.parse_args()
    import shardkit
    import shardkit.formats.hdf5 as hdf5
    from shardkit.manifest import load_manifest
    from shardkit.samples import make_image_tree
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "src"), os.path.join(tmp, "dst")
        make_image_tree(src, num_images=args.images, seed=0)
        shardkit.convert(src, dst, format="hdf5", quiet=True)        # the default shard size
        manifest = load_manifest(dst)
        path = os.path.join(dst, manifest.shards[0].path)
        check = hdf5.check_self_contained

        def open_and_read() -> float:
            start = time.perf_counter()
            reader = hdf5.HDF5Reader(path, manifest.schema)
            reader.read(0)
            reader.close()
            return time.perf_counter() - start

        with_check, without, ratios = [], [], []
        try:
            for _ in range(args.pairs):
                hdf5.check_self_contained = check
                on = open_and_read()
                hdf5.check_self_contained = lambda handle: None
                off = open_and_read()
                with_check.append(on)
                without.append(off)
                ratios.append(on / off)
        finally:
            hdf5.check_self_contained = check
        ds = shardkit.open_dataset(dst, decode=None)
        start = time.perf_counter()
        for index in range(len(ds)):
            ds[index]
        per_sample = (time.perf_counter() - start) / len(ds)
    on, off = statistics.median(with_check), statistics.median(without)
    whole = off + per_sample * manifest.shards[0].num_samples
    print(f"shard of {manifest.shards[0].num_samples} samples; load {os.getloadavg()[0]:.1f}")
    print(f"open + first read: with check {on * 1e3:.2f} ms, without {off * 1e3:.2f} ms, "
          f"median ratio {statistics.median(ratios):.3f}")
    print(f"one sample (decode=None): {per_sample * 1e6:.1f} us; the check is "
          f"{(on - off) / whole * 100:.1f}% of opening and reading the whole shard")
    return 0


if __name__ == "__main__":
    sys.exit(main())
