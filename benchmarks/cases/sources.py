"""The benchmark datasets: deterministic generation, and loading them back as samples.

Each dataset is generated once from a fixed seed into ``<data>/source/<name>/`` as plain numpy
files, so every implementation writes (and every write run times) exactly the same samples:

* ``tokens``: 2 KiB of bytes per sample (1024 uint16 token ids from a skewed distribution, so
  compressible like real text tokens), one column ``tokens: bytes``.
* ``images``: ~100 KB of random (incompressible, like JPEG) bytes plus an int label, columns
  ``image: bytes`` and ``label: int``.
* ``big``: like ``images`` with ~1 MB samples (0.9-1.1 MB), for shards of ~1 GiB read at a
  link's rate without the readers' CPU being the limit.
* ``tiny``: an int id and a ~40 character string of words, columns ``id: int`` and ``text: str``.

This module is imported both by the orchestrator and by case scripts in the other envs, so it
depends on numpy and the standard library only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

SEED = 20240601
FORMAT_VERSION = 1  # Bump to regenerate every source when the generators change.

TOKENS_PER_SAMPLE = 1024  # uint16 each: 2 KiB per sample.
# Datasets of random binary samples: their uniform size ranges (~100 KB and ~1 MB on average).
BLOB_BYTES = {'images': (75_000, 125_000), 'big': (900_000, 1_100_000)}
WORDS_PER_TEXT = 6

# MDS columns of each dataset (LitData stores the same dicts with its own serializers).
COLUMNS: dict[str, dict[str, str]] = {
    'tokens': {'tokens': 'bytes'},
    'images': {'image': 'bytes', 'label': 'int'},
    'tiny': {'id': 'int', 'text': 'str'},
    'big': {'image': 'bytes', 'label': 'int'},
}


def source_dir(data_dir: str, name: str) -> str:
    return os.path.join(data_dir, 'source', name)


def _spec(name: str, samples: int) -> dict[str, Any]:
    return {'name': name, 'samples': samples, 'seed': SEED, 'version': FORMAT_VERSION}


def _stamp_path(directory: str) -> str:
    return os.path.join(directory, 'spec.json')


def is_generated(data_dir: str, name: str, samples: int) -> bool:
    """True if the source of ``name`` with this many samples is already on disk."""
    try:
        with open(_stamp_path(source_dir(data_dir, name))) as f:
            return json.load(f) == _spec(name, samples)
    except (OSError, ValueError):
        return False


def generate(data_dir: str, name: str, samples: int) -> None:
    """Write the source of dataset ``name`` (overwriting any older one)."""
    directory = source_dir(data_dir, name)
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng([SEED, list(COLUMNS).index(name)])
    if name == 'tokens':
        tokens = np.lib.format.open_memmap(os.path.join(directory, 'tokens.npy'), 'w+', '<u2',
                                           (samples, TOKENS_PER_SAMPLE))
        for start in range(0, samples, 8192):  # Bounded memory.
            stop = min(start + 8192, samples)
            ids = rng.exponential(3000.0, (stop - start, TOKENS_PER_SAMPLE))
            tokens[start:stop] = np.minimum(ids, 50_256)
        tokens.flush()
        del tokens
    elif name in BLOB_BYTES:
        low, high = BLOB_BYTES[name]
        sizes = rng.integers(low, high, samples, endpoint=True)
        offsets = np.zeros(samples + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        with open(os.path.join(directory, 'blob.bin'), 'wb') as f:
            for start in range(0, samples, 256):  # Bounded memory.
                stop = min(start + 256, samples)
                f.write(rng.bytes(int(offsets[stop] - offsets[start])))
        np.save(os.path.join(directory, 'offsets.npy'), offsets)
        np.save(os.path.join(directory, 'labels.npy'), rng.integers(0, 1000, samples))
    elif name == 'tiny':
        letters = np.frombuffer(b'abcdefghijklmnopqrstuvwxyz', np.uint8)
        lengths = rng.integers(3, 10, 4096)
        vocab = [letters[rng.integers(0, 26, n)].tobytes() for n in lengths]
        picks = rng.integers(0, len(vocab), (samples, WORDS_PER_TEXT)).tolist()
        texts = [b' '.join([vocab[w] for w in row]) for row in picks]
        offsets = np.zeros(samples + 1, np.int64)
        np.cumsum([len(t) for t in texts], out=offsets[1:])
        with open(os.path.join(directory, 'text.bin'), 'wb') as f:
            f.write(b''.join(texts))
        np.save(os.path.join(directory, 'offsets.npy'), offsets)
    else:
        raise ValueError(f'unknown dataset {name!r}')
    with open(_stamp_path(directory), 'w') as f:
        json.dump(_spec(name, samples), f)


class Source:
    """Random access to the samples of one generated dataset, as the dicts that get written."""

    def __init__(self, data_dir: str, name: str) -> None:
        self.name = name
        directory = source_dir(data_dir, name)
        with open(_stamp_path(directory)) as f:
            self.samples: int = json.load(f)['samples']
        if name == 'tokens':
            self._tokens = np.load(os.path.join(directory, 'tokens.npy'), mmap_mode='r')
        elif name in BLOB_BYTES:
            self._blob = np.memmap(os.path.join(directory, 'blob.bin'), np.uint8, 'r')
            self._offsets = np.load(os.path.join(directory, 'offsets.npy')).tolist()
            self._labels = np.load(os.path.join(directory, 'labels.npy')).tolist()
        else:
            self._blob = np.memmap(os.path.join(directory, 'text.bin'), np.uint8, 'r')
            self._offsets = np.load(os.path.join(directory, 'offsets.npy')).tolist()

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self.name == 'tokens':
            return {'tokens': self._tokens[i].tobytes()}
        begin, end = self._offsets[i], self._offsets[i + 1]
        if self.name in BLOB_BYTES:
            return {'image': self._blob[begin:end].tobytes(), 'label': self._labels[i]}
        return {'id': i, 'text': self._blob[begin:end].tobytes().decode('ascii')}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(self.samples))

    def load_all(self) -> list[dict[str, Any]]:
        """Every sample, materialised (so timing a writer excludes building the samples)."""
        if self.name == 'tiny':  # Fast path: 2M samples.
            text = bytes(self._blob).decode('ascii')
            offsets = self._offsets
            return [{'id': i, 'text': text[offsets[i]:offsets[i + 1]]}
                    for i in range(self.samples)]
        return list(self)

    def payload_bytes(self, i: int) -> int:
        """Bytes of sample ``i``'s column values (int = 8): the unit of every MB/s figure."""
        if self.name == 'tokens':
            return 2 * TOKENS_PER_SAMPLE
        size = self._offsets[i + 1] - self._offsets[i]
        return size + 8

    def total_payload_bytes(self) -> int:
        if self.name == 'tokens':
            return 2 * TOKENS_PER_SAMPLE * self.samples
        return self._offsets[-1] + 8 * self.samples
