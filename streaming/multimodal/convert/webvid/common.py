"""What the WebVid crawlers share: reading the CSV, durations, fetching a video."""

from __future__ import annotations

import csv
import re
from typing import Any, Iterable, Iterator

from streaming.storage.download import fetch_bytes

__all__ = ['digits_pattern', 'download', 'duration_pattern', 'each_row', 'head',
           'parse_duration']

# WebVid durations are ISO 8601 like 'PT00H00M21S'.
duration_pattern = re.compile(r'^PT\d{2}H\d{2}M\d{2}S$')
digits_pattern = re.compile(r'\d{2}')


def each_row(filename: str) -> Iterator[dict[str, str]]:
    """The CSV's rows as dicts keyed by its header."""
    with open(filename, newline='', encoding='utf-8') as f:
        yield from csv.DictReader(f)


def head(items: Iterable, limit: int) -> Iterator:
    """The first ``limit`` items (all of them if ``limit`` is negative)."""
    for i, item in enumerate(items):
        if i == limit:
            return
        yield item


def parse_duration(text: str) -> int:
    """``'PT01H02M03S'`` -> 3723 seconds; ValueError for anything else."""
    if not duration_pattern.match(text):
        raise ValueError(f'Not a WebVid duration (PThhHmmMssS): {text!r}')
    hours, minutes, seconds = map(int, digits_pattern.findall(text))
    return hours * 3600 + minutes * 60 + seconds


def download(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The row with its video fetched from ``contentUrl`` into ``content``.

    Its duration is converted to seconds. None if the video cannot be fetched (crawls skip dead
    links).
    """
    try:
        content = fetch_bytes(obj['contentUrl'], retries=1, timeout=60.0)
    except (OSError, ValueError, NotImplementedError):
        return None
    return {**obj, 'duration': parse_duration(obj['duration']), 'content': content}
