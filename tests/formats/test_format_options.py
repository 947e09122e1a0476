"""Each format's reader and writer options are typed classes: from_dict refuses unknown keys (a
reader option given to a writer too), to_dict round-trips, and the sink hands writers their own."""
from __future__ import annotations

from pathlib import Path

import pytest

import shardkit
from shardkit.errors import UnknownOptionError
from shardkit.formats import format_names, get_format
from shardkit.formats.base import FormatOptions


@pytest.mark.parametrize("name", format_names())
def test_writer_options_are_typed_and_refuse_unknown_keys(name: str) -> None:
    fmt = get_format(name)
    assert issubclass(fmt.writer_options, FormatOptions)
    options = fmt.writer_options.from_dict({}, f"{name} writer options")
    assert fmt.writer_options.from_dict(options.to_dict(), "again") == options
    with pytest.raises(UnknownOptionError, match=rf"^{name} writer options: unknown option 'chunk_bytes'"):
        fmt.writer_options.from_dict({"chunk_bytes": 1 << 20}, f"{name} writer options")
    for reader_only in fmt.reader_options.names():           # e.g. readahead: a reader's, not a writer's
        with pytest.raises(UnknownOptionError):
            fmt.writer_options.from_dict({reader_only: True}, "x")


@pytest.mark.parametrize("name", format_names())
def test_the_sink_gives_writers_writer_options(name: str, image_tree: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    fmt = get_format(name)
    given = []
    original = type(fmt).open_writer

    def recording(self, path, schema, options, dataset_id=""):  # type: ignore[no-untyped-def]
        given.append(options)
        return original(self, path, schema, options, dataset_id)

    monkeypatch.setattr(type(fmt), "open_writer", recording)
    shardkit.convert(str(image_tree), str(tmp_path / "out"), format=name, samples_per_shard=60, workers=1,
                     quiet=True)
    assert len(given) == 2 and all(type(options) is fmt.writer_options for options in given)
    # the manifest records the reader's options only
    assert set(shardkit.open_dataset(tmp_path / "out").manifest.format_options) <= set(fmt.reader_options.names())
