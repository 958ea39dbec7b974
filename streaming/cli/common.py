"""What the subcommands share: one-line errors, output, progress bars.

The dataset directories they read are ``streaming.dataset_dir``'s.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Iterable

__all__ = ['CLIError', 'emit', 'has_source_files', 'human_bytes', 'progress']


class CLIError(Exception):
    """A problem the command reports as one line (exit code 1)."""


def has_source_files(url: str) -> bool:
    """Whether ``url`` holds data files of a source format (Parquet, JSONL, ...)."""
    from streaming.sources.sidecar import list_sources
    try:
        list_sources(url, None)
    except (ValueError, FileNotFoundError):
        return False
    return True


def show_progress(args: Any) -> bool:
    """Whether to draw bars: stderr is a terminal (or STREAMING_PROGRESS=1), no --no-progress."""
    wanted = sys.stderr.isatty() or os.environ.get('STREAMING_PROGRESS') == '1'
    return wanted and not getattr(args, 'no_progress', False)


def progress(args: Any, iterable: Iterable | None = None, total: int | None = None,
             desc: str = '', unit: str = 'it') -> Any:
    """A tqdm bar on stderr when ``show_progress(args)``."""
    from tqdm import tqdm
    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr,
                disable=not show_progress(args), leave=False)


def emit(args: Any, data: Any, text: str) -> None:
    """Print ``data`` as JSON with ``--json``, else the human-readable ``text``."""
    if getattr(args, 'json', False):
        print(json.dumps(data, indent=2, sort_keys=False, default=str))
    else:
        print(text)


def human_bytes(n: float) -> str:
    for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB'):
        if abs(n) < 1024 or unit == 'TiB':
            return f'{n:.0f} {unit}' if unit == 'B' else f'{n:.1f} {unit}'
        n /= 1024
    return f'{n} B'  # pragma: no cover
