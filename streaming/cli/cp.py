"""Copy a dataset between any two locations (local paths or remote URLs), verified, resumable.

Every file the index lists is downloaded from SRC, checked against its declared hash (or its
size when it has none), and uploaded to DST; index.json goes last, so an interrupted copy never
looks complete. Running the same command again skips files already at DST with the right size
(and, for a local DST, the right hash), so a copy resumes where it stopped. If SRC holds
sub-datasets (streams) instead of an index, each is copied to the same name under DST.

For example:
  streaming cp /data/my-dataset s3://bucket/my-dataset --workers 8
"""

from __future__ import annotations

import argparse
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from streaming.cli.common import emit, progress
from streaming.dataset_dir import DatasetDir, find_datasets, join, remote, shard_files
from streaming.format.index import INDEX_BASENAME

HELP = 'copy a dataset between any two locations, verified and resumable'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('src', help='source dataset (local path or remote URL)')
    parser.add_argument('dst', help='destination (local path or remote URL)')
    parser.add_argument('--workers', type=int, default=4, help='files in flight (default 4)')
    parser.add_argument('--timeout', type=float, default=60, help='seconds without data before '
                        'a transfer is retried (default 60)')


def _present(url: str, info: dict[str, Any], timeout: float) -> bool:
    """Whether ``url`` already holds this file (size, and for local paths every hash)."""
    from streaming.storage import get_backend
    from streaming.storage.download import hash_check
    try:
        size = get_backend(url).stat(url, timeout=timeout).size
    except FileNotFoundError:
        return False
    if size != info['bytes']:
        return False
    if not remote(url):
        from streaming.storage.local import local_path
        return all(hash_check(a, h)(local_path(url)) is None for a, h in info['hashes'].items())
    return True


def _copy_file(src: str, dst: str, info: dict[str, Any] | None, scratch: str,
               timeout: float) -> int:
    """Copy one file, verified; returns the bytes sent (0 when DST already had it)."""
    from streaming.storage import download_file, get_backend, upload_file
    from streaming.storage.download import hash_check
    if info is not None and _present(dst, info, timeout):
        return 0
    check = None
    if info and info['hashes']:
        algo, expected = next(iter(sorted(info['hashes'].items())))
        check = hash_check(algo, expected)
    fd, tmp = tempfile.mkstemp(dir=scratch)
    os.close(fd)
    try:
        download_file(src, tmp, timeout=timeout, size=info['bytes'] if info else None,
                      check=check)
        if not remote(dst):
            from streaming.storage.local import local_path
            os.makedirs(os.path.dirname(local_path(dst)) or '.', exist_ok=True)
        upload_file(tmp, dst)
        sent = os.path.getsize(tmp)
    finally:
        os.remove(tmp)
    if info is not None:
        size = get_backend(dst).stat(dst, timeout=timeout).size
        if size is not None and size != info['bytes']:
            raise OSError(f'{dst}: {size} bytes after upload, expected {info["bytes"]}')
    return sent


def copy_dataset(src: str, dst: str, args: Any) -> dict[str, Any]:
    from streaming.storage import get_backend
    ds = DatasetDir(src, timeout=args.timeout)
    files = []
    for entry in ds.index['shards']:
        infos = dict(shard_files(entry))
        for key, info in infos.items():
            if key.startswith('raw') and key.replace('raw', 'zip') in infos:
                # Compressed datasets often keep only the compressed file: copy what exists.
                url = join(src, info['basename'])
                try:
                    get_backend(url).stat(url, timeout=args.timeout)
                except FileNotFoundError:
                    continue
            files.append((info['basename'], info))
    ds.close()
    total = sum(info['bytes'] for _, info in files)
    sent = 0
    with tempfile.TemporaryDirectory(prefix='streaming-cp-') as scratch, \
            ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool, \
            progress(args, total=total, desc=f'Copying {src}', unit='B') as bar:
        futures = [(pool.submit(_copy_file, join(src, name), join(dst, name), info, scratch,
                                args.timeout), info) for name, info in files]
        for future, info in futures:
            sent += future.result()
            bar.update(info['bytes'])
        _copy_file(join(src, INDEX_BASENAME), join(dst, INDEX_BASENAME), None, scratch,
                   args.timeout)
    return {'src': src, 'dst': dst, 'files': len(files) + 1, 'bytes': total,
            'copied_bytes': sent}


def run(args: argparse.Namespace) -> int:
    sources = find_datasets(args.src)
    results = []
    for src in sources:
        name = src[len(args.src.rstrip('/')):].strip('/') if len(sources) > 1 else ''
        results.append(copy_dataset(src, join(args.dst, name) if name else args.dst, args))
    lines = [f'{r["src"]} -> {r["dst"]}: {r["files"]} files, {r["bytes"]} bytes '
             f'({r["copied_bytes"]} copied, the rest already there)' for r in results]
    emit(args, {'copies': results}, '\n'.join(lines))
    return 0
