"""MkDocs hook: click >= 8.3 marks "no default" with Sentinel.UNSET, which mkdocs-click (0.9) prints
as is in the generated CLI reference (mkdocs/mkdocs-click#95); show "none" instead."""
from __future__ import annotations

from typing import Any


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    return html.replace("<code>Sentinel.UNSET</code>", "<em>none</em>")
