"""Randomly damaged LMDB and PT shards: a reader raises CorruptShardError or returns records whose
CRC32 exposes the damage — never another exception, never a crash (SIGBUS/SIGSEGV).

Runs in a child process so that a crash fails the test instead of killing the test run.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """
import json, random, sys
from shardkit.errors import CorruptShardError
from shardkit.formats import get_format
from shardkit.records import Encoded
from shardkit.schema import SampleSchema

name, compression, folder, trials = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
fmt, schema = get_format(name), SampleSchema(kind="image", compression=compression)
original = f"{folder}/original{fmt.extension}"
writer = fmt.open_writer(original, schema, fmt.writer_options())
source = random.Random(1)
for index in range(30):
    writer.append(Encoded.make(bytes(source.randrange(256) for _ in range(source.randrange(0, 9000))), index % 3))
writer.close()
data = open(original, "rb").read()
rng = random.Random(7)
outcomes = {}
for trial in range(trials):
    damaged = bytearray(data)
    kind = ("flip", "truncate", "overwrite")[trial % 3]
    if kind == "flip":
        for _ in range(rng.randrange(1, 4)):
            damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        damaged = damaged[:rng.randrange(len(damaged))]
    else:
        start = rng.randrange(len(damaged))
        damaged[start:start + 64] = bytes(rng.randrange(256) for _ in range(len(damaged[start:start + 64])))
    path = f"{folder}/damaged-{trial}{fmt.extension}"
    open(path, "wb").write(bytes(damaged))
    try:
        reader = fmt.open_reader(path, schema)
    except CorruptShardError as exc:
        assert path in str(exc), exc
        outcome = "refused on open"
    else:
        found = 0
        for index in range(len(reader)):
            try:
                found += not reader.read(index).crc_ok()
            except CorruptShardError as exc:
                assert path in str(exc), exc
                found += 1
        reader.close()
        outcome = "damage found on read" if found else "damage outside the records"
    outcomes[outcome] = outcomes.get(outcome, 0) + 1
print(json.dumps(outcomes))
"""


@pytest.mark.parametrize("name", ["lmdb", "pt"])
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_damaged_shards_fail_cleanly(name: str, compression: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, name, compression, str(tmp_path), "60"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = json.loads(done.stdout)
    assert sum(outcomes.values()) == 60
    assert outcomes.get("refused on open", 0) >= 20          # every truncation at least
    assert outcomes.get("damage found on read", 0) >= 10
