"""JSON Lines files written with ``json.dumps``, streamed as they are."""

from __future__ import annotations

import json
import os

import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.dataset.source_stream import SourceStream
from streaming.errors import SourceFileError, StaleSourceError


def write_jsonl(root: str, files: int = 3, rows: int = 300, start: int = 0,
                blank_every: int = 0, final_newline: bool = True) -> list[dict]:
    os.makedirs(root, exist_ok=True)
    samples = []
    for f in range(files):
        lines = []
        for r in range(rows):
            i = start + f * rows + r
            sample = {'id': i, 'text': 'x' * (i % 37) + '\u00e9', 'nums': [i, i + 1]}
            samples.append(sample)
            lines.append(json.dumps(sample))
            if blank_every and r % blank_every == 0:
                lines.append('')
        text = '\n'.join(lines) + ('\n' if final_newline else '')
        with open(os.path.join(root, f'part-{f:03d}.jsonl'), 'w') as out:
            out.write(text)
    return samples


def replace_line(path, number: int, text: str) -> None:
    """Put ``text`` in place of line ``number`` (0-based) of the file at ``path``."""
    lines = path.read_text().split('\n')
    lines[number] = text
    path.write_text('\n'.join(lines))


def _dataset(remote: str, local: str, **kwargs) -> StreamingDataset:
    stream_kwargs = {k: kwargs.pop(k) for k in ('columns', 'options', 'refresh') if k in kwargs}
    return StreamingDataset(streams=[SourceStream(remote=remote, local=local, **stream_kwargs)],
                            batch_size=8, **kwargs)


@pytest.mark.parametrize('unit_bytes', [100, 4096, 1 << 20])
@pytest.mark.parametrize('blank_every,final_newline', [(0, True), (7, False)])
def test_every_line_once_in_order(tmp_path, unit_bytes, blank_every, final_newline,
                                  monkeypatch) -> None:
    from streaming.sources import sidecar
    calls: list[str] = []
    # The sidecar (the unit index of each file) reads the files through its own name.
    monkeypatch.setattr(sidecar, 'read_chunks', _small_chunks(sidecar, calls))
    root = str(tmp_path / 'data')
    expected = write_jsonl(root, blank_every=blank_every, final_newline=final_newline)
    dataset = _dataset(root, str(tmp_path / 'cache'), options={'unit_bytes': unit_bytes})
    assert [dataset[i] for i in range(len(dataset))] == expected
    assert len(calls) == 3  # Every file was indexed from chunks of 333 bytes.
    if unit_bytes == 100:
        assert dataset.num_shards > 30


def _small_chunks(module, calls: list[str]):
    real = module.read_chunks

    def read_chunks(url, **kwargs):  # Chunks of 333 bytes: lines straddle chunk ends.
        calls.append(url)
        data = b''.join(real(url, **kwargs))
        return iter([data[i:i + 333] for i in range(0, len(data), 333)])
    return read_chunks


def test_shuffled_through_workers_and_projected(tmp_path) -> None:
    root = str(tmp_path / 'data')
    write_jsonl(root)
    dataset = _dataset(root, str(tmp_path / 'cache'), columns=['id'], shuffle=True,
                       options={'unit_bytes': 2000})
    assert dataset[5] == {'id': 5}
    ids = [i for b in StreamingDataLoader(dataset, batch_size=8, num_workers=2)
           for i in b['id'].tolist()]
    assert sorted(ids) == list(range(900)) and ids != sorted(ids)


def test_bad_line_names_the_file_and_line_number(tmp_path) -> None:
    root = tmp_path / 'data'
    write_jsonl(str(root), files=1, rows=50)
    path = root / 'part-000.jsonl'
    replace_line(path, 41, '{"id": 41, "text": oops}')
    dataset = _dataset(str(root), str(tmp_path / 'cache'), options={'unit_bytes': 500})
    assert dataset[40]['id'] == 40
    with pytest.raises(SourceFileError, match=r'part-000\.jsonl, line 42: not valid JSON'):
        dataset[41]
    replace_line(path, 41, '[1, 2]')
    dataset = _dataset(str(root), str(tmp_path / 'cache2'), options={'unit_bytes': 500})
    with pytest.raises(SourceFileError, match=r'line 42: a JSON list, not an object'):
        dataset[41]


def test_changed_file_is_a_stale_index(tmp_path) -> None:
    root = str(tmp_path / 'data')
    write_jsonl(root, files=2)
    dataset = _dataset(root, str(tmp_path / 'cache'), refresh=False)
    write_jsonl(root, files=2, rows=310)
    with pytest.raises(StaleSourceError, match=r'part-001\.jsonl changed'):
        dataset[400]


def test_jsonl_from_s3(s3, tmp_path) -> None:
    client, bucket = s3
    root = str(tmp_path / 'data')
    expected = write_jsonl(root, files=2, rows=150)
    for name in os.listdir(root):
        client.upload_file(os.path.join(root, name), bucket, f'lines/{name}')
    dataset = _dataset(f's3://{bucket}/lines', str(tmp_path / 'cache'), shuffle=True,
                       options={'unit_bytes': 1000})
    assert sorted((s for s in dataset), key=lambda s: s['id']) == expected
