"""The one way a command prints --json: the report with the version of the JSON layout first."""
from __future__ import annotations

import json
from typing import Any, Dict

import click

#: Version of every command's --json layout; raised when a key is renamed or removed (adding one is not).
JSON_VERSION = 1


def echo_json(report: Dict[str, Any]) -> None:
    """Print report as indented JSON on stdout, with a "version" key naming its layout."""
    click.echo(json.dumps({"version": JSON_VERSION, **report}, indent=2))
