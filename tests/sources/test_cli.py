"""``streaming index``, ``inspect`` and ``validate`` on directories of data files."""

from __future__ import annotations

import json
import os

from tests.cli.conftest import cli_s3_env, run_cli, run_json
from tests.sources.conftest import write_parquet
from tests.sources.test_jsonl import replace_line, write_jsonl


def test_index_then_inspect_and_validate_parquet(tmp_path) -> None:
    root = str(tmp_path / 'data')
    write_parquet(root, files=2, rows=100, row_group_size=30)
    report = run_json('index', root, '--option', 'unit_bytes=1')  # A unit per row group.
    assert report['files'] == 2 and report['indexed'] == 2 and report['units'] == 8
    assert report['samples'] == 200
    assert os.path.exists(os.path.join(root, '_shardflow_index.parquet.json'))
    again = run_json('index', root, '--option', 'unit_bytes=1')
    assert again['indexed'] == 0
    summary = run_json('inspect', root)['streams'][0]
    assert summary['shards'] == 8 and summary['samples'] == 200
    assert summary['formats'] == {'parquet': 8} and summary['sidecar'] == 'current'
    assert {c['name']: c['encoding'] for c in summary['columns']}['tokens'] == \
        'list<item: int32>'
    text = run_cli('inspect', root).stdout
    assert 'format parquet' in text and 'sidecar index current' in text
    proc = run_cli('validate', root, '--decode')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '200 samples: OK' in proc.stdout


def test_validate_reports_stale_sidecar_and_broken_files(tmp_path) -> None:
    root = str(tmp_path / 'data')
    write_parquet(root, files=3, rows=60, row_group_size=30)
    assert run_cli('index', root).returncode == 0
    write_parquet(str(tmp_path / 'other'), files=1, rows=10)
    os.replace(str(tmp_path / 'other' / 'part-000.parquet'), os.path.join(root, 'part-001.parquet'))
    path = os.path.join(root, 'part-002.parquet')
    with open(path, 'r+b') as f:
        f.truncate(os.path.getsize(path) - 50)
    proc = run_cli('validate', root, '--json')
    assert proc.returncode == 1
    problems = json.loads(proc.stdout)['datasets'][0]['problems']
    assert any(p.startswith('part-001.parquet: changed since the sidecar') for p in problems)
    assert any(p.startswith('part-002.parquet: SourceFileError') and 'footer' in p
               for p in problems)


def test_validate_decode_names_the_bad_jsonl_line(tmp_path) -> None:
    root = tmp_path / 'lines'
    write_jsonl(str(root), files=1, rows=20)
    replace_line(root / 'part-000.jsonl', 12, '{broken')
    proc = run_cli('validate', str(root), '--decode')
    assert proc.returncode == 1
    assert 'part-000.jsonl, line 13: not valid JSON' in proc.stdout


def test_index_uploads_the_sidecar_beside_remote_files(moto, tmp_path) -> None:
    import boto3
    env = cli_s3_env(moto.url)
    client = boto3.client('s3', endpoint_url=moto.url, aws_access_key_id='fake-key-id',
                          aws_secret_access_key=env['AWS_SECRET_ACCESS_KEY'],
                          region_name='us-east-1')
    client.create_bucket(Bucket='cli-sources')
    root = str(tmp_path / 'data')
    write_parquet(root, files=2, rows=50, row_group_size=25)
    for name in os.listdir(root):
        client.upload_file(os.path.join(root, name), 'cli-sources', f'pq/{name}')
    report = run_json('index', 's3://cli-sources/pq', env=env)
    assert report['units'] == 2 and report['sidecar'].endswith('_shardflow_index.parquet.json')
    keys = [o['Key'] for o in client.list_objects_v2(Bucket='cli-sources')['Contents']]
    assert 'pq/_shardflow_index.parquet.json' in keys
    assert run_json('inspect', 's3://cli-sources/pq', env=env)['streams'][0]['sidecar'] == \
        'current'
