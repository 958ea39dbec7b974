"""Estimate download egress for a training run, from a real index.

Each node downloads the shards its samples live in. With a cache that holds the whole dataset,
a node downloads each shard it touches once per run; a smaller --cache-limit makes it download
shards again when they were evicted (least recently used first). The estimate replays the
actual sample order of every epoch (the same order StreamingDataset uses for these settings)
through each node's cache, evicting the least recently used shard as the reference does (so
it is an upper estimate for this library's cache), and also prints the simple baseline of
every node downloading the whole dataset every epoch (dataset bytes x nodes x epochs). Under a
cache limit the shuffle block size is capped as the dataset caps it (a block's shards must fit),
so the order replayed is the one the dataset reads; docs/fleet-egress.md compares the estimate
with what emulated nodes fetched.

For example:
  streaming cost s3://bucket/dataset --nodes 8 --epochs 3 --cache-limit 50gb --price-per-gb 0.09
"""

from __future__ import annotations

import argparse
from collections import OrderedDict
from typing import Any

from streaming.cli.common import emit, human_bytes
from streaming.dataset_dir import DatasetDir, find_datasets

HELP = 'estimate egress (bytes downloaded by all nodes over all epochs) for a run'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('url', help='dataset directory (local path or remote URL)')
    parser.add_argument('--split', help='a split (subdirectory) of the dataset')
    parser.add_argument('--nodes', type=int, default=1, help='physical nodes (default 1)')
    parser.add_argument('--ranks-per-node', type=int, default=8, help='devices per node '
                        '(default 8)')
    parser.add_argument('--workers-per-rank', type=int, default=8, help='dataloader workers per '
                        'device (default 8)')
    parser.add_argument('--batch-size', type=int, default=32, help='per-device batch size')
    parser.add_argument('--epochs', type=int, default=1)
    parser.add_argument('--cache-limit', help='per-node cache size, e.g. 100gb (default: no '
                        'limit)')
    parser.add_argument('--no-shuffle', dest='shuffle', action='store_false')
    parser.add_argument('--shuffle-algo', default='py1e')
    parser.add_argument('--shuffle-block-size', type=int)
    parser.add_argument('--num-canonical-nodes', type=int)
    parser.add_argument('--seed', type=int, default=9176)
    parser.add_argument('--price-per-gb', type=float, help='egress price per GiB, for a cost')


def _block_size(shards: list[dict[str, Any]], args: Any, limit: int | None,
                num_canonical_nodes: int) -> int:
    """The shuffle block size a dataset would use (capped as the dataset caps it).

    The given or default one, capped so that the shards of a block fit in the cache limit.
    """
    import numpy as np

    from streaming.cache.budget import samples_that_fit
    from streaming.order.shuffles import default_shuffle_block_size
    block = args.shuffle_block_size or default_shuffle_block_size(num_canonical_nodes)
    peak = np.array([_raw_bytes(e) + _zip_bytes(e) for e in shards], np.int64)
    cap = samples_that_fit(limit, peak, np.array([e['samples'] for e in shards], np.int64))
    return block if cap is None else min(block, cap)


def _raw_bytes(entry: dict[str, Any]) -> int:
    return entry['raw_data']['bytes'] + (entry.get('raw_meta') or {}).get('bytes', 0)


def _zip_bytes(entry: dict[str, Any]) -> int:
    return (entry.get('zip_data') or {}).get('bytes', 0) + \
        (entry.get('zip_meta') or {}).get('bytes', 0)


def _node_sequences(shards: list[dict[str, Any]], args: Any, epoch: int,
                    limit: int | None = None) -> list[Any]:
    """Per node: the shard of every sample it reads this epoch, in reading order."""
    import numpy as np

    from streaming.order.plan import get_epoch_order
    from streaming.order.shuffles import default_num_canonical_nodes
    sizes = np.array([e['samples'] for e in shards], np.int64)
    ncn = args.num_canonical_nodes or default_num_canonical_nodes(args.shuffle_algo, args.nodes)
    order = get_epoch_order(
        shard_sizes=sizes, shard_streams=np.zeros(len(sizes), np.int64),
        stream_choose=np.array([sizes.sum()], np.int64), epoch=epoch, seed=args.seed,
        shuffle=args.shuffle, shuffle_algo=args.shuffle_algo,
        shuffle_block_size=_block_size(shards, args, limit, ncn), num_canonical_nodes=ncn,
        num_physical_nodes=args.nodes, ranks_per_node=args.ranks_per_node,
        workers_per_rank=args.workers_per_rank, batch_size=args.batch_size)
    starts = np.cumsum(sizes) - sizes
    out = []
    for node in order:  # (ranks, workers, batches, batch): read batch by batch, workers in turn.
        steps = node.transpose(2, 1, 0, 3).reshape(-1)
        ids = steps[steps >= 0]
        seq = np.searchsorted(starts, ids, side='right') - 1
        keep = np.ones(len(seq), bool)
        keep[1:] = seq[1:] != seq[:-1]
        out.append(seq[keep])
    return out


def estimate(shards: list[dict[str, Any]], args: Any) -> dict[str, Any]:
    from streaming.util import bytes_to_int
    fetched = [(e['zip_data'] or e['raw_data'])['bytes'] + (
        (e.get('zip_meta') or e.get('raw_meta') or {}).get('bytes', 0)) for e in shards]
    held = [_raw_bytes(e) for e in shards]
    limit = bytes_to_int(args.cache_limit) if args.cache_limit else None
    if limit is not None and shards and limit < max(held):
        raise ValueError(f'--cache-limit {args.cache_limit} is smaller than the largest shard '
                         f'({max(held)} bytes); no run could make progress.')
    caches: list[OrderedDict] = [OrderedDict() for _ in range(args.nodes)]
    used = [0] * args.nodes
    per_epoch = []
    for epoch in range(args.epochs):
        total = 0
        for node, seq in enumerate(_node_sequences(shards, args, epoch, limit)):
            cache = caches[node]
            for shard in seq.tolist():
                if shard in cache:
                    cache.move_to_end(shard)
                    continue
                total += fetched[shard]
                cache[shard] = None
                used[node] += held[shard]
                while limit is not None and used[node] > limit:
                    old, _ = cache.popitem(last=False)
                    used[node] -= held[old]
        per_epoch.append(total)
    dataset_bytes = sum(fetched)
    result = {'shards': len(shards), 'dataset_bytes': dataset_bytes, 'nodes': args.nodes,
              'epochs': args.epochs, 'cache_limit': limit, 'egress_per_epoch': per_epoch,
              'egress_bytes': sum(per_epoch),
              'baseline_bytes': dataset_bytes * args.nodes * args.epochs}
    if args.price_per_gb is not None:
        result['cost'] = round(sum(per_epoch) / (1 << 30) * args.price_per_gb, 6)
    return result


def run(args: argparse.Namespace) -> int:
    for name in ('nodes', 'ranks_per_node', 'batch_size', 'epochs'):
        if getattr(args, name) < 1:
            raise ValueError(f'--{name.replace("_", "-")} must be at least 1.')
    shards = []
    for url in find_datasets(args.url, args.split):
        ds = DatasetDir(url)
        shards += ds.index['shards']
        ds.close()
    r = estimate(shards, args)
    cost = f', about {r["cost"]} at {args.price_per_gb}/GiB' if 'cost' in r else ''
    text = '\n'.join([
        f'dataset: {r["shards"]} shards, {human_bytes(r["dataset_bytes"])} to download',
        f'run: {r["nodes"]} node(s) x {r["epochs"]} epoch(s), cache limit '
        f'{human_bytes(r["cache_limit"]) if r["cache_limit"] else "none"}',
        'egress per epoch: ' + ', '.join(human_bytes(b) for b in r['egress_per_epoch']),
        f'total egress: {human_bytes(r["egress_bytes"])}{cost}',
        f'baseline (every node downloads the dataset every epoch): '
        f'{human_bytes(r["baseline_bytes"])}'])
    emit(args, r, text)
    return 0
