"""``pkl`` columns: refused by every dataset class unless ``allow_unsafe_types``, one message."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

from streaming import LocalDataset, MDSWriter, StreamingDataset
from streaming.base.local import LocalDataset as CompatLocalDataset
from streaming.errors import UnsafeEncodingError


def _write(root: str) -> None:
    with MDSWriter(out=root, columns={'obj': 'pkl', 'n': 'int'}, size_limit=80) as writer:
        for i in range(6):
            writer.write({'obj': {'i': i}, 'n': i})


def _open(kind: str, root: str, tmp: str, **kwargs: Any) -> Any:
    if kind == 'local':
        return LocalDataset(root, **kwargs)
    if kind == 'compat':
        return CompatLocalDataset(root, **kwargs)
    if kind == 'streaming-local':
        return StreamingDataset(local=root, batch_size=1, **kwargs)
    return StreamingDataset(remote=root, local=os.path.join(tmp, 'cache'), batch_size=1,
                            **kwargs)


@pytest.mark.parametrize('kind', ['local', 'compat', 'streaming-local', 'streaming-remote'])
def test_pkl_refused_then_allowed(tmp_path: Any, kind: str) -> None:
    root = str(tmp_path / 'data')
    _write(root)
    index = os.path.join(root, 'index.json')
    with pytest.raises(UnsafeEncodingError) as info:
        _open(kind, root, str(tmp_path))
    message = str(info.value)
    shown = index if kind != 'streaming-remote' else os.path.join(tmp_path, 'cache', 'index.json')
    assert re.fullmatch(
        re.escape(f"{shown}, shard 0: column encoding(s) ['pkl'] can run arbitrary code when "
                  f"decoded; pass allow_unsafe_types=True only if you trust whoever wrote this "
                  f"dataset."), message), message
    assert isinstance(info.value, ValueError)  # What the reference raised.
    dataset = _open(kind, root, str(tmp_path), allow_unsafe_types=True)
    assert [dataset[i]['obj'] for i in range(6)] == [{'i': i} for i in range(6)]
