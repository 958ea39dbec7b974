"""``inspect`` and ``validate`` of directories of data files streamed as they are.

A URL without ``index.json`` whose files are Parquet, JSONL, WebDataset tars or Arrow files is
summarized from their metadata (the sidecar index when it is current), and validated by indexing
every file afresh (and, with ``--decode``, decoding every sample of every unit).
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from typing import Any

from streaming.cli.common import join, progress

__all__ = ['summarize_source', 'validate_source']


def _stored(root: str) -> tuple[Any, list[tuple[str, Any]], dict[str, Any] | None]:
    from streaming.dataset.sources import _read_optional, list_sources, load_sidecar, sidecar_name
    source, files = list_sources(root, None)
    where = join(root, sidecar_name(source))
    return source, files, load_sidecar(_read_optional(where, 60.0), where)


def _stale(files: list[tuple[str, Any]], sidecar: dict[str, Any] | None) -> list[str]:
    records = (sidecar or {}).get('files', {})
    return [rel for rel, info in files if rel not in records or
            (records[rel].get('size'), records[rel].get('etag')) != (info.size, info.etag)]


def summarize_source(root: str) -> dict[str, Any]:
    """What ``inspect`` reports of a directory of data files (reading metadata if needed)."""
    from streaming.dataset.sources import build_sidecar, source_options
    source, files, stored = _stored(root)
    stale = _stale(files, stored)
    options = (stored or {}).get('options') or source_options(source, {})
    sidecar, _ = build_sidecar(root, source, files, stored, options)
    records = list(sidecar['files'].values())
    units = [u for r in records for u in r['units'] if u['samples']]
    schema = next((r['schema'] for r in records if r.get('schema')), None) or {}
    return {'url': root, 'shards': len(units), 'samples': sum(u['samples'] for u in units),
            'formats': {source.name: len(units)}, 'compression': {'None': len(units)},
            'hashes': [], 'raw_bytes': sum(r['size'] for r in records), 'zip_bytes': None,
            'size_limit': None, 'files': len(records),
            'columns': [{'name': n, 'encoding': t} for n, t in schema.items()],
            'sidecar': 'none' if stored is None else
            f'stale ({len(stale)} files changed)' if stale else 'current'}


def _decode_unit(root: str, entry: dict[str, Any], scratch: str) -> list[str]:
    from streaming.format import reader_from_json
    from streaming.storage.objects import ObjectInfo
    from streaming.storage.sources import fetch_ranges
    path = os.path.join(scratch, entry['raw_data']['basename'])
    reader, i = None, 0
    try:
        fetch_ranges(join(root, entry['source']), path, entry['ranges'],
                     expect=ObjectInfo(entry['source_size'], entry['source_etag']))
        reader = reader_from_json(scratch, None, entry)
        for i in range(entry['samples']):
            reader.get_item(i)
    except Exception as error:  # Each problem is reported, not raised.
        return [f'{entry["source"]} unit {entry["unit"]}: sample {i} does not decode: '
                f'{type(error).__name__}: {error}']
    finally:
        if reader is not None:
            reader.close()
        if os.path.exists(path):
            os.remove(path)
    return []


def validate_source(root: str, decode: bool, args: Any) -> dict[str, Any]:
    """Index every file afresh; compare with the sidecar; optionally decode every sample."""
    from streaming.dataset.sources import _index_one, source_options
    source, files, stored = _stored(root)
    problems = [f'{rel}: changed since the sidecar index was written (run streaming index)'
                for rel in _stale(files, stored)] if stored is not None else []
    options = (stored or {}).get('options') or source_options(source, {})
    shards = samples = 0
    with tempfile.TemporaryDirectory(prefix='streaming-validate-') as scratch:
        for rel, info in progress(args, files, desc=f'Validating {root}', unit='file'):
            try:
                record = _index_one(root, source, rel, info, options, 60.0, 2)
            except Exception as error:  # Each problem is reported, not raised.
                problems.append(f'{rel}: {type(error).__name__}: {error}')
                continue
            entries = source.entries(record, rel, None)
            shards += len(entries)
            samples += sum(e['samples'] for e in entries)
            if decode:
                for entry in entries:
                    problems += _decode_unit(root, entry, scratch)
    return {'url': root, 'format': source.name, 'files': len(files), 'shards': shards,
            'samples': samples, 'problems': problems,
            'formats': dict(Counter({source.name: shards}))}
