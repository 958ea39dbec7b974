"""Predict a training run before paying for it (time to first batch, throughput, stalls, egress).

Prints bytes fetched and their cost, cache occupancy, GETs and shuffle quality too. It
reads only the index.json files of the dataset (or takes a synthetic description), replays the
run's real sample order through a model of the node's download schedule and cache over a link
profile (presets: same-region, cross-region, internet; or --ttfb, --conn-mbps, --link-mbps),
and prints a summary (--json for all figures, --html for a self-contained page with plots).
--suggest searches cache_limit, predownload, workers and shard size for the cheapest settings
meeting a target throughput. See docs/plan.md.

For example:
  streaming plan s3://bucket/dataset --nodes 4 --ranks-per-node 8 --workers 8 --batch-size 32
      --cache-limit 50gb --profile cross-region --html plan.html
  streaming plan --synthetic-samples 1b --shard-samples 10k --sample-bytes 2kb --nodes 16
"""

from __future__ import annotations

import argparse

HELP = 'predict a run\'s throughput, stalls, cache and egress from its index (a planner)'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('urls', nargs='*', help='dataset directories (local path or remote '
                        'URL), one stream each; or none with --synthetic-samples')
    data = parser.add_argument_group('synthetic dataset (instead of urls)')
    data.add_argument('--synthetic-samples', help='samples, e.g. 1b or 3000')
    data.add_argument('--shard-samples', default='10k', help='samples per shard (default 10k)')
    data.add_argument('--sample-bytes', default='1kb', help='bytes per sample (default 1kb)')
    run = parser.add_argument_group('run')
    run.add_argument('--nodes', type=int, default=1)
    run.add_argument('--ranks-per-node', type=int, help='devices per node (default 1; with '
                     '--yaml: its compute.gpus / --nodes)')
    run.add_argument('--workers', type=int, default=2, help='DataLoader workers per rank')
    run.add_argument('--batch-size', type=int, default=32, help='per-device batch size')
    run.add_argument('--epochs', type=int, default=1)
    run.add_argument('--proportions', type=float, nargs='+', help='one per stream (url)')
    run.add_argument('--no-shuffle', dest='shuffle', action='store_false')
    run.add_argument('--shuffle-algo', default='py1e')
    run.add_argument('--shuffle-block-size', type=int)
    run.add_argument('--num-canonical-nodes', type=int)
    run.add_argument('--seed', type=int, default=9176)
    run.add_argument('--cache-limit', help='per-node cache, e.g. 50gb (default: none)')
    run.add_argument('--predownload', type=int, help='samples per worker to fetch ahead '
                     '(default: the scheduler\'s byte-bounded lookahead)')
    run.add_argument('--steps-per-s', type=float, help='the model\'s speed (default: as fast '
                     'as data comes)')
    run.add_argument('--samples-per-s', type=float, help='the model\'s speed per node')
    link = parser.add_argument_group('link and store')
    link.add_argument('--profile', default='same-region', help='same-region, cross-region or '
                      'internet (default same-region)')
    link.add_argument('--ttfb', type=float, help='seconds to first byte')
    link.add_argument('--conn-mbps', type=float, help='MB/s per connection')
    link.add_argument('--link-mbps', type=float, help='MB/s per node')
    link.add_argument('--request-limit', type=float, help='the store\'s GETs/s for the run')
    link.add_argument('--store-rate', type=float, help='GETs/s the store begins answering, '
                      'one after another (default: each at once, --ttfb after it is sent)')
    link.add_argument('--price-per-gb', type=float, help='egress price per GiB')
    link.add_argument('--price-per-1k-gets', type=float)
    parser.add_argument('--yaml', metavar='FILE', help='the run (and dataset, unless urls are '
                        'given) from a reference simulator YAML; --nodes and --ranks-per-node '
                        'as its sim_cli takes them')
    out = parser.add_argument_group('output')
    out.add_argument('--html', metavar='FILE', help='write a self-contained HTML report')
    out.add_argument('--find-min-cache', action='store_true', default=None,
                     help='also search the smallest cache_limit with no refetch (a few more '
                     'plans; done anyway when the plan is quick)')
    out.add_argument('--suggest', action='store_true', help='search cheaper settings that meet '
                     '--target (samples/s per node)')
    out.add_argument('--target', type=float, help='target samples/s per node for --suggest')


def _count(name: str, text: str) -> int:
    from streaming.util import number_abbrev_to_int
    try:
        value = int(number_abbrev_to_int(text))
    except (ValueError, TypeError):
        raise ValueError(f'--{name} {text!r} is not a count (e.g. 3000, 10k, 1b)') from None
    if value < 1:
        raise ValueError(f'--{name} must be at least 1, got {text!r}')
    return value


def build(args: argparse.Namespace) -> tuple:
    """(DatasetShape, RunSettings, LinkProfile) from the command line."""
    from streaming.plan import DatasetShape, RunSettings, get_profile
    from streaming.util import bytes_to_int
    if args.synthetic_samples and args.urls:
        raise ValueError('give dataset urls or --synthetic-samples, not both')
    sim = None
    if args.yaml:
        from streaming.plan.simyaml import read_simulator_yaml
        sim = read_simulator_yaml(args.yaml)
        args.urls = args.urls or sim.urls
    if args.synthetic_samples:
        shape = DatasetShape.synthetic(_count('synthetic-samples', args.synthetic_samples),
                                       _count('shard-samples', args.shard_samples),
                                       int(bytes_to_int(args.sample_bytes)))
    elif args.urls:
        shape = DatasetShape.from_urls(args.urls)
    else:
        raise ValueError('give a dataset url (or several) or --synthetic-samples')
    if sim is not None:
        settings = sim.settings(args.nodes, args.ranks_per_node, shape.total_samples)
    else:
        settings = dict(nodes=args.nodes, ranks_per_node=args.ranks_per_node or 1,
                        workers=args.workers, batch_size=args.batch_size, epochs=args.epochs,
                        shuffle=args.shuffle, shuffle_algo=args.shuffle_algo,
                        shuffle_block_size=args.shuffle_block_size,
                        num_canonical_nodes=args.num_canonical_nodes, seed=args.seed,
                        cache_limit=args.cache_limit, predownload=args.predownload,
                        proportions=args.proportions)
    run = RunSettings(**settings, steps_per_s=args.steps_per_s,
                      samples_per_s=args.samples_per_s)
    mb = 1e6
    profile = get_profile(args.profile).replace(
        ttfb=args.ttfb, conn_rate=args.conn_mbps and args.conn_mbps * mb,
        link_rate=args.link_mbps and args.link_mbps * mb, request_limit=args.request_limit,
        store_rate=args.store_rate, price_per_gb=args.price_per_gb,
        price_per_1k_gets=args.price_per_1k_gets)
    return shape, run, profile


def run(args: argparse.Namespace) -> int:
    from streaming.plan import plan
    from streaming.plan.report import to_html, to_json, to_text
    shape, settings, profile = build(args)
    result = plan(shape, settings, profile, find_min_cache=args.find_min_cache,
                  suggest=args.suggest, suggest_target=args.target)
    if args.html:
        from streaming.fileio import atomic_write
        atomic_write(args.html, to_html(result))
    print(to_json(result) if args.json else to_text(result))
    return 0
