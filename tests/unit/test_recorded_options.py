"""The convert options a manifest records (source.options): what repair and --append rebuild the
plan from. Mutation caught: a URL given as a path option made into a local absolute path."""
from __future__ import annotations

import os

from shardkit.options import PlanOptions
from shardkit.writing.recorded_options import record_options


def test_paths_are_made_absolute_and_urls_kept() -> None:
    recorded = record_options(PlanOptions(samples_per_shard=4),
                              {"labels": "labels.csv", "schema_file": "s3://bucket/schema.json", "size": (8, 9)})
    assert recorded["labels"] == os.path.abspath("labels.csv")
    assert recorded["schema_file"] == "s3://bucket/schema.json"
    assert recorded["size"] == [8, 9] and recorded["samples_per_shard"] == 4
    assert "part" not in recorded and "workers" not in recorded
