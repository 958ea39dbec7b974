"""The fleet emulator's small configurations: real nodes (mount namespaces, gloo, DataLoader
workers) reading one moto store through the link emulator's request budget.

A store refusing most of what two nodes ask (503 SlowDown) still yields every sample of the
epoch exactly once, with no node failing; a node killed with SIGKILL mid-epoch is survived by a
restart from the last checkpoint on the remaining nodes, every sample exactly once across both
phases, no lock left held in any node's /dev/shm and the caches reused. Needs root for the
mount namespaces (as the CI machine has); elsewhere these tests are skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from benchmarks.fleet import FleetConfig, run_fleet


def _can_unshare() -> bool:
    probe = subprocess.run(['unshare', '--mount', '--propagation', 'private', '--', 'sh', '-c',
                            'mount -t tmpfs tmpfs /dev/shm'], capture_output=True)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not _can_unshare(),
                                reason='mount namespaces need root')


def test_a_throttled_fleet_delivers_every_sample_exactly_once(tmp_path) -> None:
    config = FleetConfig(nodes=2, workers=1, shards=32, samples_per_shard=8,
                         shard_bytes=64 << 10, allow_rps=6, store='s3', batch_size=4)
    report = run_fleet(config, str(tmp_path))
    assert report['phase1']['exit_codes'] == [0, 0]
    assert report['exactly_once'] == {'ok': True, 'missing': 0, 'duplicated': 0}
    total = report['total']
    assert total['throttled'] > 0  # The store did refuse (the subject of the test)...
    assert total['samples'] == report['samples_in_epoch'] == 256  # ...and nothing was lost.
    assert all(node['samples'] > 0 and node['gets'] > 0 for node in report['phase1']['nodes'])
    # How far apart a node's first burst of GETs reached the store (the plan's send_gap_s).
    assert all(0.0 <= node['first_gets_gap_s'] <= node['busy_span_s']
               for node in report['phase1']['nodes'])
    assert report['held_locks'] == {}
    # Egress: each shard fetched once by the fleet (two nodes' rows may share a boundary shard).
    assert report['dataset_shard_bytes'] > 0
    assert 1.0 <= total['egress_vs_dataset'] <= 1.1, total
    assert total['shard_bytes'] == sum(n['shard_bytes'] for n in report['phase1']['nodes'])


def test_a_node_killed_mid_epoch_is_survived_by_a_restart_on_fewer_nodes(tmp_path) -> None:
    config = FleetConfig(nodes=3, workers=0, shards=48, samples_per_shard=8,
                         shard_bytes=64 << 10, allow_rps=None, batch_size=2,
                         checkpoint_every=3, kill_node=1, link_rate=1e6, conn_rate=5e5)
    report = run_fleet(config, str(tmp_path))
    assert report['phase1']['killed_at_s'] is not None
    restart = report['restart']
    assert restart['exit_codes'] == [0, 0] and restart['checkpoint_step'] >= 3
    assert report['exactly_once'] == {'ok': True, 'missing': 0, 'duplicated': 0}
    assert report['held_locks'] == {}
    # The restarted nodes (0 and the killed node 1's directories) found their caches filled.
    assert restart['files_cached_before'][0] > 0 and restart['files_cached_before'][1] > 0
