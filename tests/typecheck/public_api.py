"""Uses every name of ``streaming.__all__`` as a user would; never run, only type-checked.

``scripts/wheel_check.sh`` runs ``mypy --strict`` on this file against the installed wheel, so
the public API's annotations (shipped through ``py.typed``) must be complete and consistent. An
un-annotated or ``Any``-typed public name fails here (``assert_type``).
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
from typing_extensions import assert_type

import streaming
from streaming import (
    CSVWriter,
    JSONWriter,
    LocalDataset,
    MDSWriter,
    SourceStream,
    Stream,
    StreamingDataLoader,
    StreamingDataset,
    TSVWriter,
    World,
    XSVWriter,
    __version__,
)


def write(out: str) -> None:
    columns = {'id': 'int', 'text': 'str', 'tokens': 'ndarray:int32'}
    with MDSWriter(out=out, columns=columns, compression='zstd', hashes=['sha1', 'xxh64'],
                   size_limit='64mb') as writer:
        assert_type(writer, MDSWriter)
        writer.write({'id': 0, 'text': 'a', 'tokens': np.arange(3, dtype=np.int32)})
    plain = {'id': 'int', 'text': 'str'}
    for cls in (JSONWriter, CSVWriter, TSVWriter):
        with cls(out=f'{out}-{cls.__name__}', columns=plain, exist_ok=True) as other:
            other.write({'id': 1, 'text': 'b'})
    xsv = XSVWriter(out=f'{out}-xsv', columns=plain, separator='|')
    xsv.write({'id': 2, 'text': 'c'})
    xsv.finish()


def read(remote: str, local: str) -> int:
    stream = Stream(remote=remote, local=local, proportion=0.5)
    assert_type(stream, Stream)
    dataset = StreamingDataset(streams=[stream], batch_size=8, shuffle=True, shuffle_seed=1,
                               epoch_size=100, cache_limit='1gb', world=World.detect())
    assert_type(dataset, StreamingDataset)
    length: int = len(dataset)
    sample = dataset[0]
    state = dataset.state_dict(num_samples=8, from_beginning=False)
    assert_type(state, dict[str, Any])
    dataset.load_state_dict(state)
    loader = StreamingDataLoader(dataset, batch_size=8, num_workers=2)
    assert_type(loader, StreamingDataLoader)
    batches: Iterator[Any] = iter(loader)
    next(batches)
    checkpoint = loader.state_dict()
    if checkpoint is not None:
        loader.load_state_dict(checkpoint)
    local_ds = LocalDataset(local=remote)
    assert_type(local_ds, LocalDataset)
    first: dict[str, Any] = local_ds[0]
    world = World.detect()
    assert_type(world.num_nodes, int)
    assert_type(world.is_local_leader, bool)
    del sample, first
    return length + len(local_ds)


def not_any(dataset: StreamingDataset, loader: StreamingDataLoader, stream: Stream,
            local_ds: LocalDataset, world: World, writer: MDSWriter) -> None:
    """Each public class is a real type to the checker, not ``Any`` (a lazy import can hide it).

    Every assignment below is wrong on purpose; were a class ``Any``, mypy would accept it and
    --strict (warn_unused_ignores) would then fail on the unused ``type: ignore``.
    """
    wrong: int
    wrong = dataset  # type: ignore[assignment]
    wrong = loader  # type: ignore[assignment]
    wrong = stream  # type: ignore[assignment]
    wrong = local_ds  # type: ignore[assignment]
    wrong = world  # type: ignore[assignment]
    wrong = writer  # type: ignore[assignment]
    del wrong


version: str = __version__
names: list[str] = streaming.__all__


def parquet_stream(remote: str) -> None:
    source = SourceStream(remote=remote, columns=['id', 'text'])
    assert_type(source, SourceStream)
    dataset = StreamingDataset(streams=[source], batch_size=8)
    assert_type(dataset, StreamingDataset)
