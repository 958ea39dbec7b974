"""Run operations with the reference (mosaicml-streaming 0.13.0) in its own virtual env.

Usage: ``<reference python> ref_driver.py < ops.json``, where ops.json is a list of
``{"op": "write", "case": name, "out": dir}``, ``{"op": "read", "dir": dir, "result": path}``
or ``{"op": "merge", "args": [...], "kwargs": {...}}``. Each op's outcome (ok or the error)
goes to stdout as one JSON list. The reference is only ever driven, never imported by our code.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import sys
import tempfile
import traceback
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _stand_in(name: str, **attrs: object) -> None:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attrs)
    sys.modules[name] = module


def install_torchvision_stand_in() -> None:
    """PyPI's torchvision cannot import beside the CPU torch here; the reference's format and
    dataset code never calls it, so a stand-in with the names its vision module imports will do."""

    class VisionDataset:
        pass

    _stand_in('torchvision')
    _stand_in('torchvision.datasets', VisionDataset=VisionDataset)
    _stand_in('torchvision.transforms')
    _stand_in('torchvision.transforms.functional', to_tensor=lambda x: x)


install_torchvision_stand_in()

from canon import canon_sample  # noqa: E402
from cases import CASES, samples  # noqa: E402

import streaming  # noqa: E402  (the reference)
from streaming.base.compression import decompress  # noqa: E402
from streaming.base.util import merge_index  # noqa: E402

assert streaming.__version__ == '0.13.0', streaming.__version__


def op_write(case: str, out: str) -> None:
    spec = CASES[case]
    writer_cls = getattr(streaming, spec['writer'])
    with writer_cls(out=out, columns=spec['columns'], **spec['kwargs']) as writer:
        for sample in samples(case):
            writer.write(sample)


def _raw_copy(directory: str) -> str:
    """A copy of a dataset with every compressed file decompressed beside it: the reference's
    LocalDataset reads raw files only."""
    copy = tempfile.mkdtemp(prefix='ref-read-')
    shutil.copytree(directory, copy, dirs_exist_ok=True)
    with open(os.path.join(copy, 'index.json')) as f:
        index = json.load(f)
    for shard in index['shards']:
        for raw_key, zip_key in [('raw_data', 'zip_data'), ('raw_meta', 'zip_meta')]:
            raw, zipped = shard.get(raw_key), shard.get(zip_key)
            if zipped is None or raw is None:
                continue
            raw_path = os.path.join(copy, raw['basename'])
            if not os.path.exists(raw_path):
                with open(os.path.join(copy, zipped['basename']), 'rb') as f:
                    data = decompress(shard['compression'], f.read())
                with open(raw_path, 'wb') as f:
                    f.write(data)
    return copy


def op_read(dir: str, result: str) -> None:
    copy = _raw_copy(dir)
    try:
        dataset = streaming.LocalDataset(local=copy)
        rows = [canon_sample(dataset[i]) for i in range(len(dataset))]
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    with open(result, 'w') as f:
        json.dump(rows, f)


def op_merge(args: list, kwargs: dict) -> None:
    args = [[tuple(x) if isinstance(x, list) else x for x in a] if isinstance(a, list) else a
            for a in args]
    merge_index(*args, **kwargs)


def main() -> None:
    ops = json.load(sys.stdin)
    outcomes = []
    for op in ops:
        kind = op.pop('op')
        try:
            {'write': op_write, 'read': op_read, 'merge': op_merge}[kind](**op)
            outcomes.append({'ok': True})
        except Exception as error:  # Reported to the test, which decides.
            outcomes.append({'ok': False, 'error': f'{type(error).__name__}: {error}',
                             'traceback': traceback.format_exc()})
    json.dump(outcomes, sys.stdout)


if __name__ == '__main__':
    main()
