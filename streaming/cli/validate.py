"""Check every shard of a dataset against its index; exit 1 if anything is wrong.

For each shard: every file the index lists is present with the right size and every declared
hash; compressed files decompress to the raw size and hashes; the shard's header agrees with its
index entry (sample count, offsets, column layout). With --decode every sample is also decoded.
Each problem is reported with the shard's file name. A directory of Parquet, JSONL, WebDataset
tar or Arrow files is checked by indexing every file afresh (and comparing with its sidecar
index), and with --decode by decoding every sample of every unit.

For example:
  streaming validate /data/my-dataset --decode
  streaming validate gs://bucket/dataset --json
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import tempfile
from typing import Any

from streaming.cli.common import emit, has_source_files, progress
from streaming.dataset_dir import DatasetDir, find_datasets, shard_files
from streaming.errors import MissingIndexError

HELP = 'check every shard (sizes, hashes, headers, optionally every sample); exit 1 on problems'

_CONFIG_KEYS = ('column_names', 'column_encodings', 'column_sizes', 'columns', 'compression',
                'format', 'hashes', 'newline', 'separator', 'size_limit', 'version')


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('url', help='dataset directory: a local path or a remote URL')
    parser.add_argument('--split', help='a split (subdirectory) of the dataset')
    parser.add_argument('--decode', action='store_true', help='also decode every sample')


def _check_bytes(name: str, data: bytes, info: dict[str, Any]) -> list[str]:
    from streaming.format.hashing import get_hash
    problems = []
    if len(data) != info['bytes']:
        problems.append(f'{name}: {len(data)} bytes, index says {info["bytes"]}')
    for algo, expected in info['hashes'].items():
        try:
            actual = get_hash(algo, data)
        except ValueError as error:
            problems.append(f'{name}: cannot check hash {algo}: {error}')
            continue
        if actual != expected:
            problems.append(f'{name}: {algo} is {actual}, index says {expected}')
    return problems


def _check_header(name: str, data: bytes, meta: bytes | None, entry: dict[str, Any]) -> list[str]:
    """The shard's own header (joint formats) or .meta file (split formats) vs the index."""
    header = data if meta is None else meta
    try:
        count = struct.unpack_from('<I', header, 0)[0]
        if count != entry['samples']:
            return [f'{name}: header says {count} samples, index says {entry["samples"]}']
        offsets = struct.unpack_from(f'<{count + 1}I', header, 4)
        config = json.loads(header[4 + 4 * (count + 1):offsets[0] if meta is None else None])
    except (struct.error, ValueError, UnicodeDecodeError) as error:
        return [f'{name}: unreadable header ({error})']
    problems = []
    if offsets[-1] != len(data) or list(offsets) != sorted(offsets):
        problems.append(f'{name}: sample offsets do not fit the file ({len(data)} bytes)')
    for key in _CONFIG_KEYS:
        if key in config and key in entry and config[key] != entry[key]:
            problems.append(f'{name}: header {key} is {config[key]!r}, index says '
                            f'{entry[key]!r}')
    return problems


def _decode(ds: DatasetDir, entry: dict[str, Any], raws: dict[str, bytes]) -> list[str]:
    from streaming.format import reader_from_json
    with tempfile.TemporaryDirectory(prefix='validate-') as tmp:
        for key, data in raws.items():
            path = os.path.join(tmp, entry[key]['basename'])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'wb') as f:
                f.write(data)
        reader, i = None, 0
        try:
            reader = reader_from_json(tmp, None, entry)
            for i in range(entry['samples']):
                reader.get_item(i)
        except Exception as error:
            return [f'{entry["raw_data"]["basename"]}: sample {i} does not decode: '
                    f'{type(error).__name__}: {error}']
        finally:
            del reader  # Unmaps the shard files before the directory goes.
    return []


def check_shard(ds: DatasetDir, entry: dict[str, Any], decode: bool) -> list[str]:
    """Every problem with one shard, each naming the file."""
    from streaming.format.compression import decompress
    problems: list[str] = []
    raws: dict[str, bytes] = {}
    files = dict(shard_files(entry))
    for raw_key in ('raw_data', 'raw_meta'):
        if raw_key not in files:
            continue
        zip_key = raw_key.replace('raw', 'zip')
        raw_info, zip_info = files[raw_key], files.get(zip_key)
        data = None
        for key, info in ((raw_key, raw_info), (zip_key, zip_info)):
            if info is None:
                continue
            try:
                path = ds.fetch(info['basename'])
            except FileNotFoundError:
                if key == zip_key or zip_info is None:
                    problems.append(f'{info["basename"]}: missing')
                continue
            with open(path, 'rb') as f:
                blob = f.read()
            ds.drop(path)
            problems += _check_bytes(info['basename'], blob, info)
            if key == raw_key:
                data = blob
            elif data is None:
                try:
                    data = decompress(entry['compression'], blob)
                except Exception as error:
                    problems.append(f'{info["basename"]}: does not decompress with '
                                    f'{entry["compression"]}: {error}')
                    continue
                problems += [p.replace(info['basename'], f'{info["basename"]} (decompressed)')
                             for p in _check_bytes(info['basename'], data, raw_info)]
        if data is not None:
            raws[raw_key] = data
    name = entry['raw_data']['basename']
    if 'raw_data' in raws and (entry['format'] == 'mds' or 'raw_meta' in raws):
        problems += _check_header(name, raws['raw_data'], raws.get('raw_meta'), entry)
    if decode and not problems and raws:
        problems += _decode(ds, entry, raws)
    return problems


def run(args: argparse.Namespace) -> int:
    report = []
    for url in find_datasets(args.url, args.split):
        try:
            ds = DatasetDir(url)
        except MissingIndexError:
            if not has_source_files(url):
                raise
            from streaming.sources.validate import validate_source
            report.append(validate_source(
                url, args.decode,
                lambda files, desc: progress(args, files, desc=desc, unit='file')))
            continue
        try:
            shards = ds.index['shards']
            problems = []
            for entry in progress(args, shards, desc=f'Validating {url}', unit='shard'):
                problems += check_shard(ds, entry, args.decode)
        finally:
            ds.close()
        report.append({'url': url, 'shards': len(shards),
                       'samples': sum(e['samples'] for e in shards), 'problems': problems})
    bad = sum(len(r['problems']) for r in report)
    lines = []
    for r in report:
        status = 'OK' if not r['problems'] else f'{len(r["problems"])} problem(s)'
        lines.append(f'{r["url"]}: {r["shards"]} shards, {r["samples"]} samples: {status}')
        lines += [f'  {p}' for p in r['problems']]
    emit(args, {'ok': bad == 0, 'datasets': report}, '\n'.join(lines))
    return 1 if bad else 0
