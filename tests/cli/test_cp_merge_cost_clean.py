"""``streaming cp`` (local and a moto S3 server), ``merge``, ``cost`` and ``clean``."""

from __future__ import annotations

import fcntl
import json
import os
import time

from streaming.coord.shared_dir import start_time
from tests.cli.conftest import N, cli_s3_env, run_cli, run_json, write_dataset
from tests.storage.conftest import new_name, s3_client


def _read(path: str) -> list[dict]:
    from streaming import LocalDataset
    ds = LocalDataset(path)
    return [ds[i] for i in range(len(ds))]


def test_cp_local_verified_and_resumable(tmp_path, dataset) -> None:
    dst = str(tmp_path / 'copy')
    first = run_json('cp', dataset, dst)['copies'][0]
    assert first['copied_bytes'] == first['bytes'] > 0
    assert open(os.path.join(dst, 'index.json')).read() == \
        open(os.path.join(dataset, 'index.json')).read()
    assert run_cli('validate', dst).returncode == 0
    # Interrupted copy: one shard and the index gone, another corrupted -> only those are sent.
    shards = json.load(open(os.path.join(dataset, 'index.json')))['shards']
    os.remove(os.path.join(dst, 'index.json'))
    os.remove(os.path.join(dst, shards[0]['zip_data']['basename']))
    with open(os.path.join(dst, shards[1]['zip_data']['basename']), 'r+b') as f:
        f.write(b'\0\0\0')
    again = run_json('cp', dataset, dst)['copies'][0]
    assert again['copied_bytes'] == shards[0]['zip_data']['bytes'] + \
        shards[1]['zip_data']['bytes']
    assert run_cli('validate', dst).returncode == 0


def test_cp_refuses_a_corrupt_source(tmp_path, dataset) -> None:
    shards = json.load(open(os.path.join(dataset, 'index.json')))['shards']
    name = shards[2]['zip_data']['basename']
    path = os.path.join(dataset, name)
    data = bytearray(open(path, 'rb').read())
    data[-1] ^= 1
    open(path, 'wb').write(bytes(data))
    proc = run_cli('cp', dataset, str(tmp_path / 'copy'))
    assert proc.returncode == 1
    assert name in proc.stderr and 'checksum mismatch' in proc.stderr
    assert not os.path.exists(tmp_path / 'copy' / 'index.json')  # Never looks complete.
    proc = run_cli('cp', str(tmp_path / 'nope'), str(tmp_path / 'c2'))
    assert proc.returncode == 1
    assert proc.stderr.strip().endswith(f'No such file or directory: {tmp_path / "nope"}')


def test_cp_and_inspect_on_s3(tmp_path, dataset, moto) -> None:
    bucket = new_name('cli')
    s3_client(moto.url).create_bucket(Bucket=bucket)
    env = cli_s3_env(moto.url)
    url = f's3://{bucket}/datasets/ds'
    up = run_json('cp', dataset, url, env=env)['copies'][0]
    assert up['copied_bytes'] == up['bytes']
    report = run_json('inspect', url, '--scan', env=env)
    assert report['streams'][0]['samples'] == N
    assert all('bytes' in c for c in report['streams'][0]['columns'])
    assert run_cli('validate', url, '--decode', env=env).returncode == 0
    assert run_json('cp', dataset, url, env=env)['copies'][0]['copied_bytes'] == 0  # Resumed.
    down = str(tmp_path / 'down')
    run_json('cp', url, down, env=env)
    assert run_cli('validate', down, '--decode').returncode == 0
    got, expected = _read(down), _read(dataset)
    assert [s['text'] for s in got] == [s['text'] for s in expected] and len(got) == N
    # convert straight to the bucket with two processes, then read it back from there.
    src = tmp_path / 'rows.jsonl'
    src.write_text(''.join(json.dumps({'id': i, 'text': f'row {i}'}) + '\n' for i in range(900)))
    conv = f's3://{bucket}/datasets/converted'
    assert run_json('convert', str(src), conv, '--workers', '2', '--size-limit', '2kb',
                    env=env)['samples'] == 900
    merged = run_json('inspect', conv, env=env)['streams'][0]
    assert merged['samples'] == 900 and merged['shards'] > 2
    run_json('cp', conv, str(tmp_path / 'conv'), env=env)
    assert [int(s['id']) for s in _read(str(tmp_path / 'conv'))] == list(range(900))
    proc = run_cli('inspect', f's3://{bucket}/nothing-here', env=env)
    assert proc.returncode == 1 and f's3://{bucket}/nothing-here' in proc.stderr


def test_merge(tmp_path) -> None:
    root = tmp_path / 'parts'
    write_dataset(str(root / 'b'), n=40)
    write_dataset(str(root / 'a'), n=30)
    report = run_json('merge', str(root))
    assert report['parts'] == ['a', 'b'] and report['samples'] == 70
    got = _read(str(root))
    assert [int(s['id']) for s in got] == list(range(30)) + list(range(40))
    (tmp_path / 'empty').mkdir()
    proc = run_cli('merge', str(tmp_path / 'empty'))
    assert proc.returncode == 1 and 'no partition index' in proc.stderr


def test_cost(dataset) -> None:
    zipped = sum(s['zip_data']['bytes']
                 for s in json.load(open(os.path.join(dataset, 'index.json')))['shards'])
    base = ['cost', dataset, '--ranks-per-node', '2', '--workers-per-rank', '2',
            '--batch-size', '4']
    r = run_json(*base, '--epochs', '2', '--no-shuffle')
    assert r['dataset_bytes'] == zipped
    assert r['egress_per_epoch'] == [zipped, 0]  # The cache keeps everything after epoch 1.
    unlimited = run_json(*base, '--nodes', '2', '--epochs', '3')
    assert 0 < unlimited['egress_per_epoch'][0] <= 2 * zipped
    assert unlimited['egress_per_epoch'][1:] == [0, 0]
    r = run_json(*base, '--nodes', '2', '--epochs', '3', '--cache-limit', '4kb',
                 '--price-per-gb', '0.09')
    assert r['baseline_bytes'] == zipped * 2 * 3
    # A cache of two shards must fetch shards again, every epoch, as the order hops around.
    assert all(e > 0 for e in r['egress_per_epoch'])
    assert r['egress_per_epoch'][0] >= unlimited['egress_per_epoch'][0]
    assert r['egress_bytes'] == sum(r['egress_per_epoch']) and 'cost' in r
    text = run_cli(*base, '--nodes', '2').stdout
    assert 'total egress:' in text and 'baseline' in text
    proc = run_cli(*base, '--cache-limit', '100b')
    assert proc.returncode == 1 and 'smaller than the largest shard' in proc.stderr
    proc = run_cli(*base, '--shuffle-algo', 'bogus')
    assert proc.returncode == 1 and 'shuffle_algo' in proc.stderr


def test_clean(tmp_path) -> None:
    shm = tmp_path / 'shm'
    dead, live = 2**22 + 12345, os.getpid()
    # A dead job's directory; a live one's; the staging directory of a leader that died before
    # publishing; a directory whose owner died but whose member is alive; not ours.
    for name, pid, member in (('streaming-dead', dead, None), ('streaming-live', live, None),
                              ('.streaming-0123abcd', dead, None),
                              ('streaming-member-alive', dead, live), ('other-dead', dead, None)):
        (shm / name).mkdir(parents=True)
        start = start_time(pid) if pid == live else '1'
        (shm / name / 'owner.json').write_text(json.dumps({'pid': pid, 'start': start}))
        if member:
            (shm / name / 'members').mkdir()
            (shm / name / 'members' / str(member)).write_text(
                json.dumps({'pid': member, 'start': start_time(member)}))
    (shm / 'streaming-dead' / 'epoch.npy').write_bytes(b'\0' * 4096)
    cache = tmp_path / 'cache'
    (cache / 'sub').mkdir(parents=True)
    old = time.time() - 7200
    files = {'abandoned': cache / 'sub' / 'shard.00000.mds.zstd.partial',
             'journal': cache / 'sub' / 'shard.00000.mds.zstd.partial.json',
             'temp': cache / '.shard.00001.mds.abc123.tmp',
             'fresh': cache / 'shard.00002.mds.partial',
             'locked': cache / 'shard.00003.mds.partial',
             'shard': cache / 'shard.00004.mds'}
    for key, path in files.items():
        path.write_bytes(b'x' * 100)
        if key != 'fresh':
            os.utime(path, (old, old))
    held = open(files['locked'], 'rb')
    fcntl.flock(held, fcntl.LOCK_EX)  # A running download holds its partial file locked.
    try:
        env = {'STREAMING_SHM_DIR': str(shm)}
        stale = [str(shm / '.streaming-0123abcd'), str(shm / 'streaming-dead')]
        dry = run_json('clean', '--cache', str(cache), '--dry-run', env=env)
        assert dry['dry_run'] and dry['coordination_dirs'] == stale
        assert dry['coordination_bytes'] > 4096
        assert sorted(dry['partial_files']) == sorted(
            str(files[k]) for k in ('abandoned', 'journal', 'temp'))
        assert all(p.exists() for p in files.values())
        assert len(os.listdir(shm)) == 5  # Nothing removed.
        text = run_cli('clean', '--cache', str(cache), '--dry-run', env=env).stdout
        assert 'would remove 2 stale coordination directories of dead jobs' in text
        assert f'  {shm / "streaming-dead"}\n' in text and 'would remove 3 partial' in text
        report = run_json('clean', '--cache', str(cache), env=env)
    finally:
        held.close()
    assert report['bytes'] == 300
    assert report['coordination_dirs'] == stale
    assert sorted(os.listdir(shm)) == ['other-dead', 'streaming-live', 'streaming-member-alive']
    assert sorted(k for k, p in files.items() if p.exists()) == ['fresh', 'locked', 'shard']
    proc = run_cli('clean', '--cache', str(tmp_path / 'nope'))
    assert proc.returncode == 1 and 'No such directory' in proc.stderr
