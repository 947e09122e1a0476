"""MkDocs hook: the site shows formats/ (kept at the repository top level, its one source) as
formats/*, and links written for GitHub (../formats/x.md, ../benchmarks/y.py) keep working.

Pages are written to read right on GitHub, where docs/a.md links formats/ as ../formats/ and
code as ../benchmarks/. On the site docs/ is the root, so each relative link is resolved in the
repository and rewritten: to the page's site path when it is in docs/ or formats/, else to the
file on GitHub.
"""
from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[2]
SITE_DIRS = {"docs": "", "formats": "formats/"}     # repository folder -> its place on the site
LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s]+)\)")


def on_files(files: Files, config: Any) -> Files:
    for path in sorted((REPO / "formats").iterdir()):
        if path.is_file() and path.suffix in (".md", ".json"):
            files.append(File.generated(config, f"formats/{path.name}", abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    repo_page = _repo_path(page.file.src_uri)
    return LINK.sub(lambda match: "](" + _site_link(match.group(1), repo_page, page.file.src_uri) + ")", markdown)


def _repo_path(src_uri: str) -> str:
    """docs/<src_uri> for a docs page, formats/<name> for a formats page."""
    return src_uri if src_uri.startswith("formats/") else f"docs/{src_uri}"


def _site_link(target: str, repo_page: str, src_uri: str) -> str:
    path, hash_, anchor = target.partition("#")
    repo_target = posixpath.normpath(posixpath.join(posixpath.dirname(repo_page), path))
    if (REPO / repo_target / "README.md").is_file():
        repo_target += "/README.md"           # a folder shows as its README on GitHub and on the site
    top, _, rest = repo_target.partition("/")
    if top in SITE_DIRS and (REPO / repo_target).is_file():
        site_target = SITE_DIRS[top] + rest
        return posixpath.relpath(site_target, posixpath.dirname(src_uri) or ".") + hash_ + anchor
    if top in SITE_DIRS and not path.endswith("/"):
        return target           # a page MkDocs itself knows (or reports as broken)
    kind = "tree" if (REPO / repo_target).is_dir() else "blob"
    return f"https://github.com/shardkit/shardkit/{kind}/main/{repo_target}" + hash_ + anchor
