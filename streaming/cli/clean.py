"""Remove what dead jobs left behind; safe while other jobs run.

- Node-coordination state (the per-dataset directories under /dev/shm or STREAMING_SHM_DIR,
  and the staging directories of leaders that died while making one) whose processes have all
  exited: removed with the same liveness check datasets use.
- Partial downloads in the given cache directories: ``*.partial`` files (and their ``.json``
  journals) that no process holds locked, and temporary ``.*.tmp`` files, older than
  --older-than seconds. A running download holds its partial file locked and keeps writing
  its temporary file, so neither is touched.

For example:
  streaming clean --dry-run --cache /tmp/cache    # list what would go
  streaming clean --cache /tmp/cache --older-than 3600
"""

from __future__ import annotations

import argparse
import os
import time

from streaming.cli.common import emit, human_bytes

HELP = 'remove stale coordination state and partial downloads of dead jobs'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--cache', action='append', default=[], metavar='DIR',
                        help='a local cache directory to clean of partial downloads (repeatable)')
    parser.add_argument('--shm-dir', help='where coordination state lives (default: /dev/shm, '
                        'or STREAMING_SHM_DIR)')
    parser.add_argument('--older-than', type=float, default=3600,
                        help='only remove partial files untouched this many seconds '
                        '(default 3600)')
    parser.add_argument('--dry-run', action='store_true',
                        help='list the coordination directories and partial files that would '
                        'go; remove nothing')


def stale_partials(cache: str, older_than: float) -> list[str]:
    """Abandoned partial-download files under ``cache``."""
    from streaming.coord.lock import is_locked
    from streaming.fileio import TEMP_SUFFIX
    if not os.path.isdir(cache):
        raise FileNotFoundError(f'No such directory: {cache}')
    now = time.time()
    found = []
    for root, _, names in os.walk(cache):
        for name in names:
            path = os.path.join(root, name)
            partial = name.endswith('.partial')
            temp = name.startswith('.') and name.endswith(TEMP_SUFFIX)
            if not (partial or temp):
                continue
            try:
                age = now - os.stat(path).st_mtime
            except FileNotFoundError:
                continue
            if age < older_than or (partial and is_locked(path)):
                continue
            found.append(path)
            if partial and os.path.exists(path + '.json'):
                found.append(path + '.json')
    return found


def _dir_bytes(path: str) -> int:
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total


def run(args: argparse.Namespace) -> int:
    from streaming.coord import find_stale, sweep_stale
    base = args.shm_dir or None
    if base is not None and not os.path.isdir(base):
        raise FileNotFoundError(f'No such directory: {base}')
    for cache in args.cache:  # Every argument checked before anything is removed.
        if not os.path.isdir(cache):
            raise FileNotFoundError(f'No such directory: {cache}')
    state = find_stale(base)
    state_bytes = sum(_dir_bytes(path) for path in state)
    if not args.dry_run:
        state = sweep_stale(base)  # Checks each again: a job may have started meanwhile.
    partials = []
    for cache in args.cache:
        partials += stale_partials(cache, args.older_than)
    freed = 0
    for path in partials:
        try:
            freed += os.path.getsize(path)
            if not args.dry_run:
                os.remove(path)
        except FileNotFoundError:
            pass
    verb = 'would remove' if args.dry_run else 'removed'
    lines = [f'{verb} {len(state)} stale coordination director{"y" if len(state) == 1 else "ies"}'
             f' of dead jobs, {human_bytes(state_bytes)}']
    lines += [f'  {p}' for p in state]
    lines.append(f'{verb} {len(partials)} partial download file(s), {human_bytes(freed)}')
    lines += [f'  {p}' for p in partials]
    emit(args, {'dry_run': args.dry_run, 'coordination_dirs': state,
                'coordination_bytes': state_bytes, 'partial_files': partials, 'bytes': freed},
         '\n'.join(lines))
    return 0
