"""``streaming inspect`` and ``streaming validate`` on good and broken datasets."""

from __future__ import annotations

import json
import os

from streaming.format.mds.encodings import mds_encode
from tests.cli.conftest import COLUMNS, N, run_cli, run_json, sample, write_dataset


def _shards(path: str) -> list[dict]:
    with open(os.path.join(path, 'index.json')) as f:
        return json.load(f)['shards']


def test_help_for_every_subcommand() -> None:
    proc = run_cli('--help')
    assert proc.returncode == 0
    for name in ['inspect', 'validate', 'merge', 'convert', 'cp', 'cost', 'clean']:
        assert name in proc.stdout
        sub = run_cli(name, '--help')
        assert sub.returncode == 0 and f'usage: streaming {name}' in sub.stdout
        assert '--json' in sub.stdout and 'For example:' in sub.stdout
    assert run_cli().returncode == 2
    bad = run_cli('frobnicate')
    assert bad.returncode == 2 and 'invalid choice' in bad.stderr


def test_inspect(dataset) -> None:
    shards = _shards(dataset)
    proc = run_cli('inspect', dataset)
    assert proc.returncode == 0, proc.stderr
    assert f'shards {len(shards)}, samples {N}' in proc.stdout
    assert 'format mds, compression zstd' in proc.stdout and 'sha1, xxh64' in proc.stdout
    report = run_json('inspect', dataset)
    stream, = report['streams']
    assert stream['samples'] == N and stream['shards'] == len(shards)
    assert stream['raw_bytes'] == sum(s['raw_data']['bytes'] for s in shards)
    assert stream['zip_bytes'] == sum(s['zip_data']['bytes'] for s in shards)
    columns = {c['name']: c for c in stream['columns']}
    assert {k: c['encoding'] for k, c in columns.items()} == COLUMNS
    # Measured column bytes: 8 per int, the text and token payloads exactly.
    assert columns['id']['bytes'] == 8 * N
    tokens = [mds_encode('ndarray:int32', sample(i)['tokens']) for i in range(N)]
    assert columns['tokens']['bytes'] == sum(map(len, tokens))
    assert columns['text']['bytes'] == sum(len(sample(i)['text']) for i in range(N))


def test_inspect_streams_with_totals(tmp_path) -> None:
    write_dataset(str(tmp_path / 'root' / 'a'), n=50)
    write_dataset(str(tmp_path / 'root' / 'b'), n=70, compression=None)
    report = run_json('inspect', str(tmp_path / 'root'))
    assert [s['samples'] for s in report['streams']] == [50, 70]
    assert report['total']['samples'] == 120 and report['total']['streams'] == 2
    text = run_cli('inspect', str(tmp_path / 'root')).stdout
    assert 'total: 2 streams' in text


def test_inspect_bad_input(tmp_path, dataset) -> None:
    missing = str(tmp_path / 'nope')
    proc = run_cli('inspect', missing)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f'streaming inspect: error: No such file or directory: {missing}'
    with open(os.path.join(dataset, 'index.json'), 'w') as f:
        f.write('{"version": 2, "shards": [')
    proc = run_cli('inspect', dataset)
    assert proc.returncode == 1
    assert 'index.json is not valid JSON' in proc.stderr and 'Traceback' not in proc.stderr


def test_validate_good(dataset) -> None:
    proc = run_cli('validate', dataset, '--decode')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith('samples: OK') and f'{N} samples' in proc.stdout
    report = run_json('validate', dataset)
    assert report['ok'] and report['datasets'][0]['problems'] == []


def test_validate_reports_each_broken_shard(dataset) -> None:
    shards = _shards(dataset)
    # Shard 1: one flipped byte (same size) -> both hashes of the compressed file are wrong.
    flipped = os.path.join(dataset, shards[1]['zip_data']['basename'])
    data = bytearray(open(flipped, 'rb').read())
    data[len(data) // 2] ^= 0xFF
    open(flipped, 'wb').write(bytes(data))
    # Shard 2: truncated. Shard 3: gone.
    truncated = os.path.join(dataset, shards[2]['zip_data']['basename'])
    open(truncated, 'r+b').truncate(10)
    os.remove(os.path.join(dataset, shards[3]['zip_data']['basename']))
    proc = run_cli('validate', dataset)
    assert proc.returncode == 1
    out = proc.stdout
    name1, name2, name3 = (shards[k]['zip_data']['basename'] for k in (1, 2, 3))
    assert f'{name1}: sha1 is ' in out and f'index says {shards[1]["zip_data"]["hashes"]["sha1"]}' \
        in out and f'{name1}: xxh64 is ' in out
    assert f'{name2}: 10 bytes, index says {shards[2]["zip_data"]["bytes"]}' in out
    assert f'{name3}: missing' in out
    assert shards[0]['zip_data']['basename'] not in out  # Good shards are not mentioned.
    proc = run_cli('validate', dataset, '--json')
    assert proc.returncode == 1 and not json.loads(proc.stdout)['ok']


def test_validate_header_mismatch(tmp_path) -> None:
    ds = write_dataset(str(tmp_path / 'raw'), compression=None, hashes=[])
    index_path = os.path.join(ds, 'index.json')
    index = json.load(open(index_path))
    index['shards'][0]['samples'] += 1
    json.dump(index, open(index_path, 'w'))
    proc = run_cli('validate', ds)
    assert proc.returncode == 1
    name = index['shards'][0]['raw_data']['basename']
    assert f'{name}: header says {index["shards"][0]["samples"] - 1} samples, index says ' \
        f'{index["shards"][0]["samples"]}' in proc.stdout


def test_validate_missing_index(tmp_path) -> None:
    (tmp_path / 'empty').mkdir()
    proc = run_cli('validate', str(tmp_path / 'empty'))
    assert proc.returncode == 1 and 'No index.json at' in proc.stderr
