"""``streaming convert`` from every input kind, with and without workers; bad input."""

from __future__ import annotations

import csv
import io
import json
import os
import tarfile

import numpy as np
import pytest

from tests.cli.conftest import run_cli, run_json


def _read(path: str) -> list[dict]:
    from streaming import LocalDataset
    ds = LocalDataset(path)
    return [ds[i] for i in range(len(ds))]


def _rows(n: int) -> list[dict]:
    return [{'id': i, 'text': f'line {i}', 'score': i / 4, 'tags': ['a'] * (i % 3)}
            for i in range(n)]


def test_jsonl_to_mds_single_and_parallel(tmp_path) -> None:
    rows = _rows(400)
    src = tmp_path / 'data.jsonl'
    src.write_text(''.join(json.dumps(r) + '\n' for r in rows))
    report = run_json('convert', str(src), str(tmp_path / 'one'), '--hashes', 'xxh64',
                      '--size-limit', '4kb')
    assert report['from'] == 'jsonl' and report['samples'] == 400 and report['shards'] > 1
    assert report['columns'] == {'id': 'int', 'text': 'str', 'score': 'float64', 'tags': 'json'}
    assert _read(str(tmp_path / 'one')) == rows
    # Two workers: two sub-datasets, merged, same samples in the same order.
    proc = run_cli('convert', str(src), str(tmp_path / 'two'), '--workers', '2',
                   '--size-limit', '4kb', env={'STREAMING_PROGRESS': '1'})
    assert proc.returncode == 0, proc.stderr
    assert 'Writing 2 parts' in proc.stderr  # The one progress bar.
    assert sorted(os.listdir(tmp_path / 'two')) == ['index.json', 'part-00000', 'part-00001']
    parts = json.load(open(tmp_path / 'two' / 'part-00001' / 'index.json'))['shards']
    assert sum(s['samples'] for s in parts) > 100  # The file was split between the workers.
    assert _read(str(tmp_path / 'two')) == _read(str(tmp_path / 'one'))


def test_csv_to_json_format(tmp_path) -> None:
    src = tmp_path / 'table.csv'
    with open(src, 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(['name', 'count', 'weight'])
        for i in range(50):
            writer.writerow([f'n{i}', i, i * 1.5])
    report = run_json('convert', str(src), str(tmp_path / 'out'), '--format', 'json',
                      '--compression', 'none')
    assert report['columns'] == {'name': 'str', 'count': 'int', 'weight': 'float'}
    got = _read(str(tmp_path / 'out'))
    assert got[7] == {'name': 'n7', 'count': 7, 'weight': 10.5} and len(got) == 50


def test_parquet_directory(tmp_path) -> None:
    pa = pytest.importorskip('pyarrow')
    import pyarrow.parquet as pq
    (tmp_path / 'pq').mkdir()
    for k in range(2):
        ids = list(range(k * 100, k * 100 + 100))
        table = pa.table({'id': pa.array(ids, pa.int32()), 'x': pa.array([i / 3 for i in ids]),
                          'blob': pa.array([bytes([i % 256]) * 3 for i in ids])})
        pq.write_table(table, tmp_path / 'pq' / f'part{k}.parquet', row_group_size=30)
    report = run_json('convert', str(tmp_path / 'pq'), str(tmp_path / 'out'), '--workers', '2')
    assert report['from'] == 'parquet'
    assert report['columns'] == {'id': 'int32', 'x': 'float64', 'blob': 'bytes'}
    got = _read(str(tmp_path / 'out'))
    assert [int(s['id']) for s in got] == list(range(200))
    assert got[150]['blob'] == bytes([150]) * 3 and got[3]['x'] == 1.0


def test_image_directory(tmp_path) -> None:
    from PIL import Image
    for label in ('cat', 'dog'):
        (tmp_path / 'imgs' / label).mkdir(parents=True)
        for i in range(3):
            image = Image.new('RGB', (4 + i, 5), (i * 40, 0, 0))
            image.save(tmp_path / 'imgs' / label / f'{i}.png')
    report = run_json('convert', str(tmp_path / 'imgs'), str(tmp_path / 'out'), '--columns',
                      'image:png')
    assert report['from'] == 'images'
    assert report['columns'] == {'image': 'png', 'label': 'str', 'path': 'str'}
    got = _read(str(tmp_path / 'out'))
    assert [s['label'] for s in got] == ['cat'] * 3 + ['dog'] * 3
    assert got[4]['path'] == os.path.join('dog', '1.png') and got[4]['image'].size == (5, 5)


def test_webdataset_tars(tmp_path) -> None:
    (tmp_path / 'wds').mkdir()
    for t in range(2):
        with tarfile.open(tmp_path / 'wds' / f'shard-{t}.tar', 'w') as tar:
            for i in range(t * 5, t * 5 + 5):
                for ext, data in (('txt', f'caption {i}'.encode()), ('cls', str(i % 2).encode()),
                                  ('bin', bytes([i]) * 4)):
                    info = tarfile.TarInfo(f'{i:06}.{ext}')
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    report = run_json('convert', str(tmp_path / 'wds'), str(tmp_path / 'out'))
    assert report['from'] == 'webdataset' and report['samples'] == 10
    got = _read(str(tmp_path / 'out'))
    assert got[7] == {'__key__': '000007', 'bin': bytes([7]) * 4, 'cls': '1',
                      'txt': 'caption 7'}


def test_hugging_face_save_to_disk(tmp_path) -> None:
    datasets = pytest.importorskip('datasets')
    from PIL import Image
    images = [Image.new('RGB', (3, 3), (i, i, i)) for i in range(6)]
    features = datasets.Features({'text': datasets.Value('string'),
                                  'label': datasets.ClassLabel(names=['neg', 'pos']),
                                  'image': datasets.Image(),
                                  'emb': datasets.Sequence(datasets.Value('float32'))})
    train = datasets.Dataset.from_dict({'text': [f't{i}' for i in range(6)],
                                        'label': [i % 2 for i in range(6)], 'image': images,
                                        'emb': [[i / 2, 1.0] for i in range(6)]},
                                       features=features)
    dd = datasets.DatasetDict({'train': train, 'test': train.select(range(2))})
    dd.save_to_disk(str(tmp_path / 'hf'))
    proc = run_cli('convert', str(tmp_path / 'hf'), str(tmp_path / 'out'))
    assert proc.returncode == 1 and "DatasetDict with splits ['train', 'test']" in proc.stderr
    report = run_json('convert', str(tmp_path / 'hf'), str(tmp_path / 'out'), '--split', 'train',
                      '--columns', 'image:png')
    assert report['from'] == 'hf'
    assert report['columns'] == {'text': 'str', 'label': 'int64', 'image': 'png', 'emb': 'json'}
    got = _read(str(tmp_path / 'out'))
    assert [s['text'] for s in got] == [f't{i}' for i in range(6)]
    assert [int(s['label']) for s in got] == [0, 1, 0, 1, 0, 1]
    assert got[5]['image'].getpixel((1, 1)) == (5, 5, 5) and got[3]['emb'] == [1.5, 1.0]


def test_bad_input(tmp_path) -> None:
    missing = str(tmp_path / 'missing.jsonl')
    proc = run_cli('convert', missing, str(tmp_path / 'o'))
    assert proc.returncode == 1
    assert proc.stderr.strip() == f'streaming convert: error: No such file or directory: {missing}'
    odd = tmp_path / 'data.xyz'
    odd.write_text('?')
    proc = run_cli('convert', str(odd), str(tmp_path / 'o'))
    assert proc.returncode == 1 and 'Cannot tell the format of' in proc.stderr
    assert '--from with one of' in proc.stderr
    proc = run_cli('convert', str(odd), str(tmp_path / 'o'), '--from', 'excel')
    assert proc.returncode == 2 and "invalid choice: 'excel'" in proc.stderr
    bad = tmp_path / 'bad.jsonl'
    bad.write_text('{"a": 1}\n{"a": \n')
    proc = run_cli('convert', str(bad), str(tmp_path / 'o2'))
    assert proc.returncode == 1 and f'{bad}: invalid JSON at byte 9' in proc.stderr
    good = tmp_path / 'good.jsonl'
    good.write_text('{"a": 1}\n')
    proc = run_cli('convert', str(good), str(tmp_path / 'o3'), '--columns', 'b:int')
    assert proc.returncode == 1 and "--columns names ['b']" in proc.stderr
    proc = run_cli('convert', str(good), str(tmp_path / 'o3'), '--columns', 'a:nonsense')
    assert proc.returncode == 1 and "unknown encoding 'nonsense'" in proc.stderr
    (tmp_path / 'full').mkdir()
    (tmp_path / 'full' / 'x').write_text('x')
    proc = run_cli('convert', str(good), str(tmp_path / 'full'))
    assert proc.returncode == 1 and 'is not empty' in proc.stderr
    assert run_cli('convert', str(good), str(tmp_path / 'full'), '--overwrite').returncode == 0
    assert np.array_equal(_read(str(tmp_path / 'full'))[0]['a'], 1)
