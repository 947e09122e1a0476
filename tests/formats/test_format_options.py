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


@pytest.mark.parametrize("name", format_names())
def test_readers_are_given_typed_options(name: str, image_tree: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The dataset, verify and re-sharding hand a reader an instance of its format's reader_options
    (the manifest's, with open_dataset's keywords on top), never a dict."""
    fmt = get_format(name)
    dst, copy = tmp_path / "out", tmp_path / "copy"
    shardkit.convert(str(image_tree), str(dst), format=name, samples_per_shard=60, workers=1, quiet=True)
    given = []
    original = type(fmt).open_reader

    def recording(self, path, schema, options=None, fd=None):  # type: ignore[no-untyped-def]
        given.append(options)
        return original(self, path, schema, options, fd)

    monkeypatch.setattr(type(fmt), "open_reader", recording)
    extra = {"readahead": False} if "readahead" in fmt.reader_options.names() else {}
    with shardkit.open_dataset(dst, decode=None, **extra) as ds:
        ds[0]
    assert shardkit.verify(str(dst), mode="full", workers=1).ok
    shardkit.convert(str(dst), str(copy), format=name, workers=1, quiet=True)
    assert len(given) >= 3 and all(type(options) is fmt.reader_options for options in given)
    if extra:
        assert given[0].readahead is False and all(options.readahead is True for options in given[1:])


@pytest.mark.parametrize("edit", [{"chunk_cache": 1}, {"readahead": "yes"}])
def test_a_manifest_recording_an_option_its_format_does_not_take_is_refused(edit: dict, image_tree: Path,
                                                                            tmp_path: Path) -> None:
    """A crafted or foreign format_options is a manifest problem, named as such, not a usage error
    blamed on the caller. (Mutation: recorded_options without its from_dict check: this fails.)"""
    from shardkit.errors import ManifestError
    from tests.faults.crafting import forge_manifest
    dst = tmp_path / "out"
    shardkit.convert(str(image_tree), str(dst), format="hdf5", samples_per_shard=60, workers=1, quiet=True)
    forge_manifest(dst, lambda data: data["format_options"].update(edit))
    expected = r"manifest\.json: format_options for hdf5: (unknown option 'chunk_cache'|readahead must be bool)"
    with pytest.raises(ManifestError, match=expected):
        shardkit.open_dataset(dst)
    report = shardkit.verify(str(dst), mode="quick", workers=1)
    assert [problem.kind for problem in report.problems] == ["manifest"]
    assert "format_options" in report.problems[0].message
