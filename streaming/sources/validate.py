"""What ``streaming inspect`` and ``streaming validate`` say of a directory of data files.

A URL without ``index.json`` whose files are Parquet, JSONL, WebDataset tars or Arrow files is
summarized from their metadata (the sidecar index when it is current), and validated by indexing
every file afresh (and, with ``decode``, decoding every sample of every unit).
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from typing import Any, Callable, Iterable

from streaming.format import reader_from_json
from streaming.sources.remote import fetch_ranges
from streaming.sources.sidecar import (
    build_sidecar,
    index_file,
    source_options,
    stale_files,
    stored_sidecar,
)
from streaming.storage.objects import ObjectInfo
from streaming.storage.registry import join_url

__all__ = ['summarize_source', 'validate_source']


def _as_is(files: Iterable, description: str) -> Iterable:
    return files


def summarize_source(root: str) -> dict[str, Any]:
    """What ``inspect`` reports of a directory of data files (reading metadata if needed)."""
    source, files, stored = stored_sidecar(root)
    stale = stale_files(files, stored)
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
    path = os.path.join(scratch, entry['raw_data']['basename'])
    reader, i = None, 0
    try:
        fetch_ranges(join_url(root, entry['source']), path, entry['ranges'],
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


def validate_source(root: str, decode: bool,
                    each_file: Callable[[Iterable, str], Iterable] = _as_is) -> dict[str, Any]:
    """Index every file afresh; compare with the sidecar; optionally decode every sample.

    ``each_file(files, description)`` wraps the loop over the files (the CLI's progress bar).
    """
    source, files, stored = stored_sidecar(root)
    problems = [f'{rel}: changed since the sidecar index was written (run streaming index)'
                for rel in stale_files(files, stored)] if stored is not None else []
    options = (stored or {}).get('options') or source_options(source, {})
    shards = samples = 0
    with tempfile.TemporaryDirectory(prefix='streaming-validate-') as scratch:
        for rel, info in each_file(files, f'Validating {root}'):
            try:
                record = index_file(root, source, rel, info, options, 60.0, 2)
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
