"""The transport comparison's own machinery (benchmarks/transport_*.py), run with ours only.

The other clients (obstore, the CRT, Mountpoint) live in a separate venv
(``scripts/transport_env.sh``); here the probes and one tiny run go through ``s3_light`` and
boto3, which the project's env has, against the stub server and moto on loopback.
"""

from __future__ import annotations

import argparse
import urllib.request

import pytest

from benchmarks.transport_bench import clean_env, run_link, summarize, worker
from benchmarks.transport_stub import StubS3

KEYS = {'AWS_ACCESS_KEY_ID': 'AKIAENVKEY', 'AWS_SECRET_ACCESS_KEY': 'secret',
        'AWS_DEFAULT_REGION': 'us-east-1'}


@pytest.fixture()
def stub():
    with StubS3('bench') as server:
        yield server


def test_stub_throttles_twice_resets_and_honours_ranges(stub) -> None:
    def get(key: str, headers: dict | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(f'{stub.endpoint}/bench/{key}', headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    assert get('throttle/x')[0] == 503 and b'SlowDown' in get('throttle/x')[1]
    assert get('throttle/x')[0] == 200 and stub.requests('throttle/x') == 3
    status, body = get('ok/y', {'Range': 'bytes=10-19',
                                'Authorization': 'AWS4-HMAC-SHA256 Credential=AKIAX/2025/...'})
    assert (status, len(body)) == (206, 10) and stub.access_keys('ok/y') == ['AKIAX']
    with pytest.raises((ConnectionError, OSError)):  # Half a body, then a reset.
        get('reset/z')


@pytest.mark.parametrize('client', ['s3_light', 'boto3'])
def test_probes_see_throttling_resets_and_credentials(stub, tmp_path, client) -> None:
    home = str(tmp_path)
    throttled = worker(client, 'probe', stub.endpoint, clean_env(home, **KEYS), 120,
                       '--keys', f'throttle/{client}')
    # Our layer retries: the client must surface the 503 at once, not retry on its own.
    assert throttled['error'] == 'TransientError' and '503 SlowDown' in throttled['message']
    assert stub.requests(f'throttle/{client}') == 1
    reset = worker(client, 'probe', stub.endpoint, clean_env(home, **KEYS), 120,
                   '--keys', f'reset/{client}')
    assert 'error' in reset  # Never a silent short body.
    signed = worker(client, 'probe', stub.endpoint, clean_env(home, **KEYS), 120,
                    '--keys', f'ok/{client}/env')
    assert signed['bytes'] == 64 << 10 and stub.access_keys(f'ok/{client}/env') == ['AKIAENVKEY']
    unsigned = worker(client, 'probe', stub.endpoint,
                      clean_env(home, S3_UNSIGNED='1', AWS_DEFAULT_REGION='us-east-1'), 120,
                      '--keys', f'ok/{client}/unsigned')
    assert unsigned['bytes'] == 64 << 10 and stub.access_keys(f'ok/{client}/unsigned') == [None]
    forked = worker(client, 'fork', stub.endpoint, clean_env(home, **KEYS), 120,
                    '--keys', f'ok/{client}/fork')
    assert forked == {'child': 'ok'} and stub.requests(f'ok/{client}/fork') == 2


def test_a_loopback_run_measures_and_summarizes(tmp_path) -> None:
    args = argparse.Namespace(profile='same-region', objects=3, size=256 << 10, part=100_000,
                              in_flight=4, repeats=2, timeout=300.0)
    rows = run_link('loopback', args, ['s3_light'], str(tmp_path))
    assert [r['repeat'] for r in rows] == [0, 1] and not any('error' in r for r in rows)
    for row in rows:  # Every byte of every object, whole and in 100 KB ranges (3 per object).
        assert row['whole']['bytes'] == row['ranged']['bytes'] == 3 * (256 << 10)
        assert row['whole']['cpu_s_per_gb'] > 0 and row['startup_s'] > 0
    figures = summarize(rows)['loopback']['s3_light']
    speeds = sorted(r['whole']['mb_per_s'] for r in rows)
    assert figures['runs'] == 2
    assert figures['whole_mb_per_s'] == {'median': sum(speeds) / 2, 'min': speeds[0],
                                         'max': speeds[1]}
