"""A fleet on one machine: K emulated nodes reading one dataset from one throttling S3 store.

Each node is its own mount namespace (``unshare --mount``) whose ``/dev/shm`` is a directory of
its own (bind-mounted, so it can be inspected afterwards and reused by a restarted node), with
its own cache directory and ``--ranks`` rank processes in the fleet's gloo process group, each
with ``--workers`` DataLoader workers (``benchmarks.fleet_node``). Every node reaches the store
(moto) through its own port of the link emulator (``benchmarks.linkemu``): its own link cap, its
own counters, and the store's request budget shared by all (``--allow-rps`` per prefix, refused
as S3, GCS or Azure refuse: ``--store``), optionally a bucket-wide bandwidth cap.

It reports per node and in total: time to first batch, samples/s, GETs, refusals (all, and
after the node's first second), bytes, egress (the shards' bytes fetched, and in total against
the dataset's), samples; and checks that the epoch delivered every
sample exactly once across the fleet (samples carry their id). ``--kill-node N`` kills every
process of node N with SIGKILL once a checkpoint exists, restarts the job from that checkpoint
on K-1 nodes (same global batch) and checks exactly-once across both phases, that no lock in
any node's ``/dev/shm`` is left held, and that the restarted nodes reused their caches::

    python -m benchmarks.fleet --nodes 8 --ranks 1 --workers 2 --store s3 --allow-rps 16
    python -m benchmarks.fleet --nodes 3 --kill-node 1 --json out.json
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from benchmarks.linkemu import LinkEmulator, Profile
from benchmarks.s3 import CREDENTIALS, MotoServer, free_port
from benchmarks.store_limits import STYLES, StoreLimits
from streaming.cache.concurrency import Concurrency

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class FleetConfig:
    """One fleet run. Rates are bytes/s; the store's budget is requests/s per prefix."""

    nodes: int = 8
    ranks: int = 1
    workers: int = 2
    store: str = 's3'
    allow_rps: float | None = 16.0
    retry_after: float | None = None
    bucket_rate: float | None = None
    ttfb: float = 0.04
    conn_rate: float = 2e6
    link_rate: float = 4e6
    shards: int = 400
    shard_bytes: int = 256 << 10
    samples_per_shard: int = 32
    batch_size: int = 8  # Per rank; with --kill-node, the global batch must divide by K-1 too.
    kill_node: int | None = None
    checkpoint_every: int = 4


def write_dataset(config: FleetConfig, out: str) -> int:
    """Shards of samples ``{'id', 'payload'}`` (incompressible); returns the sample count."""
    from streaming import MDSWriter
    total = config.shards * config.samples_per_shard
    payload = config.shard_bytes // config.samples_per_shard - 64
    rng = np.random.default_rng(0)
    with MDSWriter(out=out, columns={'id': 'int', 'payload': 'bytes'},
                   size_limit=config.shard_bytes) as writer:
        for i in range(total):
            writer.write({'id': i, 'payload': rng.bytes(payload)})
    return total


class Node:
    """One emulated node's processes, directories and port."""

    def __init__(self, index: int, work: str, shm_root: str) -> None:
        self.index = index
        self.shm = os.path.join(shm_root, f'node{index}')
        self.cache = os.path.join(work, f'cache{index}')
        self.process: subprocess.Popen | None = None
        os.makedirs(self.shm, exist_ok=True)

    def start(self, config: FleetConfig, phase_dir: str, world: int, node_rank: int,
              endpoint: str, master_port: int, remote: str, batch_size: int,
              resume: dict | None) -> None:
        os.makedirs(phase_dir, exist_ok=True)
        env = dict(os.environ, **CREDENTIALS, S3_ENDPOINT_URL=endpoint, MASTER_ADDR='127.0.0.1',
                   MASTER_PORT=str(master_port), PYTHONPATH=REPO)
        command = [sys.executable, '-m', 'benchmarks.fleet_node', '--node', str(node_rank),
                   '--ranks', str(config.ranks), '--outdir', phase_dir, '--world', str(world),
                   '--remote', remote, '--local', self.cache, '--batch-size', str(batch_size),
                   '--workers', str(config.workers),
                   '--checkpoint', os.path.join(os.path.dirname(phase_dir), 'checkpoint.pkl'),
                   '--checkpoint-every', str(config.checkpoint_every if resume is None else 0)]
        if resume is not None:
            command += ['--resume', resume['path'], '--first-step', str(resume['step'])]
        # A private mount namespace whose /dev/shm is this node's own directory.
        shell = 'mount --bind "$0" /dev/shm && exec "$@"'
        self.process = subprocess.Popen(
            ['unshare', '--mount', '--propagation', 'private', '--', 'sh', '-c', shell,
             self.shm, *command], env=env, cwd=REPO, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL every process of the node (its session)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def held_locks(self) -> list[str]:
        """Lock files in this node's /dev/shm that someone still holds."""
        held = []
        for root, _, files in os.walk(self.shm):
            for name in files:
                if name.endswith('.lock'):
                    with open(os.path.join(root, name), 'rb') as f:
                        try:
                            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        except BlockingIOError:
                            held.append(name)
        return held


def _node_report(link: LinkEmulator, node: int, ranks: list[dict]) -> dict[str, Any]:
    stats = link.stats(records=True, node=node)
    records = stats.pop('records')
    gets = [r for r in records if r[4].removeprefix('THROTTLED ').startswith('GET')]
    # The node's first second: from its first GET of a shard (not of the index).
    shard_gets = [r[0] for r in gets if '/shard.' in r[4]]
    late = [r for r in gets if r[0] >= min(shard_gets, default=0.0) + 1.0]
    shards_ok = [r for r in gets if '/shard.' in r[4] and not r[4].startswith('THROTTLED')]
    # The node's first burst of shard GETs (as many as its scheduler starts with): how far apart
    # they reach the store (the plan's ``send_gap_s``).
    burst = sorted(r[0] for r in gets if '/shard.' in r[4])[:Concurrency.START]
    base = stats['first_request_wall'] or 0.0
    samples = sum(r['samples'] for r in ranks)
    read = max((r['read_s'] for r in ranks), default=0.0)
    return {
        'time_to_first_batch_s': max((r['time_to_first_batch_s'] for r in ranks), default=None),
        'samples': samples, 'samples_per_s': samples / read if read else None,
        'gets': len(gets), 'throttled': stats['throttled'],
        'gets_after_1s': len(late),
        'throttled_after_1s': sum(r[4].startswith('THROTTLED') for r in late),
        'bytes': stats['bytes_out'], 'busy_span_s': stats['busy_span_s'],
        'first_request_wall': stats['first_request_wall'],
        'ok_gets': sum(not r[4].startswith('THROTTLED') for r in gets),
        'ok_shard_gets': len(shards_ok),
        'pacer_rate_at_end': max((r.get('pacer_rate') or 0 for r in ranks), default=0.0),
        # Egress: the shards' bytes this node fetched (answered GETs of shard files).
        'shard_bytes': sum(r[3] for r in shards_ok),
        # Wall clock of the node's first GET of a shard and of its last answer.
        'first_shard_get_wall': base + min(shard_gets) if shard_gets else None,
        'first_gets_gap_s': (burst[-1] - burst[0]) / (len(burst) - 1) if len(burst) > 1 else 0.0,
        'last_end_wall': base + max(r[2] for r in gets) if gets else None,
        # Per second since the node's first request: [GETs answered, GETs refused].
        'timeline': _per_second(gets),
    }


def _per_second(gets: list) -> list[list[int]]:
    seconds = int(max((r[0] for r in gets), default=0)) + 1
    timeline = [[0, 0] for _ in range(seconds)]
    for start, _, _, _, what in gets:
        timeline[int(start)][what.startswith('THROTTLED')] += 1
    return timeline


def _read_logs(phase_dir: str, upto: int | None = None) -> list[int]:
    ids: list[int] = []
    for name in sorted(os.listdir(phase_dir)):
        if name.endswith('.log'):
            with open(os.path.join(phase_dir, name)) as f:
                for line in f:
                    try:
                        step, batch = json.loads(line)
                    except ValueError:
                        continue  # A line cut short by SIGKILL.
                    if upto is None or step <= upto:
                        ids.extend(batch)
    return ids


def _rank_results(phase_dir: str) -> dict[int, dict]:
    out = {}
    for name in os.listdir(phase_dir):
        if name.startswith('rank') and name.endswith('.json'):
            with open(os.path.join(phase_dir, name)) as f:
                result = json.load(f)
            out[result['rank']] = result
    return out


def _run_phase(config: FleetConfig, link: LinkEmulator, nodes: list[Node], phase_dir: str,
               remote: str, batch_size: int, resume: dict | None = None,
               kill: Node | None = None, timeout: float = 900.0) -> dict[str, Any]:
    world = len(nodes) * config.ranks
    port = free_port()
    for node in range(len(link.endpoints)):
        link.reset(node)
    started = time.monotonic()
    for rank, node in enumerate(nodes):
        node.start(config, phase_dir, world, rank, link.endpoints[node.index], port, remote,
                   batch_size, resume)
    checkpoint = os.path.join(os.path.dirname(phase_dir), 'checkpoint.pkl')
    killed_at = None
    while any(n.process.poll() is None for n in nodes):  # type: ignore[union-attr]
        if kill is not None and killed_at is None and os.path.exists(checkpoint):
            kill.kill()
            killed_at = time.monotonic() - started
            time.sleep(0.5)
            for node in nodes:  # The job fails; its scheduler stops the rest.
                node.kill()
        if time.monotonic() - started > timeout:
            for node in nodes:
                node.kill()
            raise RuntimeError(f'the fleet did not finish in {timeout}s')
        time.sleep(0.1)
    wall = time.monotonic() - started
    codes = [n.process.returncode for n in nodes]  # type: ignore[union-attr]
    results = _rank_results(phase_dir)
    per_node = [_node_report(link, n.index, [results[r] for r in range(
        i * config.ranks, (i + 1) * config.ranks) if r in results]) for i, n in enumerate(nodes)]
    return {'wall_s': wall, 'exit_codes': codes, 'killed_at_s': killed_at, 'nodes': per_node}


def _totals(phase: dict[str, Any], config: FleetConfig, dataset_bytes: int = 0
            ) -> dict[str, Any]:
    nodes = phase['nodes']
    # Reading spans from the first GET of a shard by any node (the nodes start reading together,
    # after one barrier) to the last answer to any node.
    starts = [n['first_shard_get_wall'] for n in nodes if n['first_shard_get_wall']]
    ends = [n['last_end_wall'] for n in nodes if n['last_end_wall']]
    span = max(ends) - min(starts) if starts else 0.0
    ok = sum(n['ok_shard_gets'] for n in nodes)
    late = sum(n['gets_after_1s'] for n in nodes)
    total = {
        'span_s': span, 'gets': sum(n['gets'] for n in nodes), 'ok_gets': ok,
        'throttled': sum(n['throttled'] for n in nodes),
        'throttled_share_after_1s': sum(n['throttled_after_1s'] for n in nodes) / late
        if late else 0.0,
        'bytes': sum(n['bytes'] for n in nodes), 'samples': sum(n['samples'] for n in nodes),
        'shard_bytes': sum(n['shard_bytes'] for n in nodes),
        'first_shard_get_spread_s': max(starts) - min(starts) if starts else 0.0,
        'max_time_to_first_batch_s': max((n['time_to_first_batch_s'] or 0) for n in nodes),
    }
    if dataset_bytes:
        total['egress_vs_dataset'] = total['shard_bytes'] / dataset_bytes
    if config.allow_rps:
        total['useful_share_of_allowance'] = ok / span / config.allow_rps if span else 0.0
    return total


def run_fleet(config: FleetConfig, work: str | None = None) -> dict[str, Any]:
    """Run one fleet epoch (and a restart with ``kill_node``); the report."""
    if config.kill_node is not None and not 0 <= config.kill_node < config.nodes:
        raise ValueError(f'kill_node must lie in [0, {config.nodes}), got {config.kill_node}.')
    work = work or tempfile.mkdtemp(prefix='fleet-')
    shm_root = tempfile.mkdtemp(prefix='fleet-shm-', dir='/dev/shm')
    try:
        source = os.path.join(work, 'source')
        total = write_dataset(config, source)
        limits = None if not config.allow_rps else \
            StoreLimits(config.allow_rps, config.store, config.retry_after)
        profile = Profile(config.ttfb, config.conn_rate, config.link_rate)
        with MotoServer('fleet') as moto, \
                LinkEmulator(moto.endpoint, profile, config.nodes, limits,
                             config.bucket_rate) as link:
            moto.upload_dir(source, 'ds')
            remote = 's3://fleet/ds'
            nodes = [Node(i, work, shm_root) for i in range(config.nodes)]
            victim = None if config.kill_node is None else nodes[config.kill_node]
            first = _run_phase(config, link, nodes, os.path.join(work, 'phase1'), remote,
                               config.batch_size, kill=victim)
            shards = sum(os.path.getsize(os.path.join(source, name))
                         for name in os.listdir(source) if name.startswith('shard.'))
            report: dict[str, Any] = {'config': asdict(config), 'samples_in_epoch': total,
                                      'dataset_shard_bytes': shards, 'phase1': first,
                                      'total': _totals(first, config, shards)}
            if victim is None:
                ids = _read_logs(os.path.join(work, 'phase1'))
            else:
                report['restart'] = restart = _restart(config, link, nodes, work, remote)
                ids = restart.pop('ids')
            report['exactly_once'] = _exactly_once(ids, total)
            report['held_locks'] = {n.index: n.held_locks() for n in nodes if n.held_locks()}
            report['shm_entries'] = {n.index: sum(len(f) for _, _, f in os.walk(n.shm))
                                     for n in nodes}
        return report
    finally:
        shutil.rmtree(shm_root, ignore_errors=True)
        if work.startswith(tempfile.gettempdir()) and os.path.basename(work).startswith('fleet-'):
            shutil.rmtree(work, ignore_errors=True)


def _restart(config: FleetConfig, link: LinkEmulator, nodes: list[Node], work: str,
             remote: str) -> dict[str, Any]:
    """Phase 2: the job again from its last checkpoint, on every node but the last."""
    import pickle
    path = os.path.join(work, 'checkpoint.pkl')
    with open(path, 'rb') as f:
        saved = pickle.load(f)
    state_path = os.path.join(work, 'state.pkl')
    with open(state_path, 'wb') as f:
        pickle.dump(saved['state'], f)
    before = _read_logs(os.path.join(work, 'phase1'), upto=saved['step'])
    cached = {n.index: len(os.listdir(n.cache)) if os.path.isdir(n.cache) else 0
              for n in nodes}
    survivors = nodes[:-1]
    global_batch = config.batch_size * config.nodes * config.ranks
    batch = global_batch // (len(survivors) * config.ranks)
    if batch * len(survivors) * config.ranks != global_batch:
        raise ValueError(f'the global batch {global_batch} does not divide among '
                         f'{len(survivors)} nodes of {config.ranks} ranks.')
    phase = _run_phase(config, link, survivors, os.path.join(work, 'phase2'), remote, batch,
                       resume={'path': state_path, 'step': saved['step']})
    after = _read_logs(os.path.join(work, 'phase2'))
    return {'checkpoint_step': saved['step'], 'samples_before_checkpoint': len(before),
            'files_cached_before': cached, **phase, 'ids': before + after}


def _exactly_once(ids: list[int], total: int) -> dict[str, Any]:
    counts = np.bincount(np.asarray(ids, np.int64), minlength=total) if ids else \
        np.zeros(total, np.int64)
    return {'ok': bool(len(counts) == total and (counts == 1).all()),
            'missing': int((counts[:total] == 0).sum()), 'duplicated': int((counts > 1).sum())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    defaults = FleetConfig()
    for name, value in asdict(defaults).items():
        flag = '--' + name.replace('_', '-')
        kind = float if name in ('allow_rps', 'retry_after', 'bucket_rate', 'ttfb',
                                 'conn_rate', 'link_rate') else int
        if name == 'store':
            parser.add_argument(flag, choices=STYLES, default=value)
        else:
            parser.add_argument(flag, type=kind, default=value)
    parser.add_argument('--json', help='write the report here too')
    args = parser.parse_args(argv)
    config = FleetConfig(**{k: getattr(args, k) for k in asdict(defaults)})
    report = run_fleet(config)
    text = json.dumps(report, indent=1)
    if args.json:
        with open(args.json, 'w') as f:
            f.write(text)
    print(text)
    if not report['exactly_once']['ok']:
        sys.exit(1)


if __name__ == '__main__':
    main()
