"""The link emulators hold their caps: a small self-check through moto, for the kernel link
(benchmarks/linkemu_kernel.py: netns + tc; skipped where a namespace cannot be created) and the
user-space proxy (benchmarks/linkemu.py).

Rates are low (a few MB/s) so that a loaded 2-core machine can still deliver them; the bounds
are the caps the emulator promises (an upper bound, within its 50 ms burst) and a generous lower
bound, since every benchmark that uses it reports what it measured anyway.
"""

import pytest

pytest.importorskip('moto')

from benchmarks.linkemu import Bucket, Profile  # noqa: E402
from benchmarks.linkemu_check import self_check  # noqa: E402


def test_bucket_paces_to_its_rate_after_its_burst():
    bucket = Bucket(rate=1000.0, burst=100.0)
    assert bucket.delay(100, now=0.0) == 0.0  # The burst goes at once.
    waits = [bucket.delay(100, now=0.0) for _ in range(10)]
    assert waits == pytest.approx([0.1 * (i + 1) for i in range(10)])
    assert bucket.delay(100, now=5.0) == 0.0  # Idle time refills it (up to the burst).


@pytest.fixture(scope='module')
def kernel_link():
    from benchmarks.linkemu_kernel import kernel_link_unavailable
    reason = kernel_link_unavailable()
    if reason is not None:
        pytest.skip(f'the kernel link cannot be set up here: {reason}')


@pytest.mark.parametrize('mode', ['kernel', 'proxy'])
def test_self_check_delivers_the_profile_within_tolerance(mode, request):
    if mode == 'kernel':
        request.getfixturevalue('kernel_link')
    profile = Profile(ttfb=0.06, conn_rate=4e6, link_rate=10e6)
    check = self_check(profile, seconds=1.5, connections=6, mode=mode)
    assert check['mode'] == mode
    assert 0.055 <= check['ttfb_s'] <= 0.3, check['ttfb_s']
    one = check['one_connection_mb_per_s'] / 4
    assert 0.7 <= one <= 1.15, check['one_connection_mb_per_s']
    link = check['aggregate_mb_per_s'] / 10
    assert 0.6 <= link <= 1.15, check['aggregate_mb_per_s']
    many = check['many_connections_stats']
    assert many['requests'] == {'GET': 6} and many['get_requests'] == 6
    assert many['head_requests'] == 0
    assert many['max_in_flight'] == 6 and 3 <= many['mean_in_flight'] <= 6
    assert many['bytes_out'] == 6 * int(10e6 * 1.5 / 6)
    assert check['one_connection_stats']['requests'] == {'GET': 1}
    probe = check['probe_stats']  # Five timed GETs of a small object, a HEAD, a ranged GET.
    assert probe['requests'] == {'GET': 5, 'HEAD': 1, 'GET_RANGE': 1}
    assert probe['get_requests'] == 6 and probe['head_requests'] == 1


@pytest.mark.parametrize('style,status,code', [('s3', 503, 'SlowDown'), ('gcs', 429, '429'),
                                               ('azure', 503, 'ServerBusy')])
def test_the_store_budget_refuses_beyond_its_rate_as_the_real_stores_do(style, status, code):
    """A prefix's budget: its burst at once, then allow_rps per second; refusals use no token,
    and our S3 backend reads each refusal as throttling (with its Retry-After)."""
    from benchmarks.store_limits import StoreLimits
    from streaming.storage.s3 import S3Backend
    limits = StoreLimits(allow_rps=10.0, style=style, retry_after=2.0)
    admitted = [limits.admit(f'/bucket/ds/shard.{i:05}.mds', now=0.0) for i in range(15)]
    assert admitted == [True] * 10 + [False] * 5
    assert limits.admit('/bucket/other/x', now=0.0)  # Another prefix has its own budget.
    assert limits.admit('/bucket/ds/a', now=0.1) and not limits.admit('/bucket/ds/b', now=0.1)
    head, _, body = limits.refusal('/bucket/ds/a').partition(b'\r\n\r\n')
    assert head.startswith(b'HTTP/1.1 %d ' % status) and b'Retry-After: 2' in head
    assert code.encode() in body or style == 'gcs'
    error = S3Backend()._translate_response('s3://bucket/ds/a', {
        'ResponseMetadata': {'HTTPStatusCode': status, 'HTTPHeaders': {'retry-after': '2'}},
        'Error': {'Code': code}}, 'GetObject')
    assert error.throttled and error.retry_after == 2.0
