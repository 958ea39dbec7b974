"""The ``verify`` and ``mix`` cases of ``benchmarks/tokens_bench.py`` (run them through it:
``tokens_bench.py --cases verify mix``; its docstring describes them)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.tokens_common import MIB, median, write_shards
from streaming.util import bytes_to_int


# ---- verification -----------------------------------------------------------------------------
def bench_verify(args: argparse.Namespace, scratch: str) -> dict:
    import numpy as np

    from streaming.tokens import ShardRotation, list_shards
    from streaming.tokens import verify as verify_module
    from streaming.tokens.format import read_npy_layout
    root = os.path.join(scratch, 'verify-remote')
    write_shards(root, bytes_to_int(args.shard_size), args.seq_len)
    shards, _ = list_shards(root)
    path, ids = os.path.join(root, shards[0].tokens_name), os.path.join(root, shards[0].ids_name)
    layout = read_npy_layout(path)
    size = os.path.getsize(path)
    cpu_rates = []
    for _ in range(args.repeats):
        started, cpu = time.perf_counter(), time.thread_time()
        assert verify_module.find_mismatch(path, ids, seq_len=args.seq_len, offset=layout.offset,
                                           itemsize=4) is None
        cpu = time.thread_time() - cpu
        cpu_rates.append(size / cpu / MIB)
        print(f'  hash: {size / MIB:.0f} MiB in {time.perf_counter() - started:.2f} s wall, '
              f'{cpu:.2f} s CPU = {cpu_rates[-1]:.0f} MiB/s per core', flush=True)
    rate = median(cpu_rates)
    tokens_per_core = rate * MIB / 4
    spent: dict[str, float] = {}
    real = verify_module.find_mismatch

    def timed(file, *a, **k):  # The hashing thread's CPU time, whichever thread runs it.
        began = time.thread_time()
        try:
            return real(file, *a, **k)
        finally:
            name = os.path.basename(file)
            spent[name] = spent.get(name, 0.0) + time.thread_time() - began

    verify_module.find_mismatch = timed
    batch_tokens = args.batch * args.seq_len
    pace = batch_tokens / args.train_tokens_per_s
    runs: dict[str, list[dict]] = {'on': [], 'off': [], 'restart': []}
    try:
        for _ in range(args.repeats):
            for mode in ('on', 'off', 'restart'):
                local = tempfile.mkdtemp(prefix='verify-', dir=scratch)
                if mode == 'restart':  # Shards 0 and 1 on disk, verified by a run now ended.
                    _verified_by_an_ended_run(root, local, args.seq_len)
                spent.clear()
                with ShardRotation(shards, local, seq_len=args.seq_len, keep=2,
                                   verify=mode != 'off') as rotation:
                    ds = rotation.dataset
                    ds.batch(np.arange(args.batch))  # shard 0 checked on use from here
                    began, steps = time.perf_counter(), 0
                    window = ds.num_tokens / args.train_tokens_per_s
                    rng = np.random.default_rng(0)
                    while time.perf_counter() - began < window:
                        ds.batch(rng.integers(0, len(ds), args.batch))
                        steps += 1
                        time.sleep(max(0.0, began + steps * pace - time.perf_counter()))
                    trained = time.perf_counter() - began
                    started = time.perf_counter()
                    rotation.advance()
                    wait = time.perf_counter() - started
                    rotation.close(wait=True)
                # Steady state: the prefetched shard 1, hashed while shard 0 trains (shard 0's
                # own check, once at start-up, is reported apart).
                cpu = spent.get(shards[1].tokens_name, 0.0)
                first = spent.get(shards[0].tokens_name, 0.0)
                runs[mode].append({'window_s': trained, 'wait_ms': wait * 1000,
                                   'verify_cpu_s': cpu, 'first_shard_cpu_s': first,
                                   'cpu_share': cpu / trained})
                print(f'  verify {mode:<3}: window {trained:5.1f} s, swap wait '
                      f'{wait * 1000:6.2f} ms, next shard verified in {cpu:5.2f} CPU s = '
                      f'{cpu / trained:.2%} of a core (first shard, at start-up: {first:.2f} '
                      f'CPU s)', flush=True)
                shutil.rmtree(local)
    finally:
        verify_module.find_mismatch = real
        shutil.rmtree(root, ignore_errors=True)
    result = {'shard_mib': size / MIB, 'hash_mib_s_per_core': rate,
              'hash_tokens_s_per_core_uint32': tokens_per_core,
              'train_tokens_per_s': args.train_tokens_per_s, 'runs': runs,
              'cpu_share_at_train_speed': args.train_tokens_per_s / tokens_per_core,
              'max_train_tokens_s_at_5pct': 0.05 * tokens_per_core,
              'measured_cpu_share_median': median([r['cpu_share'] for r in runs['on']]),
              'wait_ms_on': median([r['wait_ms'] for r in runs['on']]),
              'wait_ms_off': median([r['wait_ms'] for r in runs['off']]),
              'wait_ms_restart': median([r['wait_ms'] for r in runs['restart']]),
              'restart_first_shard_cpu_s': median([r['first_shard_cpu_s']
                                                   for r in runs['restart']]),
              'restart_cpu_share': median([r['cpu_share'] for r in runs['restart']])}
    print(f'  median: hashing {rate:.0f} MiB/s per core; at {args.train_tokens_per_s:,.0f} '
          f'uint32 tokens/s verification takes {result["cpu_share_at_train_speed"]:.2%} of a '
          f'core (measured in the run: {result["measured_cpu_share_median"]:.2%}); 5% holds up '
          f'to {result["max_train_tokens_s_at_5pct"]:,.0f} tokens/s; swap wait '
          f'{result["wait_ms_on"]:.2f} ms verified vs {result["wait_ms_off"]:.2f} ms not',
          flush=True)
    print(f'  restart over verified shards: each checked again, the first '
          f'{result["restart_first_shard_cpu_s"]:.2f} CPU s at start-up, the next '
          f'{result["restart_cpu_share"]:.2%} of a core; swap wait '
          f'{result["wait_ms_restart"]:.2f} ms', flush=True)
    return result


def _verified_by_an_ended_run(remote: str, local: str, seq_len: int) -> None:
    """Fetch and verify shards 0 and 1 into ``local`` in a process that then exits."""
    code = ('import sys\n'
            'from streaming.tokens import list_shards\n'
            'from streaming.tokens.store import ShardStore\n'
            'shards, _ = list_shards(sys.argv[1])\n'
            'store = ShardStore(sys.argv[2])\n'
            'for shard in shards[:2]:\n'
            '    store.fetch(shard)\n'
            '    store.verify(shard, int(sys.argv[3]))\n')
    subprocess.run([sys.executable, '-c', code, remote, local, str(seq_len)], check=True)


# ---- mixing -----------------------------------------------------------------------------------
def bench_mix(args: argparse.Namespace, scratch: str) -> dict:
    from streaming.tokens import ShardRotation, TokenMix, list_shards
    from streaming.world import World
    world, steps = World(0, 1, 0, 1), 200
    sources = {}
    for name in ('web', 'code', 'math'):
        root = os.path.join(scratch, f'mix-{name}')
        write_shards(root, bytes_to_int(args.shard_size), args.seq_len)
        shards, _ = list_shards(root)
        sources[name] = ShardRotation(shards, os.path.join(scratch, f'mix-local-{name}'),
                                      seq_len=args.seq_len, keep=None, prefetch=0, world=world)
        sources[name].dataset.batch(range(len(sources[name].dataset)))  # checked, warm
    for rotation in sources.values():  # Time the steady state: background checks done.
        while not rotation.store.verified(rotation.shards[0], args.seq_len):
            time.sleep(0.05)
    mix = TokenMix(sources, {'web': 0.7, 'code': 0.2, 'math': 0.1}, batch_size=args.batch)
    # Steps that stay within each source's first shard (no swap inside the timing).
    steps = min(steps, len(sources['math'].dataset) // args.batch * 10 // (args.repeats * 2),
                len(sources['web'].dataset) // args.batch // args.repeats)
    for step in range(5):  # Warm up, untimed (a first step imports numpy.ma, ~0.5 s here).
        mix.batch(step)
    size = args.batch * args.seq_len * 4
    rates: dict[str, list[float]] = {'mix': [], 'single': []}
    for repeat in range(args.repeats):
        started = time.perf_counter()
        for step in range(5 + repeat * steps, 5 + (repeat + 1) * steps):
            mix.batch(step)
        rates['mix'].append(steps * size / (time.perf_counter() - started) / MIB)
        started = time.perf_counter()
        for count, _ in enumerate(sources['web'].batches(args.batch, seed=repeat), 1):
            if count == steps:
                break
        rates['single'].append(steps * size / (time.perf_counter() - started) / MIB)
        print(f'  mix {rates["mix"][-1]:7.0f} MiB/s, one source {rates["single"][-1]:7.0f} '
              f'MiB/s', flush=True)
    mix.close()
    result = {'mix_mib_s': median(rates['mix']), 'single_mib_s': median(rates['single']),
              'runs': rates, 'steps': steps}
    result['mix_vs_single'] = result['mix_mib_s'] / result['single_mib_s']
    per_step = size / MIB / result['mix_mib_s'] * 1e6
    print(f'  median: mixed batches {result["mix_mib_s"]:.0f} MiB/s = '
          f'{result["mix_vs_single"]:.0%} of one source\'s ({result["single_mib_s"]:.0f} MiB/s); '
          f'{per_step:.0f} us a step', flush=True)
    return result
