"""The oracle harness quotes why a launched process died (``tests/oracle/deaths.py``).

A rank whose DataLoader worker died silently fails with a long chained traceback; the one line
that says how the worker died (its exit code or signal) sits in the middle of it, and quoting
the log's end cut it from main's CI output at 9d5a408. The cause must come first.
"""

from __future__ import annotations

import subprocess
import sys

from tests.compat.helpers import ROOT
from tests.oracle.deaths import failure_log, with_fault_handler

# A DataLoader worker that exits at once with code 1 and prints nothing, as one did in CI.
_SILENT_DEATH = '''
import os
from torch.utils.data import DataLoader, IterableDataset

class Dies(IterableDataset):
    def __iter__(self):
        os._exit(1)
        yield 0

for _ in DataLoader(Dies(), num_workers=1):
    pass
'''


def test_a_workers_silent_death_is_quoted_first_from_a_real_rank_log() -> None:
    proc = subprocess.run([sys.executable, '-c', _SILENT_DEATH], capture_output=True, text=True,
                          cwd=ROOT, env=with_fault_handler({'PATH': '/usr/bin:/bin'}),
                          timeout=300)
    assert proc.returncode != 0
    quoted = failure_log(proc.stderr, tail=200)
    cause = quoted.split('---- the end of the log ----')[0]
    assert 'exited unexpectedly with exit code 1' in cause, quoted
    assert quoted.endswith(proc.stderr[-200:])


def test_a_log_without_a_death_is_its_end() -> None:
    log = 'x' * 5000 + '\nValueError: bad input\n'
    assert failure_log(log) == log[-4000:]


def test_a_fault_handlers_stacks_follow_its_line() -> None:
    log = '\n'.join(['case-1: 0.2 s', 'Fatal Python error: Segmentation fault', '',
                     'Current thread 0x1 (most recent call first):',
                     '  File "reader.py", line 9 in get_item', 'x' * 6000])
    cause = failure_log(log).split('---- the end of the log ----')[0]
    assert 'Segmentation fault' in cause and 'reader.py", line 9' in cause
    assert 'case-1' not in cause
