"""The CPU of shard downloads alone, without readers: ``download_file`` per shard through a link.

Issue 31: through the same-region link, 2 KiB tokens in 500 KB shards spend a fixed ~5 ms of
CPU per shard on the download side. This isolates that part: one link (``linkemu_kernel``,
falling back to the proxy), one upload of a local dataset directory, then, for each source
tree in turn (``--src A --src B``: alternated, ``--pairs`` rounds), a fresh process that
downloads every shard with its size passed (as the dataset does) from a thread pool into a
scratch directory, and reports its own user + system CPU. Trees are compared in the same
link, in alternation, so a change of machine load falls on both.

    flock /work/bench.lock python -m benchmarks.shard_downloads \\
        --src /work/wt/base38 --src /work/wt/mine --pairs 3

Figures go to docs/benchmarks.md (issue 31 notes), with the load average printed here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

from benchmarks.linkemu import PROFILES
from benchmarks.linkemu_kernel import open_link
from benchmarks.server_cpu import ServerCpu

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DATA = os.path.join(REPO, 'benchmarks', '.data', 'link', 'ours', 'tokens-500000')

# Run in a fresh interpreter with the tree under test first on the path.
CHILD = r'''
import json, os, shutil, sys, time
from concurrent.futures import ThreadPoolExecutor
from streaming.fileio import load_preallocate
from streaming.storage.download import download_file
args = json.loads(sys.argv[1])
load_preallocate()
dest, base, files = args['dest'], args['base'], args['files']
shutil.rmtree(dest, ignore_errors=True)
os.makedirs(dest)
def one(item):
    name, size = item
    download_file(f'{base}/{name}', os.path.join(dest, name), size=size, timeout=60)
one(files[0])  # Imports, the first connection: not the per-shard cost.
before, wall = os.times(), time.monotonic()
with ThreadPoolExecutor(args['threads']) as pool:
    list(pool.map(one, files[1:]))
after, wall = os.times(), time.monotonic() - wall
user, system = after.user - before.user, after.system - before.system
count, size = len(files) - 1, sum(s for _, s in files[1:])
shutil.rmtree(dest, ignore_errors=True)
print(json.dumps({'shards': count, 'bytes': size, 'user_s': user, 'system_s': system,
                  'wall_s': wall, 'ms_per_shard': 1e3 * (user + system) / count,
                  'cpu_s_per_gb': (user + system) / (size / 1e9), 'mb_per_s': size / wall / 1e6}))
'''


def run_one(src: str, endpoint: str, prefix: str, files: list[tuple[str, int]], scratch: str,
            threads: int, wrap: list[str]) -> dict[str, Any]:
    """One fresh process of ``src`` downloading ``files``; its CPU and rate."""
    env = {**os.environ, 'PYTHONPATH': src, 'S3_ENDPOINT_URL': endpoint,
           'AWS_ACCESS_KEY_ID': 'testing', 'AWS_SECRET_ACCESS_KEY': 'testing'}
    args = {'dest': scratch, 'base': f's3://linkbench/{prefix}', 'files': files,
            'threads': threads}
    done = subprocess.run([*wrap, sys.executable, '-c', CHILD, json.dumps(args)], env=env, cwd=src,
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f'{src}: {done.stderr[-2000:]}')
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--src', action='append', required=True, help='a source tree to measure')
    parser.add_argument('--pairs', type=int, default=3, help='rounds over the trees')
    parser.add_argument('--threads', type=int, default=64)
    parser.add_argument('--profile', default='same-region', choices=sorted(PROFILES))
    parser.add_argument('--link', default='kernel', choices=('kernel', 'proxy', 'auto'))
    parser.add_argument('--wrap', default='', help='a command prefix for the measured process '
                        '(e.g. "perf record -g -o out.data --")')
    parser.add_argument('--close-connections', action='store_true',
                        help='the kernel link\'s server closes every connection after one '
                             'request (werkzeug\'s server; the default keeps them, as S3 does)')
    parser.add_argument('--data', default=DEFAULT_DATA, help='a directory of shards')
    parser.add_argument('--scratch', default=os.path.join(REPO, 'benchmarks', '.data', 'link',
                                                          'scratch', 'shard-downloads'))
    args = parser.parse_args(argv)
    files = sorted((name, os.path.getsize(os.path.join(args.data, name)))
                   for name in os.listdir(args.data) if name != 'index.json')
    os.environ.update({'AWS_ACCESS_KEY_ID': 'testing', 'AWS_SECRET_ACCESS_KEY': 'testing'})
    results: dict[str, list[dict[str, Any]]] = {src: [] for src in args.src}
    with open_link(PROFILES['uncapped'], 'linkbench', args.link,
                   keep_alive=not args.close_connections) as link:
        link.upload_dir(args.data, 'shards')
        link.set_profile(PROFILES[args.profile])
        for round_ in range(args.pairs):
            for src in args.src:
                with ServerCpu(link.server_pids()) as server_cpu:
                    result = run_one(src, link.endpoint, 'shards', files, args.scratch,
                                     args.threads, args.wrap.split())
                result['server_ms_per_shard'] = 1e3 * server_cpu.server_s / result['shards']
                result['load'] = os.getloadavg()[0]
                results[src].append(result)
                print(f'#{round_} {src}: {result["ms_per_shard"]:.2f} ms a shard '
                      f'(user {result["user_s"]:.2f} + system {result["system_s"]:.2f} s), '
                      f'{result["cpu_s_per_gb"]:.1f} CPU-s/GB, {result["mb_per_s"]:.1f} MB/s, '
                      f'server {result["server_ms_per_shard"]:.2f} ms a shard, '
                      f'load {result["load"]:.2f}', flush=True)
    for src, runs in results.items():
        cost = sorted(r['ms_per_shard'] for r in runs)
        print(f'{src}: median {cost[len(cost) // 2]:.2f} ms a shard '
              f'({", ".join(f"{c:.2f}" for c in cost)})')


if __name__ == '__main__':
    main()
