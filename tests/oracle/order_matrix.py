"""The order-equality matrix: shuffle algo x batching method, cases identical to the reference's.

Run from the repository root with the dev env (the reference env must exist):
``python -m tests.oracle.order_matrix [--per-method 120]``. Prints a markdown table of outcomes
per cell (see ``tests.order.oracle_cases.work_outcome``) for seeded dataset configurations of
every kind the tests draw (streams, weights, sampling, topology, epochs, resume points).
"""

from __future__ import annotations

import argparse
import collections
import warnings

from tests.order.oracle_cases import matrix_cell, run_reference_order, work_cases, work_outcome

ALGOS = ('naive', 'py1br', 'py1e', 'py1s', 'py2s')
METHODS = ('random', 'stratified', 'per_stream', 'device_per_stream')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--per-method', type=int, default=120, help='cases per batching method')
    args = parser.parse_args()
    cases = []
    for number, method in enumerate(METHODS):
        # Random batching fills batches from all streams at once; the others need each stream to
        # fill a batch on its own, hence larger shards.
        cases += work_cases(100 + number, args.per_method, ALGOS, (method,),
                            shard_samples=40 if method == 'random' else 150)
    results = run_reference_order(cases)
    tally: dict[tuple[str, str], collections.Counter] = collections.defaultdict(
        collections.Counter)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        for case, result in zip(cases, results):
            outcome = work_outcome(case, result)
            if outcome not in ('same', 'both refuse', 'reference fails'):
                print('MISMATCH', outcome, case)
                outcome = 'different'
            tally[matrix_cell(case)][outcome] += 1
    print('| shuffle | ' + ' | '.join(METHODS) + ' |')
    print('|---|' + '---|' * len(METHODS))
    for algo in (*ALGOS, 'unshuffled'):
        cells = []
        for method in METHODS:
            counts = tally[algo, method]
            cell = f"{counts['same']}/{sum(counts.values())}"
            extra = [f'{counts[name]} {name}' for name in ('both refuse', 'reference fails',
                                                           'different') if counts[name]]
            cells.append(cell + (f" ({', '.join(extra)})" if extra else ''))
        print(f'| {algo} | ' + ' | '.join(cells) + ' |')


if __name__ == '__main__':
    main()
