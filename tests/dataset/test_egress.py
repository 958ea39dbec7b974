"""Egress per node and per epoch (``StreamingDataLoader.stats.egress``), on emulated nodes.

Real rank processes in a gloo group, two emulated nodes on this machine (each its own local
cache, so its own shared directory), real DataLoader workers, a local directory as the remote
(read through the same ranged-GET path as an object store). With a cache that holds the node's
share, a node fetches each shard its partition needs once; with ``cache_limit`` at a quarter of
its share it fetches some again, and ``streaming cost`` predicts how much.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.dataset.conftest import write_ids
from tests.dataset.launch import REPO, run_job

NODES, RANKS, WORKERS, BATCH = 2, 2, 2, 8
COST_TOLERANCE = 0.20  # |measured / predicted - 1| over the run: refetches depend on timing.


def _dataset(tmp_path, samples: int = 3200) -> tuple[str, list[dict]]:
    remote = write_ids(os.path.join(tmp_path, 'remote'), samples, size_limit=1 << 14, payload=256,
                       compression='zstd')
    with open(os.path.join(remote, 'index.json')) as file:
        return remote, json.load(file)['shards']


def _needed_bytes(results: list[dict], shards: list[dict], node: int, epoch: int,
                  ranks: int = RANKS) -> tuple[int, int]:
    """Bytes and count of the shards whose samples the node's ranks read in ``epoch``."""
    ends, total = [], 0
    for shard in shards:
        total += shard['samples']
        ends.append(total)
    ids = {i for r in results[node * ranks:(node + 1) * ranks] for b in r['epochs'][epoch]
           for i in b}
    needed = {next(s for s, end in enumerate(ends) if i < end) for i in ids}
    return sum(shards[s]['zip_data']['bytes'] for s in needed), len(needed)


def test_each_node_fetches_its_partitions_shards_once(tmp_path):
    remote, shards = _dataset(tmp_path)
    results = run_job(str(tmp_path), nodes=NODES, ranks_per_node=RANKS, num_workers=WORKERS,
                      dataset={'remote': remote, 'local': os.path.join(tmp_path, 'local'),
                               'batch_size': BATCH, 'shuffle': True})
    for node in range(NODES):
        needed, count = _needed_bytes(results, shards, node, 0)
        print(f'node {node}: fetched {results[node * RANKS]["egress"][0]}, its partition needs '
              f'{count} shards, {needed} B')  # Shown with -s.
        for rank in range(node * RANKS, (node + 1) * RANKS):  # Each rank reads the node's count.
            egress = results[rank]['egress'][0]
            assert needed <= egress['bytes'] <= 1.02 * needed, (node, egress, needed)
            assert egress['gets'] == count, (node, egress, count)  # No shard fetched twice.
    # The fleet: one copy of the dataset, but for the shard cut by the two nodes' rows.
    fleet = sum(r['egress'][0]['bytes'] for r in results[::RANKS])
    sizes = [s['zip_data']['bytes'] for s in shards]
    assert sum(sizes) <= fleet <= sum(sizes) + max(sizes)


def test_a_quarter_cache_with_four_readers_a_node_waits_for_room(tmp_path):
    """Two ranks of two workers a node at a quarter cache: the node's downloads ahead take most
    of the room, and a reader that finds none waits for one of them to land (and be evicted)
    instead of failing with "cache_limit is too small"."""
    remote, shards = _dataset(tmp_path, 8000)
    limit = sum(s['raw_data']['bytes'] for s in shards) // NODES // 4
    results = run_job(str(tmp_path), nodes=NODES, ranks_per_node=RANKS, num_workers=WORKERS,
                      dataset={'remote': remote, 'local': os.path.join(tmp_path, 'local'),
                               'batch_size': BATCH, 'shuffle': True, 'cache_limit': limit},
                      epochs=2)
    for epoch in range(2):
        seen = sorted(i for r in results for batch in r['epochs'][epoch] for i in batch)
        assert seen == list(range(8000)), epoch


def test_a_quarter_cache_refetches_what_streaming_cost_predicts(tmp_path):
    remote, shards = _dataset(tmp_path, 8000)  # A quarter of a share holds ~17 shards.
    raw = sum(s['raw_data']['bytes'] for s in shards)
    limit = raw // NODES // 4  # A quarter of a node's share.
    epochs, ranks = 2, 1
    results = run_job(str(tmp_path), nodes=NODES, ranks_per_node=ranks, num_workers=WORKERS,
                      epochs=epochs,
                      dataset={'remote': remote, 'local': os.path.join(tmp_path, 'local'),
                               'batch_size': BATCH, 'shuffle': True, 'cache_limit': limit})
    measured = [[results[node]['egress'][e]['bytes'] for e in range(epochs)]
                for node in range(NODES)]
    for node in range(NODES):  # More than the partition's shards: evicted ones come again.
        assert sum(measured[node]) > _needed_bytes(results, shards, node, 0, ranks)[0]
    cost = subprocess.run(
        [sys.executable, '-m', 'streaming', 'cost', remote, '--json', '--nodes', str(NODES),
         '--ranks-per-node', str(ranks), '--workers-per-rank', str(WORKERS), '--batch-size',
         str(BATCH), '--epochs', str(epochs), '--cache-limit', str(limit)],
        capture_output=True, text=True, check=True, cwd=REPO,
        env={**os.environ, 'PYTHONPATH': REPO})
    predicted = json.loads(cost.stdout)['egress_bytes']
    total = sum(map(sum, measured))
    print(f'dataset {sum(s["zip_data"]["bytes"] for s in shards)} B, limit {limit} B, measured '
          f'per node per epoch {measured}, predicted {predicted} in all')  # Shown with -s.
    assert abs(total / predicted - 1) <= COST_TOLERANCE, (measured, predicted)
