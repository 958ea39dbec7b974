"""py1br and the non-random batching methods give the reference's (0.13.0) order, sample for sample.

One module-scoped batch of reference work (see ``oracle_cases``): ``py1br``'s ``get_shuffle``
(block sizes down to the ones the reference refuses), whole ``py1br`` epochs with ``random``
batching, and whole epochs with ``stratified``, ``per_stream`` and ``device_per_stream`` batching
for every shuffle of the reference and unshuffled, over 1-3 streams with every kind of weight,
balanced/fixed sampling, 1/2/4 nodes x 1-3 ranks x 1-3 workers, epochs 0-2 and resume points;
then ``StreamingDataset``s over three written streams, iterated for two epochs per method.
"""

from __future__ import annotations

import numpy as np
import pytest

from streaming.order.shuffles import shuffle_positions
from tests.order.oracle_cases import run_reference_order, work_cases, work_outcome

METHODS = ('stratified', 'per_stream', 'device_per_stream')
ALGOS = ('naive', 'py1br', 'py1e', 'py1s', 'py2s')
ACCEPTED = ('same', 'both refuse', 'reference fails')


def _py1br_shuffle_cases() -> list[dict]:
    rng = np.random.default_rng(21)
    cases = []
    for _ in range(80):
        sizes = rng.integers(1, 80, rng.integers(1, 15)).tolist()
        block = int(rng.choice([1, 2, 3, int(rng.integers(4, 40)), int(rng.integers(40, 300))]))
        cases.append({'kind': 'shuffle', 'algo': 'py1br', 'sizes': sizes,
                      'ncn': int(rng.integers(1, 6)), 'seed': int(rng.integers(0, 1000)),
                      'epoch': int(rng.integers(0, 4)), 'block': block})
    return cases


CASES = {
    'shuffle': _py1br_shuffle_cases(),
    'py1br': work_cases(2, 24, ('py1br',)),
    # Larger shards than the random-batching cases: with small ones most configurations cannot
    # fill a batch per stream (which both refuse).
    'batching': (work_cases(3, 72, ALGOS, METHODS, shard_samples=150) +
                 work_cases(4, 24, ALGOS, METHODS)),
}

WEIGHTS = ([{'proportion': 0.5}, {'proportion': 0.2}, {'proportion': 0.3}], [{}, {}, {}],
           [{'repeat': 1.5}, {'choose': 30}, {}])
ITERATE_KWARGS = [
    {'batch_size': 8, 'shuffle': True, 'shuffle_algo': algo, 'num_canonical_nodes': 2,
     'shuffle_block_size': 97, 'shuffle_seed': 7 + number, 'batching_method': method,
     **({'epoch_size': 150} if number < 2 else {})}
    for method in METHODS for number, algo in enumerate(('py1br', 'py1e', 'py2s'))]


@pytest.fixture(scope='module')
def stream_dirs(tmp_path_factory) -> list[str]:
    """Three streams of 60, 45 and 90 samples (``x`` = a distinct id), by our writer."""
    from streaming import MDSWriter
    root = tmp_path_factory.mktemp('oracle-batching')
    dirs = []
    for number, count in enumerate((60, 45, 90)):
        out = str(root / str(number))
        with MDSWriter(out=out, columns={'x': 'int'}, size_limit=250) as writer:
            for index in range(count):
                writer.write({'x': 1000 * number + index})
        dirs.append(out)
    return dirs


def _stream_specs(dirs: list[str], number: int) -> list[dict]:
    return [{'local': local, **weight} for local, weight in zip(dirs, WEIGHTS[number % 3])]


@pytest.fixture(scope='module')
def reference(stream_dirs) -> dict[str, list[dict]]:
    iterate = [{'kind': 'iterate', 'streams': _stream_specs(stream_dirs, number),
                'kwargs': kwargs, 'epochs': 2} for number, kwargs in enumerate(ITERATE_KWARGS)]
    groups = dict(CASES, iterate=iterate)
    results = iter(run_reference_order([case for group in groups.values() for case in group]))
    return {name: [next(results) for _ in group] for name, group in groups.items()}


def test_py1br_gives_the_reference_permutation(reference) -> None:
    refused = 0
    for case, result in zip(CASES['shuffle'], reference['shuffle']):
        arguments = (np.array(case['sizes']), case['ncn'], case['seed'], case['epoch'],
                     case['block'])
        if 'error' in result:  # a block of 1: the reference cannot draw its stagger
            with pytest.raises(ValueError, match='py1br.*block size of at least 2'):
                shuffle_positions('py1br', *arguments)
            refused += 1
            continue
        assert np.array_equal(shuffle_positions('py1br', *arguments), result['ids']), case
    assert 0 < refused < len(CASES['shuffle']) // 3


def _check_work(group: str, reference: dict, minimum_same: int) -> None:
    outcomes = [work_outcome(case, result)
                for case, result in zip(CASES[group], reference[group])]
    wrong = [(case, outcome) for case, outcome in zip(CASES[group], outcomes)
             if outcome not in ACCEPTED]
    assert not wrong, wrong[:3]
    assert outcomes.count('same') >= minimum_same, outcomes


def test_whole_py1br_epochs_match(reference) -> None:
    _check_work('py1br', reference, 20)


def test_stratified_per_stream_and_device_per_stream_epochs_match(reference) -> None:
    _check_work('batching', reference, 80)
    methods = {case['kwargs']['batching_method'] for case in CASES['batching']}
    assert methods == set(METHODS)


def test_datasets_over_streams_iterate_in_the_reference_order(reference, stream_dirs) -> None:
    from streaming import Stream, StreamingDataset
    for number, (kwargs, result) in enumerate(zip(ITERATE_KWARGS, reference['iterate'])):
        assert 'error' not in result, result
        streams = [Stream(**spec) for spec in _stream_specs(stream_dirs, number)]
        dataset = StreamingDataset(streams=streams, **kwargs)
        ours = [[int(sample['x']) for sample in dataset] for _ in range(2)]
        assert ours == result['epochs'], kwargs
