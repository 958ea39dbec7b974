"""The docs page's "CPU per gigabyte" section: saved local-read runs, at rest and under load.

Each saved file is a results JSON of ``benchmarks.run`` (``--out benchmarks/results/<name>``),
written by the command in ``SAVED``; the section shows, per case, CPU seconds per GB delivered
(user + system of the job's processes, ``cases/harness.job_cpu_s``), MB/s, and ours over the
reference and LitData. The link emulator's CPU figures are in its own tables (``link_bench``).
"""

from __future__ import annotations

import os
from typing import Any

from benchmarks.aggregate import saved_results
from benchmarks.config import LITDATA, OURS, REFERENCE

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results')
MATCH = 'read/images/w0/shuffle read/images/w2/shuffle read/tokens/w0/shuffle ' \
        'read/tokens/w2/shuffle'
SAVED = {
    'cpu-read.json': f'--cases read --match {MATCH} --repeats 3',
    'cpu-read-load2.json': f'--cases read --match {MATCH} --repeats 3 --competing-load 2',
}


def _median(record: dict[str, Any], impl: str, metric: str) -> float | None:
    stat = record['results'].get(impl, {}).get('stats', {}).get(metric)
    return None if stat is None else stat['median']


def _number(value: float | None, digits: str = '.1f') -> str:
    return '–' if value is None else format(value, digits)


def _ratio(ours: float | None, other: float | None) -> str:
    return '–' if ours is None or not other else f'{ours / other:.2f}x'


def table(doc: dict[str, Any]) -> list[str]:
    """One row per case: CPU-s/GB and MB/s of each implementation, ours over the others."""
    lines = ['| case | CPU-s/GB ours | reference | LitData | ours/ref | ours/LitData | '
             'MB/s ours | reference | LitData |', '|---|---|---|---|---|---|---|---|---|']
    for record in doc['cases']:
        cpu = {impl: _median(record, impl, 'cpu_s_per_gb') for impl in (OURS, REFERENCE,
                                                                           LITDATA)}
        speed = {impl: _median(record, impl, 'mb_per_s') for impl in (OURS, REFERENCE, LITDATA)}
        lines.append(f'| {record["title"]} | {_number(cpu[OURS], ".2f")} | '
                     f'{_number(cpu[REFERENCE], ".2f")} | {_number(cpu[LITDATA], ".2f")} | '
                     f'{_ratio(cpu[OURS], cpu[REFERENCE])} | {_ratio(cpu[OURS], cpu[LITDATA])} '
                     f'| {_number(speed[OURS])} | {_number(speed[REFERENCE])} | '
                     f'{_number(speed[LITDATA])} |')
    return lines


def section(results_dir: str = RESULTS) -> list[str]:
    """The saved runs of ``SAVED`` as tables (nothing if none is saved)."""
    lines: list[str] = []
    for name, options, doc in saved_results(results_dir, SAVED):
        meta = doc['meta']
        stem = os.path.splitext(name)[0]
        lines += [f'`python -m benchmarks.run {options} --out benchmarks/results/{stem}` (run '
                  f'of {meta["machine"]["date"]}, load average before '
                  f'{meta["machine"]["load_average"]}, after {meta["load_average_after"]}; '
                  f'medians of {meta["repeats"]}):', '', *table(doc), '']
    notes = os.path.join(results_dir, 'cpu-notes.md')  # What the saved runs show, by hand.
    if lines and os.path.exists(notes):
        with open(notes) as f:
            lines += [f.read().strip(), '']
    return lines
