"""The last four incompatibilities a user could hit (issue 32, items 5-8), each one snippet of
user code run on ours and on the reference (an oracle in its own env) and compared.

As in ``test_user_incompat.py``: where the reference raises another type, ours keeps its typed
error and is also an instance of the reference's type.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.compat.oracle import run_cases_here, run_cases_in_reference
from tests.compat.test_user_incompat import HEADER, _also_theirs, _gcs_without_credentials, _run

CASES = {
    # 5. The bare CSV/JSON column encodings, used on their own, on instances and on the class.
    'bare_encodings': """
from streaming.base.format.json import encodings as J
from streaming.base.format.xsv import encodings as X

def value(call):
    try:
        return ['ok', call()]
    except Exception as error:
        return error_names(error)

calls = {
    'xsv Str().encode(99)': lambda: X.Str().encode(99),
    'xsv Str.encode(99)': lambda: X.Str.encode(99),
    'xsv Str.encode(abc)': lambda: X.Str.encode('abc'),
    'xsv Str().encode(abc)': lambda: X.Str().encode('abc'),
    'xsv Int.encode(7)': lambda: X.Int.encode(7),
    'xsv Int.encode(True)': lambda: X.Int.encode(True),
    'xsv Int.encode(1.5)': lambda: X.Int.encode(1.5),
    'xsv Int.encode(7 str)': lambda: X.Int.encode('7'),
    'xsv Float.encode(1.5)': lambda: X.Float.encode(1.5),
    'xsv Float.encode(1)': lambda: X.Float.encode(1),
    'xsv Float.encode(True)': lambda: X.Float.encode(True),
    'xsv Int.decode(12)': lambda: X.Int.decode('12'),
    'xsv Float().decode(2.5)': lambda: X.Float().decode('2.5'),
    'xsv Str.decode(x)': lambda: X.Str.decode('x'),
    'xsv_encode(str, 5)': lambda: X.xsv_encode('str', 5),
    'xsv_encode(float, 2.5)': lambda: X.xsv_encode('float', 2.5),
    'json Str().is_encoded(99)': lambda: J.Str().is_encoded(99),
    'json Str.is_encoded(99)': lambda: J.Str.is_encoded(99),
    'json Str.is_encoded(abc)': lambda: J.Str.is_encoded('abc'),
    'json Int.is_encoded(True)': lambda: J.Int.is_encoded(True),
    'json Int.is_encoded(1.0)': lambda: J.Int.is_encoded(1.0),
    'json Float().is_encoded(1)': lambda: J.Float().is_encoded(1),
    'json Float.is_encoded(0.5)': lambda: J.Float.is_encoded(0.5),
    'is_json_encoded(int, x)': lambda: J.is_json_encoded('int', 'x'),
    'is_json_encoded(str, s)': lambda: J.is_json_encoded('str', 's'),
}
result = {label: value(call) for label, call in calls.items()}
""",
    # 7. merge_index given a partition index that is not there.
    'merge_missing_partition': """
write(root + '/a', 10)
result = {
    'path': outcome(lambda: merge_index([root + '/a/index.json', root + '/gone/index.json'],
                                        root + '/out1')),
    'pair': outcome(lambda: merge_index([(root + '/gone/index.json',
                                          root + '/gone2/index.json')], root + '/out2')),
}
""",
    # 8. merge_index given (local, remote) pairs whose local index exists: the shards are named
    # after the folder of the index actually read (the local one), whatever the remote is called.
    'merge_pairs_name_the_folder_read': """
write(root + '/local/p0', 30)
write(root + '/local/p1', 30, start=30)
pairs = [(root + f'/local/p{i}/index.json', root + f'/remote/part-{i}/index.json')
         for i in range(2)]
merge_index(pairs, root + '/local')
with open(root + '/local/index.json') as f:
    shards = json.load(f)['shards']
names = [s['raw_data']['basename'] for s in shards]
ids = sorted(s['id'] for s in StreamingDataset(local=root + '/local', batch_size=5))
result = [names, ids == list(range(60))]
""",
}

# 6. gs:// credentials are re-read from the environment at each use: HMAC keys set for a first
# uploader, then removed, leave no way to authenticate (no application default credentials
# here), which the next uploader, download and dataset report at once as a ValueError.
GCS_CASE = {
    'gcs_keys_removed': """
from streaming.base.storage import CloudDownloader, GCSUploader
os.environ['GCS_HMAC_ENDPOINT_URL'] = 'http://127.0.0.1:9'  # ours only: never the internet
os.environ['GCS_KEY'], os.environ['GCS_SECRET'] = 'fake-key', 'fake-secret'
first = outcome(lambda: GCSUploader((root + '/first', 'gs://bucket/x')))
del os.environ['GCS_KEY'], os.environ['GCS_SECRET']
result = {'first': first}
for label, call in [
        ('uploader', lambda: CloudUploader.get((root + '/l', 'gs://bucket/x'))),
        ('GCSUploader', lambda: GCSUploader((root + '/g', 'gs://bucket/x'))),
        ('writer', lambda: MDSWriter(out=(root + '/w', 'gs://bucket/x'), columns={'id': 'int'})),
        ('downloader', lambda: CloudDownloader.get('gs://bucket/x/a').download(
            'gs://bucket/x/a', root + '/a')),
        ('dataset', lambda: StreamingDataset(remote='gs://bucket/x', local=root + '/c',
                                             batch_size=1, download_retry=1))]:
    result[label] = outcome(call)
""",
}


@pytest.fixture(scope='module')
def both(tmp_path_factory) -> tuple[dict[str, Any], dict[str, Any]]:
    """(ours, reference) results of every case."""
    return (_run(run_cases_here, CASES, str(tmp_path_factory.mktemp('ours'))),
            run_cases_in_reference(CASES, HEADER, str(tmp_path_factory.mktemp('ref'))))


@pytest.fixture(scope='module')
def gcs_both(tmp_path_factory) -> tuple[dict[str, Any], dict[str, Any]]:
    pytest.importorskip('google.cloud.storage', reason='the gcs extra is missing')
    with pytest.MonkeyPatch.context() as monkeypatch:
        _gcs_without_credentials(monkeypatch, str(tmp_path_factory.mktemp('gcs-env')))
        return (_run(run_cases_here, GCS_CASE, str(tmp_path_factory.mktemp('ours-gcs'))),
                run_cases_in_reference(GCS_CASE, HEADER,
                                       str(tmp_path_factory.mktemp('ref-gcs'))))


def test_bare_encodings_refuse_wrong_types_and_work_on_the_class(both) -> None:
    mine, theirs = (results['bare_encodings'] for results in both)
    assert mine.keys() == theirs.keys()
    refused = 0
    for label, outcome in theirs.items():
        if outcome[0] == 'ok':
            assert mine[label] == outcome, label
        else:
            assert outcome[0] == 'builtins.AttributeError', (label, outcome)
            _also_theirs(mine[label], outcome)
            assert mine[label][0] == 'streaming.errors.ColumnTypeError', label
            refused += 1
    assert refused == 12  # Every wrong-typed value, on instances and on the class alike.
    assert mine['xsv Str.encode(abc)'] == ['ok', 'abc']


@pytest.mark.parametrize('case', ['path', 'pair'])
def test_merge_index_missing_partition_is_also_a_runtime_error(both, case: str) -> None:
    mine, theirs = (results['merge_missing_partition'][case] for results in both)
    assert theirs[0] == 'builtins.RuntimeError', theirs
    _also_theirs(mine, theirs)
    assert mine[0] == 'streaming.errors.MissingPartitionIndexError'
    assert 'streaming.errors.MissingIndexError' in mine and 'builtins.FileNotFoundError' in mine


def test_merge_index_pairs_name_the_folder_of_the_index_read(both) -> None:
    mine, theirs = (results['merge_pairs_name_the_folder_read'] for results in both)
    assert mine == theirs
    names, all_read = mine
    assert {name.split('/')[0] for name in names} == {'p0', 'p1'} and all_read is True


@pytest.mark.parametrize('case', ['uploader', 'GCSUploader', 'writer', 'downloader', 'dataset'])
def test_gcs_keys_removed_are_noticed(gcs_both, case: str) -> None:
    mine, theirs = (results['gcs_keys_removed'] for results in gcs_both)
    assert mine['first'] == 'ok'  # Ours made the uploader with the keys (no request).
    assert theirs[case][0] == 'builtins.ValueError', theirs[case]
    _also_theirs(mine[case], theirs[case])
    assert mine[case][0] == 'streaming.storage.errors.MissingCredentialsError'
