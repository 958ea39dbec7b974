"""``streaming convert`` from a remote SRC (a moto S3 server on loopback): one object, a prefix,
a glob; the download scratch directory is removed afterwards, also after a failure."""

from __future__ import annotations

import io
import json
import os

import pytest
from PIL import Image

from tests.cli.conftest import cli_s3_env, run_cli, run_json
from tests.storage.conftest import new_name, s3_client


def _read(path: str) -> list[dict]:
    from streaming import LocalDataset
    ds = LocalDataset(path)
    return [ds[i] for i in range(len(ds))]


def _jsonl(rows: range, pad: int = 0) -> bytes:
    return ''.join(json.dumps({'id': i, 'text': f'row {i}' + 'x' * pad}) + '\n'
                   for i in rows).encode()


@pytest.fixture
def bucket(moto):
    name = new_name('convert')
    client = s3_client(moto.url)
    client.create_bucket(Bucket=name)
    return client, name, cli_s3_env(moto.url)


def test_one_object_ranged_with_progress_and_workers(tmp_path, bucket) -> None:
    client, name, env = bucket
    data = _jsonl(range(3000), pad=200)  # ~650 KB: downloaded in ranged parts (below).
    client.put_object(Bucket=name, Key='raw/corpus.jsonl', Body=data)
    scratch = tmp_path / 'scratch'
    scratch.mkdir()
    out = tmp_path / 'out'
    env = {**env, 'STREAMING_PROGRESS': '1', 'STREAMING_DOWNLOAD_PART_SIZE': '64kb',
           'STREAMING_DOWNLOAD_RANGED_THRESHOLD': '128kb'}
    proc = run_cli('convert', f's3://{name}/raw/corpus.jsonl', str(out), '--workers', '2',
                   '--scratch', str(scratch), '--json', env=env)
    assert proc.returncode == 0, proc.stderr
    assert 'Downloading 1 object(s) from s3://' in proc.stderr  # The download's bar.
    assert 'Writing 2 parts' in proc.stderr
    report = json.loads(proc.stdout)
    assert report['src'] == f's3://{name}/raw/corpus.jsonl' and report['from'] == 'jsonl'
    assert report['samples'] == 3000
    assert [int(s['id']) for s in _read(str(out))] == list(range(3000))
    assert os.listdir(scratch) == []  # The temporary download is gone.


def test_a_prefix_of_images_keeps_its_layout(tmp_path, bucket) -> None:
    client, name, env = bucket
    for label in ('cat', 'dog'):
        for i in range(3):
            buf = io.BytesIO()
            Image.new('RGB', (4 + i, 5), (i * 40, 0, 0)).save(buf, 'PNG')
            client.put_object(Bucket=name, Key=f'photos/{label}/{i}.png', Body=buf.getvalue())
    client.put_object(Bucket=name, Key='photos/', Body=b'')  # A "directory" marker object.
    client.put_object(Bucket=name, Key='photos-other/x.png', Body=b'not in the prefix')
    report = run_json('convert', f's3://{name}/photos', str(tmp_path / 'out'), '--columns',
                      'image:png', env=env)
    assert report['from'] == 'images' and report['samples'] == 6
    got = _read(str(tmp_path / 'out'))
    assert [s['label'] for s in got] == ['cat'] * 3 + ['dog'] * 3
    assert got[4]['path'] == os.path.join('dog', '1.png') and got[4]['image'].size == (5, 5)


def test_a_glob_matches_within_one_directory(tmp_path, bucket) -> None:
    client, name, env = bucket
    client.put_object(Bucket=name, Key='logs/a.jsonl', Body=_jsonl(range(0, 10)))
    client.put_object(Bucket=name, Key='logs/b.jsonl', Body=_jsonl(range(10, 25)))
    client.put_object(Bucket=name, Key='logs/readme.txt', Body=b'not a match')
    client.put_object(Bucket=name, Key='logs/old/c.jsonl', Body=_jsonl(range(100, 105)))
    report = run_json('convert', f's3://{name}/logs/*.jsonl', str(tmp_path / 'out'), env=env)
    assert report['samples'] == 25
    assert [int(s['id']) for s in _read(str(tmp_path / 'out'))] == list(range(25))


def test_remote_errors_name_the_url_and_leave_no_scratch(tmp_path, bucket) -> None:
    client, name, env = bucket
    scratch = tmp_path / 'scratch'
    scratch.mkdir()
    missing = f's3://{name}/nothing/here.jsonl'
    proc = run_cli('convert', missing, str(tmp_path / 'o1'), '--scratch', str(scratch), env=env)
    assert proc.returncode == 1
    assert proc.stderr.strip() == \
        f'streaming convert: error: No object, prefix or glob match at {missing}'
    client.put_object(Bucket=name, Key='bad.jsonl', Body=b'{"a": 1}\n{"a": \n')
    proc = run_cli('convert', f's3://{name}/bad.jsonl', str(tmp_path / 'o2'), '--scratch',
                   str(scratch), env=env)
    assert proc.returncode == 1
    assert f's3://{name}/bad.jsonl: invalid JSON at byte 9' in proc.stderr
    assert str(scratch) not in proc.stderr  # The message names the object, not the copy.
    assert os.listdir(scratch) == []
    proc = run_cli('convert', f's3://{name}/bad.jsonl', str(tmp_path / 'o3'), '--scratch',
                   str(tmp_path / 'no-such-dir'), env=env)
    assert proc.returncode == 1 and '--scratch: no such directory' in proc.stderr


def test_object_keys_cannot_escape_the_download_directory() -> None:
    from streaming.convert.remote import _relative
    assert _relative('s3://b/photos/cat/1.png', 's3://b/photos/') == os.path.join('cat', '1.png')
    for key in ('photos/../../etc/passwd', 'photos/a//b.png', 'photos/./x', 'photos/'):
        with pytest.raises(ValueError, match='has no safe local name'):
            _relative(f's3://b/{key}', 's3://b/photos/')
