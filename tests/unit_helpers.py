"""Small helpers shared by the unit tests (no fixtures, no mocks)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import struct
from typing import Any, Iterable, Iterator

import xxhash

from streaming import LocalDataset, MDSWriter


def write_mds(out: Any, columns: dict[str, str], samples: Iterable[dict[str, Any]],
              **kwargs: Any) -> None:
    """Write ``samples`` with an MDSWriter used as a context manager."""
    with MDSWriter(columns=columns, out=out, **kwargs) as writer:
        for sample in samples:
            writer.write(sample)


def mds_round_trip(root: str, columns: dict[str, str], samples: list[dict[str, Any]],
                   **kwargs: Any) -> list[dict[str, Any]]:
    """Write then read back every sample through LocalDataset."""
    write_mds(root, columns, samples, **kwargs)
    dataset = LocalDataset(root, allow_unsafe_types=True)  # Round trips cover pkl too.
    assert len(dataset) == len(samples)
    return [dataset[i] for i in range(len(dataset))]


def read_index(root: str) -> dict[str, Any]:
    with open(os.path.join(root, 'index.json')) as f:
        return json.load(f)


def hexdigest(algo: str, data: bytes) -> str:
    """A hash computed straight from hashlib / xxhash, independently of the library."""
    if algo.startswith('xxh'):
        return getattr(xxhash, algo)(data).hexdigest()
    return hashlib.new(algo, data).hexdigest()


def parse_mds_shard(data: bytes) -> tuple[list[int], dict[str, Any], list[bytes]]:
    """Split an MDS shard per the documented layout: (offsets, config, sample blobs)."""
    (count,) = struct.unpack_from('<I', data, 0)
    offsets = list(struct.unpack_from(f'<{count + 1}I', data, 4))
    config = json.loads(data[4 + 4 * (count + 1):offsets[0]])
    blobs = [data[offsets[i]:offsets[i + 1]] for i in range(count)]
    return offsets, config, blobs


def shard_files(root: str) -> list[str]:
    return sorted(name for name in os.listdir(root) if name.startswith('shard.'))


def edit_index(root: str, edit: Any) -> str:
    """Apply ``edit`` to the parsed ``root/index.json`` and write it back; returns its path."""
    path = os.path.join(root, 'index.json')
    with open(path) as f:
        obj = json.load(f)
    edit(obj)
    with open(path, 'w') as f:
        json.dump(obj, f)
    return path


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Raise ``TimeoutError`` in the main thread if the block runs longer than ``seconds``."""
    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f'reading took more than {seconds} s: a hang')
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def build_extension(installed: Any, source: str, out: str) -> Any:
    """An optional C extension: ``installed`` (the module, if it was built at install time),
    else built from ``source`` (``<name>.c``) into directory ``out`` and imported, so that its
    tests always run it."""
    if installed is not None:
        return installed
    import importlib.util

    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    name = os.path.splitext(os.path.basename(source))[0]
    command = build_ext(Distribution({'ext_modules': [Extension(name, [source])]}))
    command.build_lib = command.build_temp = out
    command.ensure_finalized()
    command.run()
    spec = importlib.util.spec_from_file_location(name, command.get_ext_fullpath(name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
