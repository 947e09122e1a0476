"""An object's modification time, from the field each store reports it in, as ns since the epoch:
the stamp that identifies a remote input in the fingerprint (and so in --resume)."""
from __future__ import annotations

import datetime

import pytest

from shardkit.sources.member_trees import modified_ns

SECONDS = 1_700_000_000


@pytest.mark.parametrize("info", [
    {"LastModified": datetime.datetime.fromtimestamp(SECONDS, datetime.timezone.utc)},        # s3fs
    {"updated": "2023-11-14T22:13:20.000Z"},                                                  # gcsfs
    {"Last-Modified": "Tue, 14 Nov 2023 22:13:20 GMT"},                                       # fsspec's HTTP
    {"mtime": float(SECONDS)},                                                                # local, file://
])
def test_each_store_field_gives_the_same_time(info: dict) -> None:
    assert modified_ns(info) == SECONDS * 1_000_000_000


def test_no_time_is_zero() -> None:
    assert modified_ns({"size": 3, "Last-Modified": "not a date"}) == 0
