"""Damaged Parquet and Arrow files through the whole stack: ``SourceStream``, local and on S3.

One damage of each kind (the campaign's generators, seeded) in the first of two files, read by
a ``StreamingDataset``: from a local folder (Parquet in place and copied into the cache) and
from moto's S3 server, damaged before the stream is built or after (locally with size and mtime
kept; on S3 a new upload). Every case ends as the campaign requires (``damage_columnar``); a
typed error names the damaged file. And through a DataLoader worker, the error reaches the
main process typed, with its message.
"""

from __future__ import annotations

import os
import random

import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.dataset.source_stream import SourceStream
from streaming.errors import SourceFileError
from streaming.sources import parquet
from tests.sources import damage_arrow, damage_parquet
from tests.sources import damage_columnar as damage

FORMATS = {'parquet': (damage_parquet, 'snappy-v1-dict', damage_parquet.parquet_reference),
           'arrow': (damage_arrow, 'stream', damage_arrow.arrow_reference)}


def _one_of_each_kind(fmt: str, data: bytes) -> list[tuple[str, str, bytes]]:
    seen: dict[str, tuple[str, str, bytes]] = {}
    for case in damage.every_damage(FORMATS[fmt][0])(data, random.Random(fmt), 3):
        seen.setdefault(case[0], case)
    return list(seen.values())


def _files(fmt: str, tmp_path) -> tuple[bytes, bytes, list[dict]]:  # noqa: ANN001
    """(the clean file, a second clean file, the rows of both)."""
    module, variant, _ = FORMATS[fmt]
    data = module.write_clean(str(tmp_path / f'clean.{fmt}'), variant)
    rows = damage.plain(module.clean_table().to_pylist())
    return data, data, rows + rows


def _dataset(remote: str, cache: str, in_place: bool) -> StreamingDataset:
    stream = SourceStream(remote=remote, local=cache, options={'unit_bytes': 1},
                          in_place=in_place)
    return StreamingDataset(streams=[stream], batch_size=4)


def _both(reference, path: str, second: list[dict]):  # noqa: ANN001, ANN202
    def read() -> list[dict] | None:
        first = reference(path)()
        return None if first is None else first + second
    return read


@pytest.mark.parametrize('fmt', list(FORMATS))
def test_damaged_files_from_a_local_folder(fmt, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(parquet, 'WIDE_VALUE_BYTES', 1)  # The page reader reads blob and text.
    data, second, rows = _files(fmt, tmp_path)
    tally = damage.Tally()
    for number, (kind, where, damaged) in enumerate(_one_of_each_kind(fmt, data)):
        for moment in damage.MOMENTS:
            for in_place in [fmt == 'parquet' and moment == 'index']:  # Parquet: both ways.
                root = tmp_path / f'{number}-{moment}-{in_place}'
                root.mkdir()
                first, other = str(root / f'a.{fmt}'), str(root / f'b.{fmt}')
                damage.write_as(other, second)
                damage.write_as(first, damaged if moment == 'index' else data)
                cache = str(tmp_path / 'cache' / root.name)

                def read(first=first, cache=cache, damaged=damaged, moment=moment,  # noqa: ANN001
                         in_place=in_place) -> list[dict]:
                    dataset = _dataset(os.path.dirname(first), cache, in_place)
                    if moment == 'read':
                        damage.write_as(first, damaged, like=os.stat(first))
                    return [dataset[i] for i in range(dataset.num_samples)]

                outcome, detail = damage.judge(
                    read, rows, _both(FORMATS[fmt][2], first, rows[len(rows) // 2:]),
                    f'a.{fmt}')
                tally.add(fmt, kind, moment, outcome, f'{where}, in place {in_place}: {detail}')
    with capsys.disabled():
        print(f'\n{fmt} through the stack, local: {tally.summary(fmt)}')
    assert not tally.failures, '\n'.join(tally.failures)
    assert tally.summary(fmt)['typed'] >= 10


@pytest.mark.parametrize('fmt', list(FORMATS))
def test_damaged_files_from_s3(fmt, s3, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(parquet, 'WIDE_VALUE_BYTES', 1)
    client, bucket = s3
    data, second, rows = _files(fmt, tmp_path)
    tally = damage.Tally()
    for number, (kind, where, damaged) in enumerate(_one_of_each_kind(fmt, data)):
        # After indexing, any new upload has another ETag: twice is enough to show it refused.
        for moment in damage.MOMENTS if number < 2 else ['index']:
            prefix = f'{number}-{moment}'
            client.put_object(Bucket=bucket, Key=f'{prefix}/b.{fmt}', Body=second)
            client.put_object(Bucket=bucket, Key=f'{prefix}/a.{fmt}',
                              Body=damaged if moment == 'index' else data)
            local = tmp_path / prefix
            local.mkdir()

            def read(prefix=prefix, damaged=damaged, moment=moment) -> list[dict]:  # noqa: ANN001
                dataset = _dataset(f's3://{bucket}/{prefix}', str(tmp_path / 'c' / prefix),
                                   False)
                if moment == 'read':  # A new version: its ETag differs from the index's.
                    client.put_object(Bucket=bucket, Key=f'{prefix}/a.{fmt}', Body=damaged)
                return [dataset[i] for i in range(dataset.num_samples)]

            def reference(local=local, damaged=damaged) -> list[dict] | None:  # noqa: ANN001
                damage.write_as(str(local / f'a.{fmt}'), damaged)
                return _both(FORMATS[fmt][2], str(local / f'a.{fmt}'), rows[len(rows) // 2:])()

            outcome, detail = damage.judge(read, rows, reference, f'a.{fmt}')
            tally.add(fmt, kind, moment, outcome, f'{where}: {detail}')
    with capsys.disabled():
        print(f'\n{fmt} through the stack, S3: {tally.summary(fmt)}')
    assert not tally.failures, '\n'.join(tally.failures)
    assert tally.summary(fmt)['typed'] >= 5


def _as_list(batch: list[dict]) -> list[dict]:
    return batch  # (Some values are None, which the default collate refuses.)


@pytest.mark.parametrize('fmt', list(FORMATS))
def test_a_damaged_unit_in_a_worker_is_a_typed_error_in_the_main_process(fmt, tmp_path) -> None:
    """Garbage over the last record batch / data page, after indexing: the worker's error
    reaches the loop as ``SourceFileError`` naming the file, not as a dead worker.
    """
    data, second, _ = _files(fmt, tmp_path)
    root = tmp_path / 'data'
    root.mkdir()
    damage.write_as(str(root / f'a.{fmt}'), data)
    damage.write_as(str(root / f'b.{fmt}'), second)
    dataset = _dataset(str(root), str(tmp_path / 'cache'), True)
    if fmt == 'parquet':
        start, end = damage_parquet.Layout(data).chunks[-1]  # The last chunk of the last group.
    else:
        _, _, start, end = damage_arrow.Layout(data).messages[-1]
    garbage = bytes(random.Random(1).getrandbits(8) for _ in range(end - start))
    damage.write_as(str(root / f'a.{fmt}'), data[:start] + garbage + data[end:],
                    like=os.stat(root / f'a.{fmt}'))
    loader = StreamingDataLoader(dataset, batch_size=4, num_workers=1, collate_fn=_as_list)
    with pytest.raises(SourceFileError, match=rf'a\.{fmt}'):
        for _ in loader:
            pass
