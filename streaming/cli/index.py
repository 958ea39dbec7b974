"""Index a directory or prefix of Parquet, JSONL, WebDataset tar or Arrow files ahead of time.

Writes the sidecar index (_shardflow_index.<format>.json) beside the files, uploading it when
URL is remote, so that no rank or node of a training job has to read the files' metadata: they
only list the files to see that none changed. Files whose size and ETag match the sidecar
already there are not read again.

For example:
  streaming index s3://bucket/parquet-dataset
  streaming index /data/lines --format jsonl --option unit_bytes=67108864
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

from streaming.cli.common import emit
from streaming.dataset_dir import join, remote

HELP = 'write the sidecar index of a directory of Parquet/JSONL/tar/Arrow files'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from streaming.sources.registry import get_sources
    parser.add_argument('url', help='directory or prefix of the files: a local path or a URL')
    parser.add_argument('--split', help='a split (subdirectory)')
    parser.add_argument('--format', choices=get_sources(),
                        help='the files\' format (default: told by their extensions)')
    parser.add_argument('--option', action='append', default=[], metavar='NAME=VALUE',
                        help='an indexing option of the format (e.g. unit_bytes=16777216)')


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` pairs; values parsed as JSON when they are (numbers), else strings."""
    options: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition('=')
        if not sep or not name:
            raise ValueError(f'--option must be NAME=VALUE, got {pair!r}.')
        try:
            options[name] = json.loads(value)
        except ValueError:
            options[name] = value
    return options


def run(args: argparse.Namespace) -> int:
    from streaming.fileio import atomic_write
    from streaming.sources.registry import get_source
    from streaming.sources.sidecar import index_files, sidecar_name
    root = join(args.url, args.split) if args.split else args.url
    source = get_source(args.format) if args.format else None
    source, sidecar, changed, _ = index_files(root, source, parse_options(args.option))
    text = json.dumps(sidecar, separators=(',', ':'))
    target = join(root, sidecar_name(source))
    if remote(root):
        from streaming.storage import upload_file
        with tempfile.TemporaryDirectory(prefix='streaming-index-') as scratch:
            path = os.path.join(scratch, sidecar_name(source))
            atomic_write(path, text)
            upload_file(path, target)
    else:
        atomic_write(target, text)
    records = sidecar['files'].values()
    report = {'url': root, 'format': source.name, 'sidecar': target, 'files': len(records),
              'indexed': changed, 'units': sum(len(r['units']) for r in records),
              'samples': sum(u['samples'] for r in records for u in r['units'])}
    emit(args, report, f'{root}: {report["files"]} {source.name} files ({changed} read, '
                       f'{report["files"] - changed} unchanged), {report["units"]} units, '
                       f'{report["samples"]} samples; wrote {target}')
    return 0
