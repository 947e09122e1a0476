"""The one way a command prints --json: the report with the version of the JSON layout first."""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

#: Version of every command's --json layout; raised when a key is renamed or removed (adding one is not).
JSON_VERSION = 1


def echo_json(report: Dict[str, Any]) -> None:
    """Print report as indented JSON on stdout, with a "version" key naming its layout."""
    click.echo(json.dumps({"version": JSON_VERSION, **report}, indent=2))


def report_options(workers_help: str) -> Callable[[F], F]:
    """--workers N, --json and --quiet, as the commands that read a dataset in parallel take them."""
    def decorate(function: F) -> F:
        function = click.option("--quiet", "-q", is_flag=True, help="No progress bars.")(function)
        function = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")(function)
        return click.option("--workers", type=int, default=None,
                            help=f"{workers_help} [default: $SHARDKIT_WORKERS, else the CPUs this process "
                                 "may use].")(function)
    return decorate
