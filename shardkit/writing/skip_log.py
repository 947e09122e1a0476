"""skipped.jsonl: the inputs that could not be converted, at most MAX_PER_REASON per reason.

A table of millions of bad rows would otherwise list more bytes than its shards hold. Inputs are
grouped by the words of their reason, the values and numbers it quotes left out (reason_kind:
"column 'age': 'n/a' is not a number" and "column 'age': '?' is not a number" are one reason).
The first MAX_PER_REASON inputs of each reason are listed in sample order, one line each; then, for
each reason with more, one line says how many were left out: {"omitted": 9500, "reason": ...}.
merge rebuilds the same lines from the parts' lists (SkipLog.add_omitted), so a merged dataset
lists exactly what one run would have.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Tuple

#: Inputs listed per reason; the rest are counted on one line.
MAX_PER_REASON = 1000
#: The key of the line counting the inputs of a reason that were not listed.
OMITTED = "omitted"

_STRING = r"'(?:[^'\\]|\\.)*'" + r'|"(?:[^"\\]|\\.)*"'
_QUOTED = re.compile(rf"(column (?:{_STRING}))|{_STRING}")
_PARENTHESES = re.compile(r"\s*\([^()]*\)")
_NUMBER = re.compile(r"\b\d+\b")


def reason_kind(reason: str) -> str:
    """A reason's words: quoted values (but column names) as "…", numbers as "N", details in
    parentheses left out."""
    text = _QUOTED.sub(lambda match: match.group(1) or "…", reason)
    while True:
        shorter = _PARENTHESES.sub("", text)
        if shorter == text:
            break
        text = shorter
    return " ".join(_NUMBER.sub("N", text).split())


class SkipLog:
    """The lines of skipped.jsonl, built input by input in sample order."""

    def __init__(self, cap: int = MAX_PER_REASON) -> None:
        self.cap = cap
        self.listed: List[Dict[str, Any]] = []
        self.counts: Dict[str, int] = {}        # inputs per reason
        self._shown: Dict[str, int] = {}        # listed inputs per reason

    def add(self, entry: Dict[str, Any]) -> None:
        """The next skipped input (a Skipped.to_dict())."""
        kind = reason_kind(str(entry.get("reason", "")))
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if self.counts[kind] <= self.cap:
            self._shown[kind] = self._shown.get(kind, 0) + 1
            self.listed.append(entry)

    def add_omitted(self, kind: str, count: int) -> None:
        """`count` more inputs of reason `kind` that were left out of a list this one is built from
        (past its cap, so past this one's too)."""
        if count > 0:
            self.counts[kind] = self.counts.get(kind, 0) + count

    @property
    def total(self) -> int:
        """Every input added, listed or not."""
        return sum(self.counts.values())

    def by_reason(self) -> Dict[str, int]:
        """Inputs per reason, the commonest first (ties by name)."""
        return dict(sorted(self.counts.items(), key=lambda item: (-item[1], item[0])))

    def lines(self) -> List[Dict[str, Any]]:
        """The lines of skipped.jsonl: the listed inputs, then one count per reason that has more."""
        rest = [{OMITTED: count - self._shown.get(kind, 0), "reason": kind}
                for kind, count in sorted(self.counts.items()) if count > self._shown.get(kind, 0)]
        return self.listed + rest


def split_lines(lines: Iterable[Dict[str, Any]]) -> Tuple[List[Dict[str, Any]], Dict[str, int]]:
    """(the listed inputs, {reason: inputs left out}) of skipped.jsonl lines."""
    entries: List[Dict[str, Any]] = []
    omitted: Dict[str, int] = {}
    for line in lines:
        count = line.get(OMITTED) if isinstance(line, dict) else None
        if isinstance(count, int) and "path" not in line:
            kind = str(line.get("reason", ""))
            omitted[kind] = omitted.get(kind, 0) + count
        elif isinstance(line, dict):
            entries.append(line)
    return entries, omitted


def skip_log_of(scan: Iterable[Any], results: Iterable[Any]) -> Tuple[SkipLog, int]:
    """The SkipLog of a conversion (the scan's Skipped inputs, then each shard result's skipped
    lines, in shard order) and how many of its lines are the scan's."""
    log = SkipLog()
    for item in scan:
        log.add(item.to_dict())
    scan_lines = len(log.listed)
    for result in results:
        for line in result.skipped:
            log.add(line)
    return log, scan_lines


def merged_log(parts: List[List[Dict[str, Any]]], scan_lines: int,
               scan_counts: "Dict[str, int] | None" = None) -> SkipLog:
    """The SkipLog one run over the whole plan builds, from the skipped.jsonl lines of each of its
    parts (in part order). Each part's list starts with the scan's `scan_lines` lines, the same in
    every part; scan_counts: the scan's inputs per reason (None: those lines are all of them)."""
    log = SkipLog()
    scan, _ = split_lines(parts[0][:scan_lines]) if parts else ([], {})
    for entry in scan:
        log.add(entry)
    shown = dict(log.counts)
    scan_left_out = {kind: count - shown.get(kind, 0) for kind, count in (scan_counts or shown).items()}
    for kind, count in scan_left_out.items():
        log.add_omitted(kind, count)
    for lines in parts:
        entries, omitted = split_lines(lines[scan_lines:])
        for entry in entries:
            log.add(entry)
        for kind, count in omitted.items():
            log.add_omitted(kind, count - scan_left_out.get(kind, 0))
    return log


def describe_counts(counts: Dict[str, int], most: int = 3) -> str:
    """"2 image does not decode, 1 empty file, ..." of the commonest `most` entries of a count."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    words = [f"{count:,} {name}" for name, count in ranked[:most]]
    return ", ".join(words) + (", ..." if len(ranked) > most else "")


def describe_leftovers(skipped: int, by_reason: Dict[str, int], ignored: Dict[str, int]) -> str:
    """What a conversion left out, for its summary line: "skipped 3 (2 image does not decode, 1
    empty file; see skipped.jsonl); ignored 9,772 other files (9,607 .txt, 165 .svg)"."""
    text = f"skipped {skipped:,}"
    if skipped:
        text += f" ({describe_counts(by_reason) + '; ' if by_reason else ''}see skipped.jsonl)"
    files = sum(ignored.values())
    if files:
        text += f"; ignored {files:,} other file{'s' if files != 1 else ''} ({describe_counts(ignored)})"
    return text


__all__ = ["MAX_PER_REASON", "OMITTED", "SkipLog", "describe_counts", "describe_leftovers", "merged_log",
           "reason_kind", "skip_log_of", "split_lines"]
