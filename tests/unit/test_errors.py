"""Every error class builds its one-line message from its fields, and pickles with them (errors
cross from worker processes to their parent); torch's DataLoader rebuilds one as its own class."""
from __future__ import annotations

import pickle

import pytest
from torch._utils import ExceptionWrapper

from shardkit.errors import (ConversionError, ConversionInterrupted, CorruptSampleError, CorruptShardError,
                             DestinationExistsError, EmptySourceError, ForeignShardError, LockedError, ManifestError,
                             NotADatasetError, SampleError, ShardkitError, SourceError, UnknownOptionError,
                             UsageError)
from shardkit.integrity import NotAShardFile, WrongSize

# (error, its message, its fields): each message written out by hand, not by the code under test.
CASES = [
    (ShardkitError("went wrong"), "went wrong", {"path": None}),
    (UsageError("is a file", path="/d/x"), "/d/x: is a file", {"path": "/d/x", "problem": "is a file"}),
    (NotADatasetError("no such dataset directory", path="/d"), "/d: no such dataset directory", {}),
    (DestinationExistsError("is not empty", path="/d"), "/d: is not empty", {}),
    (UnknownOptionError("open_dataset", "verify_checksum", "verify_checksums"),
     "open_dataset: unknown option 'verify_checksum'; did you mean 'verify_checksums'?",
     {"name": "verify_checksum", "suggestion": "verify_checksums"}),
    (UnknownOptionError("convert", "zz", known=["a", "b"]), "convert: unknown option 'zz'; known: a, b", {}),
    (ManifestError("missing manifest_version", path="/d/manifest.json"),
     "/d/manifest.json: missing manifest_version", {}),
    (ManifestError("starts at index", path="m.json", shard="shards/s-1.h5", actual=7, expected=5),
     "m.json: shard shards/s-1.h5: starts at index 7, expected 5", {"actual": 7, "expected": 5}),
    (SourceError("column name 'a' appears twice in the header", path="t.csv", line=3),
     "t.csv:3: column name 'a' appears twice in the header", {"line": 3}),
    (SourceError("cannot open", path="t.csv"), "t.csv: cannot open", {"line": None}),
    (EmptySourceError("header only, no data rows", path="t.csv", line=1), "t.csv:1: header only, no data rows", {}),
    (SampleError("empty file (0 bytes)"), "empty file (0 bytes)", {"path": None}),
    (ConversionError("bad bytes (--on-error fail)", path="a/b.csv", line=9),
     "a/b.csv:9: bad bytes (--on-error fail)", {}),
    (ConversionError("cannot write (No space left on device)", path="/d/s.h5", shard=4),
     "/d/s.h5: shard 4: cannot write (No space left on device)", {"shard": 4}),
    (ConversionInterrupted("/d"),
     "/d: interrupted; finished shards are kept — run the same command with --resume to continue", {}),
    (LockedError("/d", "/d/.shardkit/lock"),
     "/d: another shardkit convert is writing here (lock /d/.shardkit/lock is held); wait for it to finish "
     "or stop it first", {"lock": "/d/.shardkit/lock"}),
    (CorruptShardError("is missing", path="/d/s.h5"), "/d/s.h5: is missing", {"shard": None}),
    (CorruptShardError("fails its sha256 check", path="/d/s.h5", shard=2), "/d/s.h5: shard 2: fails its sha256 check",
     {}),
    (CorruptShardError("holds", path="/d/s.h5", actual="3 samples", expected=4),
     "/d/s.h5: holds 3 samples, expected 4", {}),
    (ForeignShardError("/d/s.h5", 0, "abc", "def"),
     "/d/s.h5: shard 0: belongs to another dataset; the files were replaced, so open the dataset again "
     "— its dataset_id is 'abc', expected 'def'", {"actual": "'abc'", "expected": "'def'"}),
    (CorruptSampleError("/d/s.lmdb", 3, "fails its CRC32 check"), "/d/s.lmdb: sample 3: fails its CRC32 check",
     {"index": 3}),
    (CorruptSampleError("/d/s.lmdb", 3, "bad", shard="shards/s.lmdb", global_index=13),
     "/d/s.lmdb: sample 3 (global index 13): bad", {"shard": "shards/s.lmdb", "global_index": 13}),
]


@pytest.mark.parametrize("error, message, fields", CASES, ids=[type(case[0]).__name__ for case in CASES])
def test_message_is_built_from_the_fields(error: ShardkitError, message: str, fields: dict) -> None:
    assert str(error) == error.format_message() == message
    assert "\n" not in message
    for name, value in fields.items():
        assert getattr(error, name) == value


@pytest.mark.parametrize("error, message, fields", CASES, ids=[type(case[0]).__name__ for case in CASES])
def test_pickling_keeps_class_fields_and_message(error: ShardkitError, message: str, fields: dict) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert vars(copy) == vars(error)
    assert str(copy) == message
    assert copy.exit_code == error.exit_code


@pytest.mark.parametrize("error, message, fields", CASES, ids=[type(case[0]).__name__ for case in CASES])
def test_torch_rebuilds_a_worker_error_as_its_own_class(error: ShardkitError, message: str, fields: dict) -> None:
    """A DataLoader worker's exception reaches the main process through torch's ExceptionWrapper,
    which keeps its class and its text (the worker's traceback), not its fields."""
    try:
        raise error
    except ShardkitError:
        wrapped = ExceptionWrapper(where="in DataLoader worker process 1")
    with pytest.raises(type(error)) as caught:
        wrapped.reraise()
    rebuilt = caught.value
    assert type(rebuilt) is type(error) and rebuilt.exit_code == error.exit_code
    assert "Caught" in str(rebuilt) and "in DataLoader worker process 1" in str(rebuilt)
    assert str(rebuilt).rstrip().endswith(message)
    assert rebuilt.message == rebuilt.after_file() == str(rebuilt) == str(pickle.loads(pickle.dumps(rebuilt)))
    assert not any(getattr(rebuilt, name) for name in fields if name != "problem")     # torch keeps no fields
    with pytest.raises(TypeError, match="takes no other argument"):
        type(error)(message="text", path="/d")


def test_fields_set_after_raising_show_in_the_message_and_survive_pickling() -> None:
    """The dataset adds the shard and global index to an error a format raised."""
    error = CorruptSampleError("/d/s.pt", 1, "compressed payload does not inflate")
    error.shard, error.global_index = "shards/s.pt", 41
    assert str(pickle.loads(pickle.dumps(error))) == "/d/s.pt: sample 1 (global index 41): compressed payload does " \
                                                     "not inflate"


def test_after_file_leaves_out_only_the_file() -> None:
    assert CorruptShardError("bad", path="/d/s.h5", shard=2).after_file() == "shard 2: bad"
    assert SourceError("bad", path="a.csv", line=2).after_file() == "bad"
    assert UsageError("bad").after_file() == "bad"
    counted = CorruptShardError("holds", path="p", actual="3 samples", expected=4)
    assert counted.after_file() == "holds 3 samples, expected 4"


def test_exit_codes_and_builtin_bases() -> None:
    assert UsageError("x").exit_code == 2 and isinstance(UsageError("x"), ValueError)
    assert ConversionInterrupted("/d").exit_code == 130
    assert isinstance(CorruptSampleError("p", 0, "x"), OSError)
    assert isinstance(UnknownOptionError("f", "a"), TypeError)


def test_shard_file_problems_keep_file_and_problem_apart() -> None:
    error = WrongSize("/d/s.h5", 10, 12)
    assert str(error) == "/d/s.h5: has 10 bytes, expected 12" and error.problem == "has 10 bytes, expected 12"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.path, copy.size, copy.expected, str(copy)) == ("/d/s.h5", 10, 12, str(error))
    assert str(pickle.loads(pickle.dumps(NotAShardFile("/d/x", "is a symbolic link")))) == "/d/x: is a symbolic link"
