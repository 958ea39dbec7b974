"""The one command: ``.venv/bin/python -m benchmarks.run [--quick] [--cases ...] [--repeats N]``.

Builds the reference and LitData envs if missing, generates the datasets if missing, runs every
case for each implementation as separate processes (alternating, ``--repeats`` times), and writes
the JSON record, the markdown page and the chart. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import time
from contextlib import ExitStack
from typing import Any

from benchmarks import envs, machine, report
from benchmarks.aggregate import summarise
from benchmarks.competing_load import competing_load
from benchmarks.config import (
    FULL,
    GROUPS,
    LITDATA,
    MACHINE,
    OURS,
    QUICK,
    REFERENCE,
    Case,
    Context,
    build_cases,
    count_label,
    dataset_specs,
)
from benchmarks.data import ensure_dataset, ensure_sources
from benchmarks.runner import log, run_case

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ALL_IMPLS = (OURS, REFERENCE, LITDATA)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog='python -m benchmarks.run', description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--quick', action='store_true',
                        help='small datasets and 1 repeat: a few minutes, for development')
    parser.add_argument('--cases', nargs='+', choices=list(GROUPS), metavar='GROUP',
                        help=f'case groups to run (default: all): {", ".join(GROUPS)}')
    parser.add_argument('--match', nargs='+', metavar='TEXT',
                        help='run only the cases whose id contains one of these, e.g. '
                        'read_plain/images/w2')
    parser.add_argument('--repeats', type=int, help='runs per case and implementation '
                        f'(default {FULL.repeats}, quick {QUICK.repeats})')
    parser.add_argument('--impls', nargs='+', choices=ALL_IMPLS, default=list(ALL_IMPLS),
                        help='implementations to run (default: all)')
    parser.add_argument('--data-dir', default=os.path.join(HERE, '.data'),
                        help='where datasets are generated and cached (default benchmarks/.data)')
    parser.add_argument('--competing-load', type=int, default=0, metavar='N',
                        help='N busy processes beside every run (benchmarks.competing_load)')
    parser.add_argument('--out', help='write <out>.json/.md/.png instead of the default '
                        '(docs/benchmarks.* for a complete full run, else benchmarks/results/)')
    return parser.parse_args(argv)


def output_paths(args: argparse.Namespace, complete: bool) -> tuple[str, str, str]:
    """(json, markdown, png) paths: the docs page only for a complete full run."""
    if args.out:
        return f'{args.out}.json', f'{args.out}.md', f'{args.out}.png'
    results = os.path.join(HERE, 'results')
    if complete:
        return (os.path.join(results, 'latest.json'), os.path.join(REPO, 'docs', 'benchmarks.md'),
                os.path.join(REPO, 'docs', 'benchmarks.png'))
    name = 'quick' if args.quick else 'partial'
    return tuple(os.path.join(results, f'{name}.{ext}')  # type: ignore[return-value]
                 for ext in ('json', 'md', 'png'))


def prepare_data(cases: list[Case], ctx: Context, python: dict[str, str], timeout: float
                 ) -> dict[str, dict[str, str]]:
    """Sources and every implementation's datasets; returns case id -> {impl: why blocked}."""
    ensure_sources(ctx, {'tokens', 'images', 'tiny'})
    specs = dataset_specs(ctx.scale)
    failed: dict[tuple[str, str], str] = {}
    blocked: dict[str, dict[str, str]] = {}
    for case in cases:
        for impl in case.impls:
            for name in case.datasets:
                key = (OURS if impl == MACHINE else impl, name)
                if key not in failed:
                    failed[key] = ensure_dataset(ctx, impl, python[impl], specs[name],
                                                 timeout) or ''
                if failed[key]:
                    blocked.setdefault(case.id, {})[impl] = failed[key]
    return blocked


def start_s3(stack: ExitStack, cases: list[Case], ctx: Context,
             blocked: dict[str, dict[str, str]]) -> None:
    """Start the loopback S3 server and upload each implementation's remote dataset once."""
    remote = [case for case in cases if case.needs_s3]
    if not remote:
        return
    try:
        from benchmarks.s3 import MotoServer
        server = stack.enter_context(MotoServer(ctx.s3_bucket))
    except Exception as error:  # moto missing, or the server did not start.
        for case in remote:
            for impl in case.impls:
                blocked.setdefault(case.id, {})[impl] = f'no S3 server: {error}'
        return
    ctx.s3_endpoint = server.endpoint
    uploaded = set()
    for case in remote:
        for impl in case.impls:
            if impl in uploaded or impl in blocked.get(case.id, {}):
                continue
            log(f'[s3] uploading {impl} remote-tokens ...')
            server.upload_dir(ctx.dataset_dir(impl, 'remote-tokens'), f'{impl}/tokens')
            uploaded.add(impl)


def describe_datasets(ctx: Context) -> str:
    s = ctx.scale.samples
    scale = ', '.join(count_label(n) for n in ctx.scale.scale_samples)
    return (f'tokens {s["tokens"]:,} x 2 KiB; images {s["images"]:,} x ~100 KB; tiny '
            f'{s["tiny"]:,} x ~{ctx.payload_per_sample.get("tiny", 48):.0f} B; epoch setup '
            f'{scale} samples in {count_label(ctx.scale.scale_shards)} shards')


def versions(python: dict[str, str]) -> dict[str, str]:
    found = {}
    wanted = {OURS: ('shardflow', 'ours'), REFERENCE: ('mosaicml-streaming', 'reference'),
              LITDATA: ('litdata', 'litdata')}
    for impl, (dist, key) in wanted.items():
        if impl in python:
            got = envs.distribution_versions(python[impl], [dist, 'torch'])
            found[key] = got[dist]
            found.setdefault('torch', got['torch'])
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    scale = QUICK if args.quick else FULL
    repeats = args.repeats or scale.repeats
    cases = [dataclasses.replace(case, impls=tuple(i for i in case.impls
                                                    if i in args.impls or i == MACHINE))
             for case in build_cases(scale, args.cases)
             if not args.match or any(text in case.id for text in args.match)]
    facts = machine.facts(REPO)
    needed = {impl for case in cases for impl in case.impls}
    python = envs.pythons(needed)
    data_dir = os.path.join(os.path.abspath(args.data_dir), scale.name)
    ctx = Context(data_dir=data_dir, scale=scale, scratch=os.path.join(data_dir, 'scratch'))
    blocked = prepare_data(cases, ctx, python, scale.timeout * 3)
    records_runs: dict[str, Any] = {}
    with ExitStack() as stack:
        start_s3(stack, cases, ctx, blocked)
        stack.enter_context(competing_load(args.competing_load))
        log(f'running {len(cases)} cases x {repeats} repeats ...')
        for case in cases:
            records_runs[case.id] = run_case(
                case, ctx, python, repeats, scale.timeout, blocked.get(case.id, {}),
                progress=lambda line: log(f'[{(time.perf_counter() - started) / 60:5.1f} min] '
                                          f'{line}'))
    shutil.rmtree(ctx.scratch, ignore_errors=True)
    complete = not args.quick and not args.cases and not args.match and \
        set(args.impls) == set(ALL_IMPLS) and not args.competing_load
    doc = {
        'meta': {'mode': scale.name, 'repeats': repeats, 'machine': facts,
                 'versions': versions(python), 'datasets': describe_datasets(ctx),
                 'load_average_after': [round(x, 2) for x in os.getloadavg()],
                 'elapsed_min': (time.perf_counter() - started) / 60, 'complete': complete,
                 'competing_load': args.competing_load,
                 'command': ' '.join([report.COMMAND, *(argv if argv is not None
                                                        else sys.argv[1:])])},
        'cases': summarise(cases, records_runs),
    }
    json_path, md_path, png_path = output_paths(args, complete)
    report.write_all(doc, json_path, md_path, png_path)
    log(f'done in {doc["meta"]["elapsed_min"]:.1f} min: {json_path}, {md_path}, {png_path}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
