"""Write one implementation's own copy of a benchmark dataset (setup, not timed by the report).

``ours`` and ``reference`` write MDS with their own ``MDSWriter``; ``litdata`` writes its chunk
format with its own ``optimize``. Kinds:

* ``plain``: every sample of a generated source, shards of ``size_limit`` bytes.
* ``scale``: an index-only dataset of ``samples`` tiny samples in ``shards`` shards. One real
  shard of ``samples // shards`` samples is written by the implementation; the other shard files
  are hard links to it and the index lists every one of them, so an epoch over 100M samples
  costs only the index (which is what epoch setup and resumption at scale measure).

Params: ``{"data_dir", "dataset", "out", "kind", "size_limit"?, "samples"?, "shards"?}``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

import harness
import sources


class SourceSample:
    """``optimize``'s function: sample ``i`` of a source (picklable for its worker processes)."""

    def __init__(self, data_dir: str, name: str) -> None:
        self.data_dir, self.name = data_dir, name
        self._source: sources.Source | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, '_source': None}

    def __call__(self, i: int) -> dict[str, Any]:
        if self._source is None:
            self._source = sources.Source(self.data_dir, self.name)
        return self._source[i]


def _tiny_sample(i: int) -> dict[str, Any]:
    return {'id': i, 'text': f'sample {i:09d} of the scale benchmark, tiny'}


def _write_mds(impl: str, samples: Any, columns: dict[str, str], out: str,
               size_limit: int | None) -> None:
    streaming = harness.import_impl(impl)
    with streaming.MDSWriter(out=out, columns=columns, size_limit=size_limit) as writer:
        for sample in samples:
            writer.write(sample)


def _write_litdata(fn: Any, count: int, out: str, chunk_bytes: int | None,
                   chunk_size: int | None = None, workers: int = 2) -> None:
    litdata = harness.import_impl('litdata')
    litdata.optimize(fn=fn, inputs=list(range(count)), output_dir=out, chunk_bytes=chunk_bytes,
                     chunk_size=chunk_size, num_workers=workers, mode='overwrite', verbose=False)


def prepare_plain(impl: str, params: dict[str, Any]) -> None:
    source = sources.Source(params['data_dir'], params['dataset'])
    size_limit = params.get('size_limit', 1 << 26)
    if impl == 'litdata':
        fn = SourceSample(params['data_dir'], params['dataset'])
        _write_litdata(fn, len(source), params['out'], size_limit)
    else:
        _write_mds(impl, source, sources.COLUMNS[params['dataset']], params['out'], size_limit)


def _replicate(one_dir: str, out: str, shards: int, impl: str) -> None:
    """Hard-link the single written shard ``shards`` times and write the index listing them."""
    with open(os.path.join(one_dir, 'index.json')) as f:
        index = json.load(f)
    key, name_key = ('chunks', 'filename') if impl == 'litdata' else ('shards', None)
    entry, = index[key]
    original = os.path.join(one_dir, entry[name_key] if name_key else entry['raw_data']['basename'])
    entries = []
    for k in range(shards):
        entry = json.loads(json.dumps(entry))
        if impl == 'litdata':
            entry['filename'] = basename = f'chunk-0-{k}.bin'
        else:
            entry['raw_data']['basename'] = basename = f'shard.{k:05d}.mds'
        os.link(original, os.path.join(out, basename))
        entries.append(entry)
    index[key] = entries
    with open(os.path.join(out, 'index.json'), 'w') as f:
        json.dump(index, f, sort_keys=True)


def prepare_scale(impl: str, params: dict[str, Any]) -> None:
    shards, per_shard = params['shards'], params['samples'] // params['shards']
    out = params['out']
    os.makedirs(out)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(out)) as tmp:
        one = os.path.join(tmp, 'one')
        if impl == 'litdata':
            _write_litdata(_tiny_sample, per_shard, one, None, chunk_size=per_shard, workers=1)
        else:
            samples = (_tiny_sample(i) for i in range(per_shard))
            _write_mds(impl, samples, sources.COLUMNS['tiny'], one, None)
        _replicate(one, out, shards, impl)


def run(impl: str, params: dict[str, Any]) -> dict[str, Any]:
    out = params['out']
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with harness.Stopwatch() as sw:
        if params['kind'] == 'scale':
            prepare_scale(impl, params)
        else:
            prepare_plain(impl, params)
    return {'seconds': sw.seconds}


if __name__ == '__main__':
    harness.main(run)
