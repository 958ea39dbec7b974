"""Summarize a dataset: shards, samples, columns and encodings, compression, hashes, bytes.

URL is a dataset directory (local path or any remote URL). If it has no index.json but its
subdirectories do, each is reported as a stream, with totals. A directory of Parquet, JSONL,
WebDataset tar or Arrow files is summarized from their metadata (its units are the shards).
For MDS, the bytes each column takes are measured from the shards (local data always; remote
data with --scan).

For example:
  streaming inspect /data/my-dataset
  streaming inspect s3://bucket/dataset --json
"""

from __future__ import annotations

import argparse
import struct
from collections import Counter
from typing import Any

from streaming.cli.common import emit, has_source_files, human_bytes, progress
from streaming.dataset_dir import DatasetDir, find_datasets, shard_files
from streaming.errors import MissingIndexError

HELP = 'summarize a dataset (shards, samples, columns, compression, hashes, bytes)'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('url', help='dataset directory: a local path or a remote URL')
    parser.add_argument('--split', help='a split (subdirectory) of the dataset')
    parser.add_argument('--scan', action='store_true',
                        help='for remote MDS data, download the shards to measure column bytes')


def _columns(entry: dict[str, Any]) -> list[dict[str, Any]]:
    if entry['format'] == 'mds':
        return [{'name': n, 'encoding': e, 'size': s} for n, e, s in
                zip(entry['column_names'], entry['column_encodings'], entry['column_sizes'])]
    if entry['format'] == 'json':
        return [{'name': n, 'encoding': e} for n, e in entry['columns'].items()]
    return [{'name': n, 'encoding': e}
            for n, e in zip(entry['column_names'], entry['column_encodings'])]


def mds_column_bytes(data: bytes, entry: dict[str, Any]) -> list[int]:
    """Bytes each column takes in one raw MDS shard (``data``), in column order."""
    sizes = entry['column_sizes']
    count = struct.unpack_from('<I', data, 0)[0]
    offsets = struct.unpack_from(f'<{count + 1}I', data, 4)
    var = [i for i, s in enumerate(sizes) if s is None]
    totals = [0 if s is None else s * count for s in sizes]
    if var:
        header = struct.Struct(f'<{len(var)}I')
        for k in range(count):
            for i, n in zip(var, header.unpack_from(data, offsets[k])):
                totals[i] += n
    return totals


def _raw_shard(ds: DatasetDir, entry: dict[str, Any]) -> bytes:
    from streaming.format.compression import decompress
    raw = entry['raw_data']
    try:
        path = ds.fetch(raw['basename'], raw['bytes'])
        with open(path, 'rb') as f:
            data = f.read()
    except FileNotFoundError:
        if not entry.get('zip_data'):
            raise
        path = ds.fetch(entry['zip_data']['basename'], entry['zip_data']['bytes'])
        with open(path, 'rb') as f:
            data = decompress(entry['compression'], f.read())
    ds.drop(path)
    return data


def summarize(ds: DatasetDir, args: Any) -> dict[str, Any]:
    shards = ds.index['shards']
    raw = sum(info['bytes'] for e in shards for k, info in shard_files(e) if k.startswith('raw'))
    zipped = sum(info['bytes'] for e in shards for k, info in shard_files(e)
                 if k.startswith('zip'))
    hashes = sorted({h for e in shards for _, info in shard_files(e) for h in info['hashes']})
    summary = {
        'url': ds.url, 'shards': len(shards), 'samples': sum(e['samples'] for e in shards),
        'formats': dict(Counter(e['format'] for e in shards)),
        'compression': dict(Counter(str(e.get('compression')) for e in shards)),
        'hashes': hashes, 'raw_bytes': raw, 'zip_bytes': zipped if zipped else None,
        'size_limit': shards[0].get('size_limit') if shards else None,
        'columns': _columns(shards[0]) if shards else [],
    }
    layouts = {str(_columns(e)) for e in shards}
    if len(layouts) > 1:
        summary['warning'] = f'shards have {len(layouts)} different column layouts'
    mds = [e for e in shards if e['format'] == 'mds']
    if mds and len(layouts) == 1 and (not ds.remote or args.scan):
        totals = [0] * len(mds[0]['column_names'])
        for entry in progress(args, mds, desc='Measuring columns', unit='shard'):
            for i, n in enumerate(mds_column_bytes(_raw_shard(ds, entry), entry)):
                totals[i] += n
        for column, n in zip(summary['columns'], totals):
            column['bytes'] = n
    return summary


def _counts(counts: dict[str, int]) -> str:
    if len(counts) == 1:
        return next(iter(counts))
    return ', '.join(f'{k} ({n} shards)' for k, n in counts.items())


def _text(streams: list[dict[str, Any]], totals: dict[str, Any]) -> str:
    lines = []
    for s in streams:
        lines.append(f'{s["url"]}')
        lines.append(f'  shards {s["shards"]}, samples {s["samples"]}, format '
                     f'{_counts(s["formats"])}, compression {_counts(s["compression"])}')
        zipped = f', compressed {human_bytes(s["zip_bytes"])}' if s['zip_bytes'] else ''
        lines.append(f'  raw {human_bytes(s["raw_bytes"])}{zipped}, hashes '
                     f'{", ".join(s["hashes"]) or "none"}, size_limit {s["size_limit"]}')
        if 'sidecar' in s:
            lines.append(f'  {s["files"]} files, sidecar index {s["sidecar"]}')
        lines.append('  columns:')
        for c in s['columns']:
            size = '' if c.get('size', 0) == 0 else \
                f' ({"variable" if c["size"] is None else c["size"]} B/sample)'
            measured = f', {human_bytes(c["bytes"])} in all' if 'bytes' in c else ''
            lines.append(f'    {c["name"]}: {c["encoding"]}{size}{measured}')
        if s.get('warning'):
            lines.append(f'  warning: {s["warning"]}')
    if len(streams) > 1:
        lines.append(f'total: {totals["streams"]} streams, {totals["shards"]} shards, '
                     f'{totals["samples"]} samples, raw {human_bytes(totals["raw_bytes"])}')
    return '\n'.join(lines)


def run(args: argparse.Namespace) -> int:
    streams = []
    for url in find_datasets(args.url, args.split):
        try:
            ds = DatasetDir(url)
        except MissingIndexError:
            if not has_source_files(url):
                raise
            from streaming.sources.validate import summarize_source
            streams.append(summarize_source(url))
            continue
        try:
            streams.append(summarize(ds, args))
        finally:
            ds.close()
    totals = {'streams': len(streams), 'shards': sum(s['shards'] for s in streams),
              'samples': sum(s['samples'] for s in streams),
              'raw_bytes': sum(s['raw_bytes'] for s in streams),
              'zip_bytes': sum(s['zip_bytes'] or 0 for s in streams)}
    emit(args, {'streams': streams, 'total': totals}, _text(streams, totals))
    return 0
