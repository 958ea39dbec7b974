"""Time to the first sample of each node of a K-node job, cold: does the last node wait?

Each node is a fresh process told by the launcher variables that it is node ``n`` of ``K``
(one rank per node, no process group needed for this), over an index-only scale dataset (its
shards are hard links to one real shard: ``cases/prepare.py``), with no set-up caches, so each
node computes the epoch's order itself as it would on its own machine. With ``py1e`` the order
is computed canonical row by canonical row from one random generator; node ``n`` reads about
row ``n * rows / K``. Reported per node: the median time from ``StreamingDataset(...)`` to its
first sample, and the CPU time.

    python benchmarks/multinode_start.py --prepare /tmp/scale-10M --samples 10M --shards 5000
    python benchmarks/multinode_start.py /tmp/scale-10M --nodes 64 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def child(path: str, algo: str) -> dict[str, float]:
    from streaming import StreamingDataset

    start, cpu = time.perf_counter(), time.process_time()
    dataset = StreamingDataset(local=path, batch_size=256, shuffle=True, shuffle_algo=algo)
    next(iter(dataset))
    return {'first_sample_s': time.perf_counter() - start,
            'first_sample_cpu_s': time.process_time() - cpu,
            'canonical_nodes': dataset.num_canonical_nodes}


def _node_run(path: str, algo: str, node: int, nodes: int) -> dict[str, float]:
    env = {**os.environ, 'RANK': str(node), 'WORLD_SIZE': str(nodes), 'LOCAL_RANK': '0',
           'LOCAL_WORLD_SIZE': '1', 'STREAMING_SETUP_CACHE': '0'}
    out = subprocess.run([sys.executable, __file__, '--child', path, algo], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _count(text: str) -> int:
    scale = {'K': 10**3, 'M': 10**6, 'B': 10**9}
    return int(float(text[:-1]) * scale[text[-1]]) if text[-1] in scale else int(text)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == '--child':
        print(json.dumps(child(sys.argv[2], sys.argv[3])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('path', nargs='?', help='an index-only scale dataset')
    parser.add_argument('--prepare', metavar='OUT', help='write an index-only dataset to OUT')
    parser.add_argument('--samples', default='10M')
    parser.add_argument('--shards', type=int, default=5000)
    parser.add_argument('--nodes', type=int, default=64)
    parser.add_argument('--which', default='first,last', help='nodes to time: first, last, '
                        'or numbers, comma-separated')
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--algo', default='py1e')
    args = parser.parse_args()
    if args.prepare:
        sys.path.insert(0, os.path.join(HERE, 'cases'))
        from prepare import prepare_scale
        prepare_scale('ours', {'samples': _count(args.samples), 'shards': args.shards,
                               'out': args.prepare})
        return
    names = {'first': 0, 'last': args.nodes - 1}
    nodes = [names.get(n, None) if n in names else int(n) for n in args.which.split(',')]
    runs: dict[int, list[dict[str, float]]] = {node: [] for node in nodes}
    for _ in range(args.repeats):
        for node in nodes:  # Interleaved: the machine's load falls on every node alike.
            runs[node].append(_node_run(args.path, args.algo, node, args.nodes))
    print(f'{args.algo}, {args.nodes} nodes ({runs[nodes[0]][0]["canonical_nodes"]} canonical), '
          f'medians of {args.repeats} fresh processes, cold:')
    first = statistics.median(r['first_sample_s'] for r in runs[nodes[0]])
    for node in nodes:
        wall = [r['first_sample_s'] for r in runs[node]]
        cpu = [r['first_sample_cpu_s'] for r in runs[node]]
        print(f'  node {node:4}: first sample {statistics.median(wall):6.2f} s '
              f'({min(wall):.2f}-{max(wall):.2f}), CPU {statistics.median(cpu):6.2f} s, '
              f'{statistics.median(wall) / first:.2f}x node {nodes[0]}')


if __name__ == '__main__':
    main()
