"""Regenerate tests/golden/: small datasets written by the reference, and how it reads them.

Run from the repository root with the dev env: ``python -m tests.oracle.make_golden``.
"""

from __future__ import annotations

import json
import os
import shutil

from tests.oracle.runner import run_reference

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'golden')
GOLDEN_CASES = ['mds_scalars', 'mds_images', 'mds_zstd_7', 'mds_gz', 'json_zstd', 'csv', 'xsv']


def main() -> None:
    shutil.rmtree(GOLDEN, ignore_errors=True)
    ops = []
    for case in GOLDEN_CASES:
        ops.append({'op': 'write', 'case': case, 'out': os.path.join(GOLDEN, case)})
        ops.append({'op': 'read', 'dir': os.path.join(GOLDEN, case),
                    'result': os.path.join(GOLDEN, f'{case}.expected.json')})
    for op, outcome in zip(ops, run_reference(ops)):
        if not outcome['ok']:
            raise RuntimeError(f'{op}: {outcome["error"]}')
    for case in GOLDEN_CASES:  # Keep the expectations readable in diffs.
        path = os.path.join(GOLDEN, f'{case}.expected.json')
        with open(path) as f:
            rows = json.load(f)
        with open(path, 'w') as f:
            json.dump(rows, f, indent=0)
            f.write('\n')


if __name__ == '__main__':
    main()
