"""Convert jsonl, csv, parquet, images, WebDataset tars or HF datasets to MDS or JSON shards.

Inputs: a jsonl or csv file, parquet files, a directory tree of images, a set of WebDataset
``.tar`` files, or a directory written by Hugging Face ``datasets``' ``save_to_disk``. SRC may
be local (a path or a glob) or remote (any URL the storage layer supports: one object, every
object under a prefix, or a glob such as ``s3://bucket/logs/*.jsonl``); a remote SRC is first
downloaded to a temporary directory (under --scratch), which is removed afterwards.

Column encodings come from the data (the Arrow schema for parquet and Hugging Face data, the
first samples otherwise); --columns overrides some or all of them, e.g. ``--columns
image:jpeg,label:str`` (raw image bytes are stored as they are under jpeg/png). With --workers N
the source is split over N processes, each writing a sub-dataset, merged at the end
(``streaming.convert.write_parallel``). OUT may be a local directory or a remote URL.

For example:
  streaming convert data.jsonl /data/my-dataset --compression zstd --hashes xxh64
  streaming convert photos/ s3://bucket/photos --from images --columns image:jpeg --workers 4
  streaming convert gs://bucket/raw/data.parquet /data/my-dataset --workers 2
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

from streaming.cli.common import CLIError, emit, progress, show_progress
from streaming.dataset_dir import DatasetDir

HELP = 'convert jsonl/csv/parquet/images/webdataset/HF datasets to MDS or JSON shards'
KINDS = ('jsonl', 'csv', 'parquet', 'images', 'webdataset', 'hf')


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('src', help='input file, directory or glob (local path or remote URL)')
    parser.add_argument('out', help='output dataset directory (local path or remote URL)')
    parser.add_argument('--from', dest='kind', choices=KINDS,
                        help='input format (default: detected from SRC)')
    parser.add_argument('--format', default='mds', choices=('mds', 'json'),
                        help='output shard format (default mds)')
    parser.add_argument('--columns', help='encodings to use, NAME:ENCODING,... (others inferred)')
    parser.add_argument('--split', help='for a Hugging Face DatasetDict: the split to convert')
    parser.add_argument('--compression', default='zstd',
                        help="shard compression, e.g. zstd, zstd:7, gz; 'none' for none "
                        "(default zstd)")
    parser.add_argument('--hashes', default='', help='checksums to record, e.g. sha1,xxh64')
    parser.add_argument('--size-limit', default='64mb', help='shard size limit (default 64mb)')
    parser.add_argument('--workers', type=int, default=1,
                        help='processes writing in parallel (default 1)')
    parser.add_argument('--overwrite', action='store_true', help='replace a non-empty OUT')
    parser.add_argument('--scratch', help='where a remote SRC is downloaded to (a temporary '
                        'directory made there, removed afterwards; default: the system temp dir)')
    parser.add_argument('--timeout', type=float, default=60, help='seconds without data before '
                        'a download of a remote SRC is retried (default 60)')


def parse_columns(text: str | None) -> dict[str, str]:
    columns: dict[str, str] = {}
    for item in filter(None, (text or '').split(',')):
        name, sep, encoding = item.partition(':')
        if not sep or not name or not encoding:
            raise CLIError(f'--columns: {item!r} is not NAME:ENCODING.')
        columns[name.strip()] = encoding.strip()
    return columns


def _write(source: Any, args: argparse.Namespace, columns: dict[str, str],
           kwargs: dict[str, Any]) -> None:
    if args.workers > 1:
        from streaming.convert.parallel import write_parallel
        write_parallel(source, args.out, columns=columns, workers=args.workers,
                       writer=args.format, progress_bar=show_progress(args), **kwargs)
        return
    from streaming.writing import JSONWriter, MDSWriter
    cls = MDSWriter if args.format == 'mds' else JSONWriter
    with cls(out=args.out, columns=columns, **kwargs) as writer:
        for sample in progress(args, source, desc='Converting', unit='sample'):
            writer.write(sample)


def run(args: argparse.Namespace) -> int:
    from streaming.convert.remote import fetch_source, is_remote_source
    if args.workers < 1:
        raise CLIError(f'--workers must be at least 1, got {args.workers}.')
    if not is_remote_source(args.src):
        return _convert(args, args.src)
    if args.scratch is not None and not os.path.isdir(args.scratch):
        raise FileNotFoundError(f'--scratch: no such directory: {args.scratch}')
    with tempfile.TemporaryDirectory(prefix='streaming-convert-', dir=args.scratch) as scratch:
        local, root = fetch_source(args.src, scratch, timeout=args.timeout,
                                   progress_bar=show_progress(args))
        try:
            return _convert(args, local)
        except (OSError, ValueError, RuntimeError) as error:
            # Name the remote object, not its temporary copy.
            raise CLIError(str(error).replace(local, root).replace(scratch, root)) from error


def _convert(args: argparse.Namespace, src: str) -> int:
    """Convert the local ``src`` (``args.src`` itself, or its downloaded copy)."""
    from streaming.convert.inputs import infer_columns, open_source
    source = open_source(src, args.kind, parts=args.workers, split=args.split)
    columns = infer_columns(source, args.format, parse_columns(args.columns))
    kwargs = {'compression': None if args.compression in ('', 'none') else args.compression,
              'hashes': [h for h in args.hashes.split(',') if h], 'size_limit': args.size_limit,
              'exist_ok': args.overwrite}
    _write(source, args, columns, kwargs)
    ds = DatasetDir(args.out)
    shards = ds.index['shards']
    ds.close()
    samples = sum(e['samples'] for e in shards)
    emit(args, {'src': args.src, 'from': source.kind, 'out': args.out, 'format': args.format,
                'columns': columns, 'shards': len(shards), 'samples': samples},
         f'{args.src} ({source.kind}) -> {args.out}: {samples} samples in {len(shards)} '
         f'{args.format} shards; columns ' + ', '.join(f'{k}:{v}' for k, v in columns.items()))
    return 0
