"""Drive the reference's epoch-order functions (run with the reference env's python).

Reads a JSON list of ops from stdin and writes one JSON result per op:

* ``{"kind": "shuffle", "algo", "sizes", "ncn", "seed", "epoch", "block"}``: ``get_shuffle``;
* ``{"kind": "partition", ...get_partitions kwargs}``: ``get_partitions``;
* ``{"kind": "sampling", "sizes", "choose", "granularity", "seed", "epoch", "use_epoch"}``;
* ``{"kind": "work", "streams": [{"sizes", "proportion"|"repeat"|"choose"}], "batch_size",
  "kwargs", "world": {"nodes", "ranks", "workers"}, "epoch", "sample_in_epoch"}``: a
  ``StreamingDataset`` over index-only local streams, its per-stream ``choose`` and
  ``generate_work`` for the world (the order its iteration reads);
* ``{"kind": "iterate", "dir" | "streams": [{"local", weight}], "kwargs", "epochs"}``: the ``x``
  column of every sample a ``StreamingDataset`` over ``dir`` (or these streams) yields, epoch
  after epoch, in this process.

An op with ``"install": [names]`` first calls those functions of ``custom_order``, which put a
custom shuffle, partition or batching method in the reference's tables.

The reference is only driven, never imported by our code.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import tempfile
import traceback
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import ref_driver  # noqa: E402, F401  (installs the torchvision stand-in, checks the version)

from streaming.base import Stream, StreamingDataset  # noqa: E402
from streaming.base.batching import generate_work  # noqa: E402
from streaming.base.partition import get_partitions  # noqa: E402
from streaming.base.sampling import get_sampling  # noqa: E402
from streaming.base.shuffle import get_shuffle  # noqa: E402
from streaming.base.world import World  # noqa: E402


def _index(root: str, sizes: list[int]) -> None:
    """An index.json of MDS shards with these sample counts (the shards themselves absent)."""
    os.makedirs(root, exist_ok=True)
    shards = [{'column_encodings': ['int'], 'column_names': ['x'], 'column_sizes': [8],
               'compression': None, 'format': 'mds', 'hashes': [],
               'raw_data': {'basename': f'shard.{i:05}.mds', 'bytes': 12 + 12 * n,
                            'hashes': {}},
               'samples': int(n), 'size_limit': 1 << 26, 'version': 2, 'zip_data': None}
              for i, n in enumerate(sizes)]
    with open(os.path.join(root, 'index.json'), 'w') as f:
        json.dump({'version': 2, 'shards': shards}, f)


def _dataset(stream_specs: list[dict] | None = None, **kwargs: object) -> StreamingDataset:
    """A reference dataset (over ``Stream(**spec)`` for each of ``stream_specs``, if given);
    retried when another process took the same shared-memory prefix at the same moment (its
    prefix choice races across processes). Streams are made anew for each attempt: a failed
    attempt has already written its derived weights into them."""
    for attempt in range(5):
        if stream_specs is not None:
            kwargs['streams'] = [Stream(**spec) for spec in stream_specs]
        try:
            return StreamingDataset(**kwargs)
        except FileExistsError:
            if attempt == 4:
                raise
    raise AssertionError('unreachable')


def _work(op: dict, root: str) -> dict:
    specs = []
    for j, spec in enumerate(op['streams']):
        local = os.path.join(root, str(j))
        _index(local, spec['sizes'])
        specs.append({'local': local, **{k: v for k, v in spec.items() if k != 'sizes'}})
    dataset = _dataset(specs, batch_size=op['batch_size'], **op['kwargs'])
    world = World(op['world']['nodes'], op['world']['ranks'], op['world']['workers'], 0)
    work = generate_work(dataset.batching_method, dataset, world, op['epoch'],
                         op['sample_in_epoch'])
    return {'choose': [int(s.choose) for s in dataset.streams], 'work': np.asarray(work).tolist()}


def _iterate(op: dict) -> dict:
    if 'streams' in op:
        dataset = _dataset(op['streams'], **op['kwargs'])
    else:
        dataset = _dataset(local=op['dir'], **op['kwargs'])
    return {'epochs': [[int(sample['x']) for sample in dataset] for _ in range(op['epochs'])]}


def run(op: dict, root: str) -> dict:
    if op.get('install'):  # e.g. ['install']: registers custom orders in the reference's tables.
        import custom_order
        for name in op['install']:
            getattr(custom_order, name)()
    kind = op['kind']
    if kind == 'iterate':
        return _iterate(op)
    if kind == 'shuffle':
        ids = get_shuffle(op['algo'], np.array(op['sizes'], np.int64), op['ncn'], op['seed'],
                          op['epoch'], op['block'])
        return {'ids': np.asarray(ids).tolist()}
    if kind == 'partition':
        kwargs = {k: v for k, v in op.items() if k != 'kind'}
        return {'ids': np.asarray(get_partitions(**kwargs)).tolist()}
    if kind == 'sampling':
        counts = get_sampling(np.array(op['sizes'], np.int64), op['choose'], op['granularity'],
                              op['seed'], op['epoch'], op['use_epoch'])
        return {'ids': np.asarray(counts).tolist()}
    return _work(op, root)


def main() -> None:
    # Every reference StreamingDataset holds a few hundred descriptors until collected.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    warnings.simplefilter('ignore')
    # The collections below then skip the reference's import-time objects (torch's many).
    gc.freeze()
    root = tempfile.mkdtemp(prefix='ref-order-')
    results = []
    for number, op in enumerate(json.load(sys.stdin)):
        try:
            results.append(run(op, os.path.join(root, str(number))))
        except Exception as error:  # noqa: BLE001 - reported to the test as data
            results.append({'error': f'{type(error).__name__}: {error}',
                            'trace': traceback.format_exc()[-2000:]})
        if op['kind'] in ('work', 'iterate'):
            gc.collect()
    print(json.dumps(results))


if __name__ == '__main__':
    main()
