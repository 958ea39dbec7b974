"""The same operations as ref_driver.py, done with our library in this process."""

from __future__ import annotations

import json
import os

import streaming
from streaming.base.util import merge_index
from tests.oracle.canon import canon_sample
from tests.oracle.cases import CASES, samples


def write(case: str, out: str) -> None:
    spec = CASES[case]
    writer_cls = getattr(streaming, spec['writer'])
    with writer_cls(out=out, columns=spec['columns'], **spec['kwargs']) as writer:
        for sample in samples(case):
            writer.write(sample)


def read(directory: str) -> list[dict]:
    dataset = streaming.LocalDataset(local=directory, allow_unsafe_types=True)
    return [canon_sample(dataset[i]) for i in range(len(dataset))]


def merge(args: list, kwargs: dict) -> None:
    args = [[tuple(x) if isinstance(x, list) else x for x in a] if isinstance(a, list) else a
            for a in args]
    merge_index(*args, **kwargs)


def files(directory: str) -> dict[str, bytes]:
    """Every file below ``directory`` by relative path (ignoring decompressed raw copies)."""
    out = {}
    index = os.path.join(directory, 'index.json')
    listed = None
    if os.path.exists(index):
        with open(index) as f:
            listed = {info['basename'] for shard in json.load(f)['shards']
                      for key in ('raw_data', 'zip_data', 'raw_meta', 'zip_meta')
                      if (info := shard.get(key)) is not None and (
                          shard.get('compression') is None or key.startswith('zip'))}
    for root, _, names in os.walk(directory):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), directory)
            if listed is None or rel in listed or rel == 'index.json':
                with open(os.path.join(root, name), 'rb') as f:
                    out[rel] = f.read()
    return out
