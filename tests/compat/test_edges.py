"""Edge behaviour of the dataset, loader and writers, each run on ours and on the reference.

Every case is one snippet of user code, written against the public API both libraries share.
The reference runs all of them in one subprocess (an oracle, from its own env); ours runs them
in this process. Each test then says whether we match the reference or, where the reference is
wrong or unhelpful, what we do instead.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.compat.oracle import run_cases_here, run_cases_in_reference

HEADER = """
import json, os, shutil, warnings
import numpy as np
from streaming import MDSWriter, Stream, StreamingDataLoader, StreamingDataset

def write(out, n, size_limit=1 << 9, columns=None, start=0):
    with MDSWriter(out=out, columns=columns or {'id': 'int'}, size_limit=size_limit) as w:
        for i in range(start, start + n):
            w.write({name: (i if kind == 'int' else str(i)) for name, kind in
                     (columns or {'id': 'int'}).items()})

def error_names(error):
    return [c.__module__ + '.' + c.__name__ for c in type(error).__mro__]
"""

CASES = {
    # A warm cache keeps working when the remote lost its index, or lost everything.
    'warm_cache_index_lost': """
remote, local = root + '/remote', root + '/local'
write(remote, 50)
first = [s['id'] for s in StreamingDataset(remote=remote, local=local, batch_size=5)]
os.remove(remote + '/index.json')
second = [s['id'] for s in StreamingDataset(remote=remote, local=local, batch_size=5)]
shutil.rmtree(remote)
third = [s['id'] for s in StreamingDataset(remote=remote, local=local, batch_size=5)]
result = [first == second == third, len(third)]
""",
    # ... and when the remote is unreachable (an S3 endpoint nobody listens on).
    'warm_cache_unreachable': """
write(root + '/src', 30)
shutil.copytree(root + '/src', root + '/local')
saved = dict(os.environ)
os.environ.update(S3_ENDPOINT_URL='http://127.0.0.1:9', AWS_ACCESS_KEY_ID='x',
                  AWS_SECRET_ACCESS_KEY='x', AWS_DEFAULT_REGION='us-east-1', AWS_MAX_ATTEMPTS='1')
try:
    dataset = StreamingDataset(remote='s3://no-bucket/ds', local=root + '/local', batch_size=5,
                               download_retry=0, download_timeout=5)
    result = sorted(s['id'] for s in dataset)
finally:
    os.environ.clear()
    os.environ.update(saved)
""",
    # state_dict() between load_state_dict() and the first iteration.
    'state_after_load': """
write(root + '/d', 100)
dataset = StreamingDataset(local=root + '/d', batch_size=10)
fresh = dataset.state_dict(0, False)
dataset.load_state_dict({'epoch': 0, 'sample_in_epoch': 40, 'num_canonical_nodes': 1,
                         'shuffle_seed': 9176, 'initial_physical_nodes': 1})
after = dataset.state_dict(0, False)
resumed = [s['id'] for s in dataset]
other = StreamingDataset(local=root + '/d', batch_size=10)
other.load_state_dict({'epoch': -1, 'sample_in_epoch': 0, 'num_canonical_nodes': 1,
                       'shuffle_seed': 9176, 'initial_physical_nodes': 1})
result = {'fresh_epoch': fresh['epoch'], 'after': [after['epoch'], after['sample_in_epoch']],
          'resumed': resumed[:3] + [len(resumed)],
          'from_pre_iteration_state': len([s for s in other])}
""",
    # A state from before any iteration (the reference's epoch -1) carries a layout (seed,
    # canonical nodes) that the reference ignores: the dataset keeps its own.
    'pre_iteration_state_layout': """
write(root + '/d', 100)
def order(state=None, **kwargs):
    dataset = StreamingDataset(local=root + '/d', batch_size=10, shuffle=True, **kwargs)
    if state is not None:
        dataset.load_state_dict(state)
    return [s['id'] for s in dataset]
state = {'epoch': -1, 'sample_in_epoch': 0, 'num_canonical_nodes': 4, 'shuffle_seed': 1234,
         'initial_physical_nodes': 1}
result = [order(state, shuffle_seed=99) == order(shuffle_seed=99),
          order(dict(state, epoch=0), shuffle_seed=99) ==
          order(shuffle_seed=1234, num_canonical_nodes=4)]
""",
    # collate_fn=list: the state dict must count samples, not the keys of a sample.
    'collate_list': """
write(root + '/d', 100, columns={'id': 'int', 'a': 'str', 'b': 'str'})
dataset = StreamingDataset(local=root + '/d', batch_size=10)
loader = StreamingDataLoader(dataset, batch_size=10, collate_fn=list)
for step, batch in enumerate(loader):
    if step == 3:
        break
result = [type(batch).__name__, len(batch), loader.state_dict()['sample_in_epoch']]
""",
    # An index that lists no shards.
    'empty_index': """
os.makedirs(root + '/d')
with open(root + '/d/index.json', 'w') as f:
    json.dump({'version': 2, 'shards': []}, f)
try:
    dataset = StreamingDataset(local=root + '/d', batch_size=1)
except Exception as error:
    result = ['construction', error_names(error)]
else:
    try:
        list(dataset)
        result = ['works']
    except Exception as error:
        result = ['iteration', error_names(error)]
""",
    # The streams' weights, filled in by the dataset.
    'weights_filled_in': """
write(root + '/a', 40)
write(root + '/b', 60)
def weights(**kwargs):
    streams = [Stream(local=root + '/a', **kwargs.get('a', {})),
               Stream(local=root + '/b', **kwargs.get('b', {}))]
    StreamingDataset(streams=streams, batch_size=1, epoch_size=kwargs.get('epoch_size'))
    return [[round(float(s.proportion), 6), round(float(s.repeat), 6), int(s.choose)]
            for s in streams]
result = [weights(), weights(a={'repeat': 2}, b={'choose': 10}),
          weights(a={'proportion': 1}, b={'proportion': 3}, epoch_size=100)]
""",
    # A corrupt index.json, and no index.json (with no remote).
    'index_errors': """
def failure(case):
    os.makedirs(root + '/' + case)
    if case == 'corrupt':
        with open(root + '/corrupt/index.json', 'w') as f:
            f.write('{"version": 2, "shards": [')
    try:
        StreamingDataset(local=root + '/' + case, batch_size=1)
    except Exception as error:
        return error_names(error)
result = {case: failure(case) for case in ('corrupt', 'missing')}
""",
    'cache_counts_index': """
write(root + '/remote', 50)
dataset = StreamingDataset(remote=root + '/remote', local=root + '/local', batch_size=5,
                           cache_limit='1mb')
result = [dataset.cache_usage, os.path.getsize(root + '/local/index.json')]
""",
    # local=None, twice with the same remote (as a second run would).
    'local_none': """
import tempfile
os.makedirs(root + '/tmp')
tempfile.tempdir = root + '/tmp'
os.environ.pop('STREAMING_CACHE_DIR', None)
try:
    write(root + '/remote', 30)
    dataset = StreamingDataset(remote=root + '/remote', batch_size=5)
    count = len(list(dataset))
    first = dataset.streams[0].local
    try:
        again = StreamingDataset(remote=root + '/remote', batch_size=5)
        result = ['reused', count, first == again.streams[0].local,
                  first.startswith(root + '/tmp'),
                  again.cache_usage > again.streams[0].get_index_size()]
    except Exception as error:
        result = ['second run fails', count, error_names(error)]
finally:
    tempfile.tempdir = None
""",
    'batch_size_mismatch': """
write(root + '/d', 20)
dataset = StreamingDataset(local=root + '/d', batch_size=10)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    StreamingDataLoader(dataset, batch_size=4)
result = [str(w.message) for w in caught if '10' in str(w.message) and '4' in str(w.message)]
""",
    # Stream methods the reference's users override: the dataset must call them.
    'stream_hooks': """
calls = set()
class MyStream(Stream):
    def apply_default(self, default):
        calls.add('apply_default')
        super().apply_default(default)
    def set_up_local(self, shards, cache_usage_per_shard):
        calls.add('set_up_local')
        super().set_up_local(shards, cache_usage_per_shard)
    def get_index_size(self):
        calls.add('get_index_size')
        return super().get_index_size()
    @classmethod
    def validate_weights(cls, streams):
        calls.add('validate_weights')
        return super().validate_weights(streams)
    @classmethod
    def apply_weights(cls, streams, samples_per_stream, choose_per_epoch, seed):
        calls.add('apply_weights')
        return super().apply_weights(streams, samples_per_stream, choose_per_epoch, seed)
write(root + '/remote', 20)
StreamingDataset(streams=[MyStream(remote=root + '/remote', local=root + '/local')],
                 batch_size=2, split=None)
result = sorted(calls)
""",
    # An apply_weights override decides how much of each stream an epoch takes.
    'apply_weights_override': """
class FiveEach(Stream):
    @classmethod
    def apply_weights(cls, streams, samples_per_stream, choose_per_epoch, seed):
        for stream in streams:
            stream.proportion, stream.repeat, stream.choose = 0.5, 0.25, 5
        return 5 * len(streams)
write(root + '/a', 20)
write(root + '/b', 20)
dataset = StreamingDataset(streams=[FiveEach(local=root + '/a'), FiveEach(local=root + '/b')],
                           batch_size=1)
result = [len(dataset), len(list(dataset))]
""",
    # A set_up_local that reports nothing local: the dataset must not trust the files.
    # (predownload=0: ours starts the node's downloads when the dataset is built, which would
    # race with reading cache_usage; the reference downloads only when iterated.)
    'set_up_local_override': """
class NothingLocal(Stream):
    def set_up_local(self, shards, cache_usage_per_shard):
        cache_usage_per_shard[:] = 0
write(root + '/remote', 20)
first = StreamingDataset(remote=root + '/remote', local=root + '/local', batch_size=2)
list(first)
dataset = StreamingDataset(streams=[NothingLocal(remote=root + '/remote',
                                                  local=root + '/local')], batch_size=2,
                           predownload=0)
result = [dataset.cache_usage == dataset.streams[0].get_index_size()]
""",
    # Stratified batching when the streams' shares of a batch tie for the extra sample.
    'stratified_ties': """
streams = []
for k in range(3):
    write(root + f'/s{k}', 30, start=100 * k)
    streams.append(Stream(local=root + f'/s{k}', proportion=1))
dataset = StreamingDataset(streams=streams, batch_size=4, batching_method='stratified')
ids = [s['id'] for s in dataset]
result = [len(ids), [sorted(i // 100 for i in ids[b:b + 4]) for b in range(0, 12, 4)]]
""",
    # Dataset members users call.
    'dataset_members': """
from concurrent.futures import Future
write(root + '/d', 50)
dataset = StreamingDataset(local=root + '/d', batch_size=5, sampling_method='fixed')
out = {'next_epoch': [dataset.next_epoch]}
list(dataset)
out['next_epoch'].append(dataset.next_epoch)
out['spanner'] = [[int(x) for x in dataset.spanner[i]] for i in (0, 7, 49)]
out['epoch_seed_change'] = dataset.epoch_seed_change
units, ids = dataset.resample_streams(0)
out['resample'] = [units.tolist(), ids.tolist()]
dataset.batch_size = 10
dataset.shuffle = True
out['assigned'] = [dataset.batch_size, dataset.shuffle, dataset.epoch_seed_change]
done = Future()
done.set_result(None)
dataset.on_exception(done)
result = out
""",
    'writer_members': """
import inspect
from streaming import CSVWriter, TSVWriter
out = {c.__name__: list(inspect.signature(c).parameters) for c in (CSVWriter, TSVWriter,
                                                                    MDSWriter)}
writer = MDSWriter(out=root + '/o', columns={'a': 'int'}, size_limit=1 << 9)
for i in range(100):
    writer.write({'a': i})
out['before_finish'] = len(writer.shards) > 0
writer.finish()
out['shards'] = [s['samples'] for s in writer.shards]
out['cloud_writer'] = callable(getattr(writer.cloud_writer, 'upload_file', None))
result = out
""",
}


@pytest.fixture(scope='module')
def ref(tmp_path_factory) -> dict[str, Any]:
    return run_cases_in_reference(CASES, HEADER, str(tmp_path_factory.mktemp('ref')))


@pytest.fixture(scope='module')
def ours(tmp_path_factory) -> dict[str, Any]:
    return run_cases_here(CASES, HEADER, str(tmp_path_factory.mktemp('ours')))


def test_warm_cache_survives_a_lost_remote_index(ours, ref) -> None:
    assert ours['warm_cache_index_lost'] == ref['warm_cache_index_lost'] == [True, 50]


def test_warm_cache_survives_an_unreachable_remote(ours, ref) -> None:
    assert ours['warm_cache_unreachable'] == ref['warm_cache_unreachable'] == list(range(30))


def test_state_dict_after_load_reports_the_loaded_position(ours, ref) -> None:
    mine, theirs = ours['state_after_load'], ref['state_after_load']
    assert mine['after'] == theirs['after'] == [0, 40]
    assert mine['resumed'] == theirs['resumed'] == [40, 41, 42, 60]
    # Before any iteration both say epoch -1 ("from the start"); each loads the other's.
    assert theirs['fresh_epoch'] == mine['fresh_epoch'] == -1
    assert mine['from_pre_iteration_state'] == theirs['from_pre_iteration_state'] == 100


def test_pre_iteration_state_keeps_the_datasets_own_layout(ours, ref) -> None:
    # [epoch -1 state ignored whole, epoch 0 state's seed and canonical nodes adopted]
    assert ours['pre_iteration_state_layout'] == ref['pre_iteration_state_layout'] == [True, True]


def test_collate_fn_list_counts_samples(ours, ref) -> None:
    assert ours['collate_list'] == ['list', 10, 40]
    # The reference counts the keys of the batch's first sample instead (3 per batch).
    assert ref['collate_list'][:2] == ['list', 10] and ref['collate_list'][2] != 40


def test_index_without_shards_fails_at_construction(ours, ref) -> None:
    where, names = ours['empty_index']
    assert where == ref['empty_index'][0] == 'construction'
    assert 'streaming.errors.EmptyIndexError' in names and 'builtins.ValueError' in names
    _reference_type_in_ours(names, ref['empty_index'][1])  # RuntimeError, as the reference.


def test_stream_weights_are_filled_in(ours, ref) -> None:
    assert ours['weights_filled_in'] == ref['weights_filled_in']
    assert ours['weights_filled_in'][2] == [[0.25, 0.625, 25], [0.75, 1.25, 75]]


def _reference_type_in_ours(ours_names: list[str], ref_names: list[str]) -> None:
    assert ref_names[0] in ours_names, (ref_names, ours_names)


def test_corrupt_index_is_also_a_json_decode_error(ours, ref) -> None:
    mine, theirs = ours['index_errors']['corrupt'], ref['index_errors']['corrupt']
    assert theirs[0] == 'json.decoder.JSONDecodeError'
    _reference_type_in_ours(mine, theirs)


def test_missing_local_index_without_remote_is_also_a_runtime_error(ours, ref) -> None:
    mine, theirs = ours['index_errors']['missing'], ref['index_errors']['missing']
    assert theirs[0] == 'builtins.RuntimeError'
    _reference_type_in_ours(mine, theirs)
    assert 'builtins.FileNotFoundError' in mine


def test_cache_usage_counts_index_json(ours, ref) -> None:
    usage, index = ours['cache_counts_index']
    assert usage == index and ref['cache_counts_index'] == ours['cache_counts_index']


def test_local_none_cache_is_findable_and_reused(ours, ref) -> None:
    assert ours['local_none'] == ['reused', 30, True, True, True]
    # The reference refuses the second run (its temporary directory exists already).
    assert ref['local_none'][:2] == ['second run fails', 30]
    assert 'builtins.FileExistsError' in ref['local_none'][2]


def test_batch_size_mismatch_warns_naming_both(ours, ref) -> None:
    assert len(ours['batch_size_mismatch']) == 1
    assert 'batch_size=10' in ours['batch_size_mismatch'][0]
    assert 'batch_size=4' in ours['batch_size_mismatch'][0]
    assert ref['batch_size_mismatch'] == []  # The reference is silent.


def test_stream_hooks_are_called(ours, ref) -> None:
    assert ours['stream_hooks'] == [
        'apply_default', 'apply_weights', 'get_index_size', 'set_up_local', 'validate_weights']
    # The reference calls ``Stream.apply_weights`` itself, so a subclass's weight methods are
    # never called there; ours calls them on the streams' class.
    assert ref['stream_hooks'] == ['apply_default', 'get_index_size', 'set_up_local']


def test_apply_weights_override_takes_effect(ours, ref) -> None:
    assert ours['apply_weights_override'] == [10, 10]
    assert ref['apply_weights_override'] == [40, 40]  # Its override is ignored (see above).


def test_set_up_local_override_takes_effect(ours, ref) -> None:
    assert ours['set_up_local_override'] == ref['set_up_local_override'] == [True]


def test_stratified_ties_go_as_in_the_reference(ours, ref) -> None:
    # Three equal streams, global batch 4: the fourth sample of each batch goes to the last
    # stream in both (the reference's tie-breaking).
    assert ours['stratified_ties'] == ref['stratified_ties']
    assert ours['stratified_ties'][1][0] == [0, 1, 2, 2]


def test_dataset_members(ours, ref) -> None:
    assert ours['dataset_members'] == ref['dataset_members']


def test_writer_members_and_signatures(ours, ref) -> None:
    assert ours['writer_members'] == ref['writer_members']
