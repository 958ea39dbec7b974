"""Re-decodes of compressed Parquet units in a shuffled epoch, against the decode budgets.

    python benchmarks/decode_thrash.py [--units 16] [--unit-mb 2] [--out results.json]

``--units`` snappy Parquet files of one row group (unit) each, of about ``--unit-mb`` MB decoded
each (2 KiB rows), read shuffled (``--algo``, py1e) for one epoch by a fresh process per case:
0 and 2
DataLoader workers, decode budget (``STREAMING_DECODED_BYTES``, and with workers
``STREAMING_SHARED_DECODED_BYTES`` too) at a quarter, a half, one and two times the decoded
size, ``shuffle_block_size`` the whole dataset, 4 units and 1 unit. Per case: the node's decodes
per unit (``dataset.cache.decoded.decodes()``), the epoch's seconds and the re-decode warning
(``decoded_units``) logged or not. ``STREAMING_BENCH_SRC=/a/checkout`` measures that checkout.
Results: docs/sources/parquet.md "Shuffled reads larger than the decode budget".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROW_BYTES = 2048


def make_files(directory: str, units: int, rows_per_unit: int) -> None:
    """``units`` files of one row group (a unit each: small row groups of one file would be
    merged into one unit) of ``rows_per_unit`` rows of ~2 KiB, compressible about 2:1."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = np.random.default_rng(0)
    rows = units * rows_per_unit
    half = rng.integers(0, 256, (rows, ROW_BYTES // 2), dtype=np.uint8)
    payload = np.concatenate([half, np.zeros_like(half)], axis=1)
    for unit in range(units):
        part = slice(unit * rows_per_unit, (unit + 1) * rows_per_unit)
        table = pa.table({'id': np.arange(rows, dtype=np.int64)[part],
                          'data': pa.array([row.tobytes() for row in payload[part]],
                                           pa.binary())})
        pq.write_table(table, os.path.join(directory, f'part-{unit:03d}.parquet'),
                       row_group_size=rows_per_unit, compression='snappy')


def _worker(source: str, cache: str, workers: int, block: int, algo: str) -> dict:
    import logging

    from streaming import SourceStream, StreamingDataLoader, StreamingDataset
    warnings: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    logging.getLogger('streaming').addHandler(Keep(logging.WARNING))
    dataset = StreamingDataset(streams=[SourceStream(remote=source, local=cache)],
                               batch_size=32, shuffle=True, shuffle_block_size=block,
                               shuffle_algo=algo)
    loader = StreamingDataLoader(dataset, batch_size=32, num_workers=workers)
    start = time.perf_counter()
    samples = sum(len(batch['id']) for batch in loader)
    seconds = time.perf_counter() - start
    decodes = dataset.cache.decoded.decodes()
    return {'samples': samples, 'epoch_s': seconds, 'units': len(decodes),
            'decodes_per_unit': float(decodes.sum()) / len(decodes),
            'max_decodes': int(decodes.max()),
            'warned': any('decoded' in w and 'again' in w for w in warnings) or _node_warned(
                dataset)}


def _node_warned(dataset: object) -> bool:
    """Whether a process of the node (a worker: its log is its own) warned of re-decodes."""
    try:
        return bool(dataset.cache.decoded.shared.array('decode_epochs')[1])  # type: ignore
    except (KeyError, OSError):  # A checkout without the warning.
        return False


def run_case(source: str, scratch: str, workers: int, block: int, budget: int,
             algo: str = 'py1e') -> dict:
    # With workers, each one's own budget too: a worker keeps the units it maps under it.
    budgets = {'STREAMING_DECODED_BYTES': str(budget)}
    if workers:
        budgets['STREAMING_SHARED_DECODED_BYTES'] = str(budget)
    cache = tempfile.mkdtemp(dir=scratch)
    src = os.environ.get('STREAMING_BENCH_SRC') or os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, 'PYTHONPATH': src, **budgets}
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), 'worker', source, cache,
                           str(workers), str(block), algo], capture_output=True, text=True, env=env,
                          timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith('RESULT '):
            return {'workers': workers, 'shuffle_block_size': block, 'budget': budget, 'algo': algo,
                    **json.loads(line[len('RESULT '):])}
    raise RuntimeError(proc.stderr[-3000:])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == 'worker':
        source, cache, workers, block, algo = sys.argv[2:7]
        print('RESULT ' + json.dumps(_worker(source, cache, int(workers), int(block), algo)))
        return
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--units', type=int, default=16)
    parser.add_argument('--unit-mb', type=float, default=2.0)
    parser.add_argument('--workers', type=int, nargs='+', default=[0, 2])
    parser.add_argument('--algo', default='py1e', help='shuffle_algo')
    parser.add_argument('--blocks', type=float, nargs='+', default=[0, 4, 1],
                        help='shuffle_block_size in units (0: the whole dataset)')
    parser.add_argument('--fractions', type=float, nargs='+', default=[0.25, 0.5, 1.0, 2.0],
                        help='budgets as fractions of the decoded size')
    parser.add_argument('--out')
    args = parser.parse_args()
    rows_per_unit = int(args.unit_mb * (1 << 20)) // ROW_BYTES
    total = args.units * rows_per_unit
    decoded = total * ROW_BYTES
    scratch = tempfile.mkdtemp(prefix='decode-thrash-')
    source = os.path.join(scratch, 'data')
    os.makedirs(source)
    make_files(source, args.units, rows_per_unit)
    rows = []
    for workers in args.workers:
        for units in args.blocks:
            block = int(units * rows_per_unit) or total
            for fraction in args.fractions:
                row = run_case(source, scratch, workers, block, int(decoded * fraction),
                               args.algo)
                row.update(decoded_mb=decoded / 1e6, budget_vs_decoded=fraction,
                           load=os.getloadavg()[0])
                print(json.dumps(row), flush=True)
                rows.append(row)
    if args.out:
        with open(args.out, 'w') as file:
            json.dump(rows, file, indent=1)


if __name__ == '__main__':
    main()
