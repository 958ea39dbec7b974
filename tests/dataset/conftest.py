"""Fixtures for dataset tests: small datasets in a local "remote" directory."""

from __future__ import annotations

import os

import numpy as np
import pytest

from streaming import MDSWriter


def write_ids(out: str, num_samples: int, size_limit: int = 1 << 12, payload: int = 64,
              compression: str | None = None, start: int = 0) -> str:
    """A dataset whose sample i holds id start+i and a payload derived from it."""
    with MDSWriter(out=out, columns={'id': 'int', 'payload': 'bytes'}, size_limit=size_limit,
                   compression=compression) as writer:
        for i in range(start, start + num_samples):
            writer.write({'id': i, 'payload': np.random.RandomState(i).bytes(payload)})
    return out


@pytest.fixture
def remote_ids(tmp_path) -> str:
    """960 samples in about 20 shards (zstd), in a directory used as the remote."""
    return write_ids(os.path.join(tmp_path, 'remote'), 960, compression='zstd')
