"""A checkpoint taken in either library resumes in the other: every sample once, in order.

One dataset (MDS, a few shards, an ``id`` column) is written once. Each library then runs
training-like loops (``tests/oracle/resume_driver.py``, one process per rank, a gloo process
group for two ranks): it stops after ``k`` batches, takes ``StreamingDataLoader.state_dict()``
on every rank and runs on to the end of the epoch (and ``epochs_after`` more). Then each library
starts afresh (new processes, new local caches), loads rank 0's state (through JSON) from each
library and iterates the rest. For every case and direction the test checks that

* every rank took the same state;
* the samples before the checkpoint and after the resume make the source's epoch exactly (each
  sample once when the epoch has no weights);
* the resumed batches are those the source would have gone on with: rank by rank on the same
  topology, global batch by global batch (all ranks' batch ``j`` together) on another one;
* both libraries resume a state into the same batches, rank by rank, and, checkpointing again
  two batches later, take the same state (the loaded position plus what they yielded since).

All processes of one (library, phase, rank count) run every case of that group in turn, so the
whole matrix costs 12 launches. They are fresh interpreters, not children of a zygote: their
DataLoader workers fork again, and a forked zygote child that forked workers once hung. Every
launch runs in the test process's private ``/dev/shm`` (``tests/oracle/private_shm.py``): the
reference's ranks once crashed on a registry block another job on the machine had left there.
The matrix is written to docs/migrating.md.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest

from tests.compat.helpers import ROOT
from tests.oracle.deaths import failure_log, with_fault_handler
from tests.oracle.private_shm import in_private_shm
from tests.oracle.runner import reference_env, reference_lock, reference_python

DRIVER = os.path.join(ROOT, 'tests', 'oracle', 'resume_driver.py')
LIBRARIES = ('ours', 'reference')
SAMPLES, EXTRA = 384, 144  # the main dataset's samples, the second stream's (ids from 10_000)

# Topologies: ranks on one node, DataLoader workers per rank, per-rank batch size (the global
# batch is 8 everywhere, as an elastic resume needs).
TOPOLOGIES = {'1r0w': (1, 0, 8), '1r2w': (1, 2, 8), '2r2w': (2, 2, 4)}
GLOBAL_BATCH = 8
AGAIN_AFTER = 2  # as in resume_driver.py
# Shuffle settings by name: one line per algorithm.
SHUFFLES = {
    'py1e': {'shuffle': True, 'shuffle_algo': 'py1e', 'shuffle_block_size': 100},
    'py1br': {'shuffle': True, 'shuffle_algo': 'py1br', 'shuffle_block_size': 100},
    'py1s': {'shuffle': True, 'shuffle_algo': 'py1s'},
    'py2s': {'shuffle': True, 'shuffle_algo': 'py2s'},
    'naive': {'shuffle': True, 'shuffle_algo': 'naive'},
    'unshuffled': {'shuffle': False},
}
K = {'1r0w': 7, '1r2w': 5, '2r2w': 3}  # batches before the checkpoint (odd: mid worker cycle)


def _case(name: str, shuffle: str, first: str, resumed: str | None = None, k: int | None = 5,
          epochs_before: int = 0, epochs_after: int = 0, streams: str = 'one') -> dict:
    return {'name': name, 'shuffle': shuffle, 'first': first, 'resumed': resumed or first,
            'k': k, 'epochs_before': epochs_before, 'epochs_after': epochs_after,
            'streams': streams}


CASES = [_case(f'{shuffle}-{topo}', shuffle, topo, k=K[topo])
         for shuffle in SHUFFLES for topo in TOPOLOGIES] + [
    _case('py1e-2r2w-to-1r2w', 'py1e', '2r2w', '1r2w', k=6),
    _case('py1e-1r2w-to-2r2w', 'py1e', '1r2w', '2r2w', k=3, epochs_after=1),
    _case('py1s-2r2w-to-1r0w', 'py1s', '2r2w', '1r0w', k=4),
    _case('streams-py1e-2r2w', 'py1e', '2r2w', k=4, streams='two'),
    _case('streams-py2s-1r2w-to-2r2w', 'py2s', '1r2w', '2r2w', k=9, streams='two'),
    _case('epoch1-py1e-1r2w', 'py1e', '1r2w', k=9, epochs_before=1, epochs_after=1),
    _case('before-iter-py1e-1r0w', 'py1e', '1r0w', k=None),
    _case('epoch-end-py1e-1r2w', 'py1e', '1r2w', k=SAMPLES // 8, epochs_after=1),
]
DIRECTIONS = [(source, target) for source in LIBRARIES for target in LIBRARIES]


def _write(out: str, ids: range) -> None:
    from streaming import MDSWriter
    with MDSWriter(out=out, columns={'id': 'int', 'text': 'str'}, size_limit=1500) as writer:
        for i in ids:
            writer.write({'id': i, 'text': 'x' * (i % 29)})


def _spec(case: dict, phase: str, data: dict[str, str]) -> dict:
    ranks, workers, batch = TOPOLOGIES[case['first' if phase == 'first' else 'resumed']]
    streams = [{'remote': data['main']}] if case['streams'] == 'one' else [
        {'remote': data['main'], 'proportion': 0.6}, {'remote': data['extra'], 'proportion': 0.4}]
    kwargs = {'shuffle_seed': 1234, **SHUFFLES[case['shuffle']]}
    if case['streams'] != 'one':
        kwargs['epoch_size'] = 512  # fills py2s's 64 canonical nodes
    return {'name': case['name'], 'streams': streams, 'kwargs': kwargs, 'batch_size': batch,
            'workers': workers, 'k': case['k'], 'epochs_before': case['epochs_before'],
            'epochs_after': case['epochs_after']}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _launch(library: str, phase: str, ranks: int, cases: list[dict], work: str) -> list[dict]:
    """Run ``cases`` in one process per rank of ``library``; returns each rank's results."""
    name = f'{library}-{phase}-{ranks}'
    spec = os.path.join(work, f'{name}.json')
    with open(spec, 'w') as f:
        json.dump({'phase': phase, 'cases': cases, 'local': os.path.join(work, 'cache', name)}, f)
    if library == 'ours':
        env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'PYTHONHOME')}
        env['PYTHONPATH'] = ROOT
    else:
        env = reference_env()
    env.update(WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR='127.0.0.1',
               MASTER_PORT=str(_free_port()))
    env = with_fault_handler(env)  # A worker's fault leaves its stacks in the log.
    python = sys.executable if library == 'ours' else reference_python()
    out = os.path.join(work, name)
    procs = []
    for rank in range(ranks):
        log = open(f'{out}.{rank}.log', 'w')  # noqa: SIM115 - closed below
        procs.append((subprocess.Popen(in_private_shm([python, DRIVER, library, spec, out], work),
                                       cwd=work,
                                       env={**env, 'RANK': str(rank), 'LOCAL_RANK': str(rank)},
                                       stdout=log, stderr=subprocess.STDOUT), log))
    for proc, log in procs:
        try:
            proc.wait(timeout=600)
        finally:
            proc.kill()
            log.close()
    for rank, (proc, _) in enumerate(procs):
        if proc.returncode:
            with open(f'{out}.{rank}.log') as f:
                raise RuntimeError(f'{name} rank {rank} failed:\n{failure_log(f.read())}')
    results = []
    for rank in range(ranks):
        with open(f'{out}.{rank}.json') as f:
            results.append(json.load(f))
    return results


def _ranks(case: dict, phase: str) -> int:
    return TOPOLOGIES[case['first' if phase == 'first' else 'resumed']][0]


def _group(library: str, phase: str, ranks: int, specs: list[dict],
           work: str) -> dict[str, list[dict]]:
    """{case name: per-rank results} of the cases of ``phase`` that run on ``ranks`` ranks."""
    group = [spec for case, spec in zip(CASES, specs) if _ranks(case, phase) == ranks]
    if library == 'reference':
        with reference_lock():  # its shared-memory names collide across processes
            per_rank = _launch(library, phase, ranks, group, work)
    else:
        per_rank = _launch(library, phase, ranks, group, work)
    return {spec['name']: [rank[spec['name']] for rank in per_rank] for spec in group}


def _run_phase(phase: str, specs: list[dict], work: str) -> dict[str, dict[str, list[dict]]]:
    """{library: {case name: per-rank results}}, one group (library, rank count) at a time."""
    return {library: {name: result for count in sorted({_ranks(case, phase) for case in CASES})
                      for name, result in _group(library, phase, count, specs, work).items()}
            for library in LIBRARIES}


def collect(work: str) -> dict[str, Any]:
    """Write the data under ``work``, run both phases of every case in both libraries."""
    data = {'main': os.path.join(work, 'main'), 'extra': os.path.join(work, 'extra')}
    _write(data['main'], range(SAMPLES))
    _write(data['extra'], range(10_000, 10_000 + EXTRA))
    firsts = _run_phase('first', [_spec(case, 'first', data) for case in CASES], work)
    resumed = []
    for case in CASES:
        spec = _spec(case, 'resumed', data)
        spec['states'] = {lib: firsts[lib][case['name']][0]['state'] for lib in LIBRARIES}
        resumed.append(spec)
    return {'first': firsts, 'resume': _run_phase('resume', resumed, work)}


@pytest.fixture(scope='module')
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    reference_python()  # skips (or fails in CI) without the reference's env
    return collect(str(tmp_path_factory.mktemp('cross-resume')))


def _flat(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


def _global_batches(per_rank: list[list[list[int]]]) -> list[list[int]]:
    """Batch ``j`` of every rank together, sorted: what one step of training saw."""
    steps = max(len(batches) for batches in per_rank)
    return [sorted(_flat([batches[j] for batches in per_rank if j < len(batches)]))
            for j in range(steps)]


def check_direction(case: dict, first: list[dict], post: list[list[list[list[int]]]],
                    same_layout_post: list[list[list[list[int]]]]) -> int:
    """Check one direction; returns the number of samples seen after the resume."""
    states = [rank['state'] for rank in first]
    assert all(state == states[0] for state in states), f'ranks disagree on the state: {states}'
    pre = _flat(_flat([rank['pre'] for rank in first]))
    full = Counter(pre + _flat(_flat([rank['cont'][0] for rank in first])))
    after = _flat(_flat([rank[0] for rank in post]))
    assert Counter(pre + after) == full, 'the resumed epoch repeats or drops samples'
    if case['streams'] == 'one':
        assert sorted(pre + after) == list(range(SAMPLES)), 'not every sample exactly once'
    else:
        assert sum(full.values()) == 512
    epochs = 1 + case['epochs_after']
    assert all(len(rank) == epochs for rank in post)
    if case['first'] == case['resumed']:
        assert post == [rank['cont'] for rank in first], 'resumed order differs, rank by rank'
    else:
        for epoch in range(epochs):
            assert _global_batches([rank[epoch] for rank in post]) == \
                _global_batches([rank['cont'][epoch] for rank in first]), \
                f'epoch {epoch}: the global batches differ after an elastic resume'
    assert post == same_layout_post, 'the two libraries resume the same state differently'
    return len(after)


def check_again(state: dict, post: list[list[list[list[int]]]], again: list[dict],
                other_again: list[dict]) -> None:
    """The state a resumed run takes: the loaded position plus what it yielded since."""
    assert all(rank == again[0] for rank in again) and again == other_again
    steps = min(AGAIN_AFTER, max(len(rank[0]) for rank in post))
    start = 0 if state['epoch'] == -1 else state['sample_in_epoch']
    assert (again[0]['epoch'], again[0]['sample_in_epoch']) == \
        (max(state['epoch'], 0), start + steps * GLOBAL_BATCH)


def check(runs: dict[str, Any], case: dict, source: str, target: str) -> int:
    """All checks of one case and direction; returns the samples seen after the resume."""
    name = case['name']
    first = runs['first'][source][name]
    resumed = [rank[source] for rank in runs['resume'][target][name]]
    other_target = 'reference' if target == 'ours' else 'ours'
    other = [rank[source] for rank in runs['resume'][other_target][name]]
    post = [rank['post'] for rank in resumed]
    seen = check_direction(case, first, post, [rank['post'] for rank in other])
    check_again(first[0]['state'], post, [rank['again'] for rank in resumed],
                [rank['again'] for rank in other])
    return seen


@pytest.mark.oracle
@pytest.mark.parametrize(('source', 'target'), DIRECTIONS, ids=[f'{s}-to-{t}'
                                                                 for s, t in DIRECTIONS])
@pytest.mark.parametrize('case', CASES, ids=[case['name'] for case in CASES])
def test_cross_library_resume(runs: dict[str, Any], case: dict, source: str,
                              target: str) -> None:
    check(runs, case, source, target)


@pytest.mark.oracle
def test_reference_state_before_iteration_is_epoch_minus_one(runs: dict[str, Any]) -> None:
    """Both say ``epoch: -1`` before any iteration (and load each other's: the case above)."""
    ref = runs['first']['reference']['before-iter-py1e-1r0w'][0]['state']
    ours = runs['first']['ours']['before-iter-py1e-1r0w'][0]['state']
    assert (ref['epoch'], ref['sample_in_epoch']) == (-1, 0)
    assert ours == ref


def matrix_markdown(runs: dict[str, Any]) -> str:
    """The matrix for docs/migrating.md: each case and direction, pass or FAIL, with the samples
    seen before the checkpoint + after the resume (over all ranks, in the checkpointed epoch)."""
    short = {'ours': 'ours', 'reference': 'ref'}
    lines = ['| case | ' + ' | '.join(f'{short[s]} → {short[t]}' for s, t in DIRECTIONS) + ' |',
             '|---|' + '---|' * len(DIRECTIONS)]
    for case in CASES:
        cells = []
        for source, target in DIRECTIONS:
            first = runs['first'][source][case['name']]
            taken = sum(len(batch) for rank in first for batch in rank['pre'])
            try:
                cells.append(f'pass ({taken} + {check(runs, case, source, target)})')
            except AssertionError:
                cells.append('FAIL')
        lines.append(f"| `{case['name']}` | " + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


if __name__ == '__main__':  # python -m tests.compat.test_cross_resume: print the matrix
    import tempfile
    with tempfile.TemporaryDirectory() as work:
        print(matrix_markdown(collect(work)))
