"""Incompatibilities a user could hit (issue 23), each one snippet of user code run on ours and
on the reference (an oracle in its own env) and compared.

Errors: where the reference raises another type than ours, ours keeps its typed error and is
also an instance of the reference's type, so ``except`` clauses written for either catch it.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from typing import Any, Iterator

import pytest

from tests.compat.helpers import image_bytes
from tests.compat.oracle import run_cases_here, run_cases_in_reference

HEADER = f"""
import io, json, os
import numpy as np
from streaming import CSVWriter, JSONWriter, MDSWriter, StreamingDataset
from streaming.base.storage import CloudUploader
from streaming.base.util import merge_index

IMAGES = [bytes.fromhex(h) for h in {[image_bytes(seed).hex() for seed in range(3)]!r}]

def write(out, n, start=0, **kwargs):
    with MDSWriter(out=out, columns={{'id': 'int'}}, size_limit=1 << 9, **kwargs) as w:
        for i in range(start, start + n):
            w.write({{'id': i}})

def error_names(error):
    return [c.__module__ + '.' + c.__name__ for c in type(error).__mro__]

def outcome(call):
    try:
        call()
        return 'ok'
    except Exception as error:
        return error_names(error)

def tree(path):
    return sorted(os.path.relpath(os.path.join(d, f), path)
                  for d, _, files in os.walk(path) for f in files)
"""

CASES = {
    # 1. An uploader over a directory that holds files keeps them with exist_ok=True (and
    # refuses without it); merge_index then merges the sub-datasets already there.
    'uploader_keeps_contents': """
out = root + '/out'
write(out + '/part0', 20)
write(out + '/part1', 20, start=20)
os.makedirs(out + '/notes')
open(out + '/notes/mine.txt', 'w').write('keep me')
before = tree(out)
refused = outcome(lambda: CloudUploader.get(out))
CloudUploader.get(out, exist_ok=True)
kept = tree(out) == before
merge_index(out, keep_local=True)
ids = sorted(s['id'] for s in StreamingDataset(local=out, batch_size=5))
result = [refused[0], kept, ids == list(range(40))]
""",
    # 1b. The writers' exist_ok still empties their output directory (as the reference's do).
    'writer_exist_ok_clears': """
out = root + '/out'
os.makedirs(out)
open(out + '/stale.txt', 'w').write('x')
write(out, 5, exist_ok=True)
result = tree(out)
""",
    # 2. A value of the wrong Python type for its column, in each writer.
    'wrong_type': """
result = {}
for fmt, writer_class in [('mds', MDSWriter), ('csv', CSVWriter), ('json', JSONWriter)]:
    for encoding, value in [('str', 5), ('int', 'x'), ('int', 1.5)]:
        out = f'{root}/{fmt}-{encoding}-{type(value).__name__}'
        def run():
            with writer_class(out=out, columns={'c': encoding}) as writer:
                writer.write({'c': value})
        result[f'{fmt} {encoding} {type(value).__name__}'] = outcome(run)
for encoding, value in [('bytes', 'x'), ('ndarray', [1, 2]), ('pil', 'x'), ('str_int', 'x')]:
    def run():
        with MDSWriter(out=f'{root}/mds-{encoding}', columns={'c': encoding}) as writer:
            writer.write({'c': value})
    result[f'mds {encoding}'] = outcome(run)
""",
    # 3. jpeg_array takes bytes-like JPEG files (bytes, bytearray, memoryview) and reads
    # them back as images with the same pixels.
    'jpeg_array_bytes_like': """
from PIL import Image
values = {'bytes': IMAGES, 'bytearray': [bytearray(b) for b in IMAGES],
          'memoryview': [memoryview(b) for b in IMAGES], 'mixed': [IMAGES[0], bytearray(IMAGES[1])],
          'tuple': tuple(bytearray(b) for b in IMAGES)}
result = {}
for label, value in values.items():
    out = f'{root}/{label}'
    with MDSWriter(out=out, columns={'im': 'jpeg_array', 'id': 'int'}) as writer:
        writer.write({'im': value, 'id': 0})
    images = StreamingDataset(local=out, batch_size=1)[0]['im']
    result[label] = [[type(im).__name__, list(im.size),
                      np.array_equal(np.asarray(im), np.asarray(Image.open(io.BytesIO(raw))))]
                     for im, raw in zip(images, value)]
result['str item'] = outcome(lambda: MDSWriter(out=root + '/bad', columns={'im': 'jpeg_array'})
                             .write({'im': ['x']}))
""",
    # 7. Bad ``out`` values and an unknown scheme are ValueErrors.
    'uploader_bad_out': """
result = {}
for label, out in [('empty tuple', ()), ('1-tuple', (root,)), ('3-tuple', (root, root, root)),
                   ('gcs scheme', 'gcs://bucket/path'), ('gcs pair', (root + '/l', 'gcs://b/p'))]:
    result[label] = outcome(lambda: CloudUploader.get(out))
result['gcs writer'] = outcome(lambda: MDSWriter(out='gcs://bucket/p', columns={'id': 'int'}))
""",
    # 7b. clear_local deletes a file (not a directory) unless keep_local.
    'clear_local': """
result = {}
for keep_local in [False, True]:
    for remote in [False, True]:
        for kind in ['file', 'dir']:
            label = f'keep_local={keep_local} remote={remote} {kind}'
            base = f'{root}/{len(result)}'
            out = (base + '/local', base + '/remote') if remote else base + '/local'
            uploader = CloudUploader.get(out, keep_local=keep_local)
            path = base + '/thing'
            if kind == 'file':
                os.makedirs(base, exist_ok=True)
                open(path, 'w').write('x')
            else:
                os.makedirs(path + '/inner')
            uploader.clear_local(path)
            result[label] = os.path.exists(path)
""",
    # 6. Nothing of ours in a user's local-only dataset directory, nor in a cache directory:
    # the same listing and "bytes on disk" (the sum of getsize over the directory's entries).
    'no_files_of_ours_in_local': """
def disk(path):
    return [sorted(os.listdir(path)),
            sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path))]
write(root + '/mine', 300)
before = disk(root + '/mine')
for shuffle in [False, True, True]:  # The second shuffled run finds any set-up cache.
    assert len(list(StreamingDataset(local=root + '/mine', batch_size=10, shuffle=shuffle))) == 300
write(root + '/remote', 300)
for shuffle in [False, True, True]:
    dataset = StreamingDataset(remote=root + '/remote', local=root + '/cache', batch_size=10,
                               shuffle=shuffle)
    assert len(list(dataset)) == 300
result = [before == disk(root + '/mine'), disk(root + '/mine'), disk(root + '/cache')]
""",
    # 8. local=None: the reference's cache path (under the temp dir, by remote and split).
    'local_none_path': """
import tempfile
os.makedirs(root + '/tmp')
tempfile.tempdir = root + '/tmp'
saved = os.environ.pop('STREAMING_CACHE_DIR', None)
try:
    write(root + '/remote/train', 20)
    dataset = StreamingDataset(remote=root + '/remote', split='train', batch_size=5)
    ids = sorted(s['id'] for s in dataset)
    from hashlib import blake2s
    from streaming import Stream
    digest = blake2s((root + '/remote').encode(), digest_size=16).hexdigest()
    result = [os.path.relpath(dataset.streams[0].local, root).replace(digest, '<digest>'),
              Stream(remote='s3://bucket/path').local.replace(root, '<root>'),
              Stream(remote='s3://bucket/path', split='val').local.replace(root, '<root>'),
              ids == list(range(20)),
              [name.replace(digest, '<digest>') for name in tree(root + '/tmp')
               if name.endswith(('.json', '.mds'))]]
finally:
    tempfile.tempdir = None
    if saved is not None:
        os.environ['STREAMING_CACHE_DIR'] = saved
""",
    # 8. A fresh dataset's state says epoch -1 (next_epoch - 1), as the reference's.
    'fresh_state_epoch': """
write(root + '/d', 40)
dataset = StreamingDataset(local=root + '/d', batch_size=4)
fresh = [dataset.state_dict(0, False)['epoch'], dataset.state_dict(5, True)]
dataset.next_epoch = 3
before = dataset.state_dict(0, False)['epoch']
iterator = iter(dataset)
next(iterator)
during = dataset.state_dict(1, False)
other = StreamingDataset(local=root + '/d', batch_size=4)
other.load_state_dict(StreamingDataset(local=root + '/d', batch_size=4).state_dict(0, False))
result = [fresh, before, [during['epoch'], during['sample_in_epoch']],
          len(list(other))]
""",
}


# Cases against an S3 server (moto, on loopback): its URL and a fresh bucket come in the
# environment (S3_ENDPOINT_URL, TEST_BUCKET), which both libraries' processes see.
S3_CASES = {
    # 4. A missing object: FileNotFoundError in ours, botocore's ClientError in the reference.
    's3_missing_object': """
from streaming.base.storage import CloudDownloader
bucket = os.environ['TEST_BUCKET']
def describe(call):
    try:
        call()
        return 'ok'
    except Exception as error:
        return [error_names(error), getattr(error, 'response', {}).get('Error'),
                getattr(error, 'operation_name', None)]
url = f's3://{bucket}/nope/x.bin'
result = {
    'download': describe(lambda: CloudDownloader.get(url).download(url, root + '/x.bin')),
    'no bucket': describe(lambda: CloudDownloader.get(url).download(
        's3://no-such-bucket-here/x.bin', root + '/y.bin')),
    'dataset': describe(lambda: StreamingDataset(remote=f's3://{bucket}/nope', local=root + '/c',
                                                 batch_size=1, download_retry=1)),
}
""",
    # 1. merge_index into an existing remote prefix, with a staging directory that holds files.
    's3_merge_into_prefix': """
import uuid
remote = f"s3://{os.environ['TEST_BUCKET']}/{uuid.uuid4().hex}/ds"
write(remote + '/a', 10)
write(remote + '/b', 5, start=10)
stage = root + '/stage'
os.makedirs(stage)
open(stage + '/notes.txt', 'w').write('keep me')
CloudUploader.get((stage, remote + '/c'), exist_ok=True)
kept = tree(stage) == ['notes.txt']
merge_index((stage, remote), keep_local=True)
ids = sorted(s['id'] for s in StreamingDataset(remote=remote, local=root + '/cache', batch_size=5))
result = [kept, 'notes.txt' in tree(stage), ids == list(range(15))]
""",
}

# 5. ``gs://`` with no credentials at all (none in the environment, no gcloud config, no
# metadata server). The dataset allows one retry (download_retry=2), which ours must not take;
# the reference takes it (with 5 it slept 1 + 2 + 4 + 8 s between its attempts, holding the
# reference lock that the other oracle tests wait on).
GCS_CASE = {
    'gcs_no_credentials': """
import tempfile, time
from streaming.base.storage import CloudDownloader, GCSUploader
result = {}
for label, call in [
        ('uploader', lambda: CloudUploader.get((root + '/l', 'gs://bucket/x'))),
        ('GCSUploader', lambda: GCSUploader('gs://bucket/x')),
        ('writer', lambda: MDSWriter(out='gs://bucket/x', columns={'id': 'int'})),
        ('downloader', lambda: CloudDownloader.get('gs://bucket/x/a').download(
            'gs://bucket/x/a', root + '/a')),
        ('dataset', lambda: StreamingDataset(remote='gs://bucket/x', local=root + '/c',
                                             batch_size=1, download_retry=2))]:
    start = time.monotonic()
    result[label] = [outcome(call), time.monotonic() - start]
""",
}


def _gcs_without_credentials(monkeypatch: pytest.MonkeyPatch, tmp: str) -> None:
    for name in list(os.environ):
        if name.startswith(('GCS_', 'GOOGLE_', 'STORAGE_EMULATOR', 'GCE_', 'CLOUDSDK_')):
            monkeypatch.delenv(name)
    monkeypatch.setenv('CLOUDSDK_CONFIG', os.path.join(tmp, 'no-gcloud'))
    monkeypatch.setenv('NO_GCE_CHECK', 'true')  # Not a GCE machine: skip the metadata probe.


@pytest.fixture(scope='module')
def s3_env(tmp_path_factory) -> Iterator[None]:
    pytest.importorskip('moto.server', reason='moto[server] (the storage-test extra) is missing')
    import boto3

    from tests.storage import servers
    server = servers.moto_server()
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name in list(os.environ):
            if name.startswith(('AWS_', 'S3_')):
                monkeypatch.delenv(name)
        none = str(tmp_path_factory.mktemp('aws') / 'none')
        monkeypatch.setenv('AWS_CONFIG_FILE', none)
        monkeypatch.setenv('AWS_SHARED_CREDENTIALS_FILE', none)
        monkeypatch.setenv('S3_ENDPOINT_URL', server.url)
        monkeypatch.setenv('AWS_ACCESS_KEY_ID', 'fake-key-id')
        monkeypatch.setenv('AWS_SECRET_ACCESS_KEY', 'fake-secret')
        monkeypatch.setenv('AWS_DEFAULT_REGION', 'us-east-1')
        bucket = f'incompat-{uuid.uuid4().hex[:10]}'
        boto3.client('s3', endpoint_url=server.url).create_bucket(Bucket=bucket)
        monkeypatch.setenv('TEST_BUCKET', bucket)
        yield
    server.stop()


def _run(runner: Any, cases: dict[str, str], base: str) -> dict[str, Any]:
    """``cases`` run with ``runner``; our backends are made afresh for the environment."""
    from streaming.storage import registry
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(registry, '_instances', {})
        return runner(cases, HEADER, base)


@pytest.fixture(scope='module')
def ref(tmp_path_factory) -> dict[str, Any]:
    return run_cases_in_reference(CASES, HEADER, str(tmp_path_factory.mktemp('ref')))


@pytest.fixture(scope='module')
def ours(tmp_path_factory) -> dict[str, Any]:
    return _run(run_cases_here, CASES, str(tmp_path_factory.mktemp('ours')))


@pytest.fixture(scope='module')
def s3_both(s3_env, tmp_path_factory) -> tuple[dict[str, Any], dict[str, Any]]:
    return (_run(run_cases_here, S3_CASES, str(tmp_path_factory.mktemp('ours-s3'))),
            run_cases_in_reference(S3_CASES, HEADER, str(tmp_path_factory.mktemp('ref-s3'))))


@pytest.fixture(scope='module')
def gcs_both(tmp_path_factory) -> tuple[dict[str, Any], dict[str, Any]]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        _gcs_without_credentials(monkeypatch, str(tmp_path_factory.mktemp('gcs-env')))
        return (_run(run_cases_here, GCS_CASE, str(tmp_path_factory.mktemp('ours-gcs'))),
                run_cases_in_reference(GCS_CASE, HEADER,
                                       str(tmp_path_factory.mktemp('ref-gcs'))))


def _also_theirs(mine: Any, theirs: Any) -> None:
    """Both raised; ours is (also) an instance of the reference's class."""
    assert isinstance(mine, list) and isinstance(theirs, list), (mine, theirs)
    assert theirs[0] in mine, (mine, theirs)


def test_uploader_exist_ok_keeps_the_directory_and_merge_works(ours, ref) -> None:
    assert ours['uploader_keeps_contents'] == ref['uploader_keeps_contents']
    assert ours['uploader_keeps_contents'] == ['builtins.FileExistsError', True, True]


def test_writer_exist_ok_still_clears_its_output(ours, ref) -> None:
    assert ours['writer_exist_ok_clears'] == ref['writer_exist_ok_clears']
    assert 'stale.txt' not in ours['writer_exist_ok_clears']


@pytest.mark.parametrize('case', [f'{fmt} {enc} {kind}' for fmt in ['mds', 'csv', 'json']
                                  for enc, kind in [('str', 'int'), ('int', 'str'),
                                                    ('int', 'float')]] +
                         ['mds bytes', 'mds ndarray', 'mds pil', 'mds str_int'])
def test_wrong_type_is_also_the_references_error(ours, ref, case: str) -> None:
    mine, theirs = ours['wrong_type'][case], ref['wrong_type'][case]
    assert theirs[0] == 'builtins.AttributeError', theirs
    _also_theirs(mine, theirs)
    assert mine[0] == 'streaming.errors.ColumnTypeError' and 'builtins.TypeError' in mine


def test_jpeg_array_takes_bytes_like_images(ours, ref) -> None:
    mine, theirs = dict(ours['jpeg_array_bytes_like']), dict(ref['jpeg_array_bytes_like'])
    _also_theirs(mine.pop('str item'), theirs.pop('str item'))  # TypeError in both.
    assert mine == theirs
    for label in ['bytes', 'bytearray', 'memoryview', 'mixed', 'tuple']:
        images = ours['jpeg_array_bytes_like'][label]
        assert images and all(kind == 'JpegImageFile' and size == [16, 12] and same
                              for kind, size, same in images), (label, images)


@pytest.mark.parametrize('case', ['empty tuple', '1-tuple', '3-tuple', 'gcs scheme',
                                  'gcs pair', 'gcs writer'])
def test_bad_out_is_a_value_error(ours, ref, case: str) -> None:
    mine, theirs = ours['uploader_bad_out'][case], ref['uploader_bad_out'][case]
    assert theirs[0] == 'builtins.ValueError'
    _also_theirs(mine, theirs)


def test_gcs_scheme_error_says_what_to_do(ours) -> None:
    pytest.importorskip('fsspec')
    try:
        import gcsfs  # noqa: F401
        pytest.skip('gcsfs is installed: gcs:// is then served through fsspec')
    except ImportError:
        pass
    mine = ours['uploader_bad_out']['gcs scheme']
    assert mine[0] == 'streaming.storage.errors.UnavailableSchemeError'
    assert 'builtins.ImportError' in mine  # Still the MissingDependencyError it was.


def test_clear_local_deletes_a_file(ours, ref) -> None:
    assert ours['clear_local'] == ref['clear_local']
    assert ours['clear_local']['keep_local=False remote=False file'] is False
    assert ours['clear_local']['keep_local=True remote=True file'] is True


@pytest.mark.parametrize('case', ['download', 'no bucket', 'dataset'])
def test_missing_s3_object_is_also_a_client_error(s3_both, case: str) -> None:
    ours, ref = (both['s3_missing_object'][case] for both in s3_both)
    mine, theirs = ours[0], ref[0]
    assert theirs[0] == 'botocore.exceptions.ClientError'
    _also_theirs(mine, theirs)
    assert 'builtins.FileNotFoundError' in mine
    assert ours[1:] == ref[1:]  # The same response['Error'] and operation_name.


def test_merge_index_into_an_existing_s3_prefix(s3_both) -> None:
    ours, ref = (both['s3_merge_into_prefix'] for both in s3_both)
    assert ours == ref == [True, True, True]


@pytest.mark.parametrize('case', ['uploader', 'GCSUploader', 'writer', 'downloader', 'dataset'])
def test_gcs_without_credentials_is_a_value_error_at_once(gcs_both, case: str) -> None:
    (mine, took), (theirs, _) = (both['gcs_no_credentials'][case] for both in gcs_both)
    assert theirs[0] == 'builtins.ValueError', theirs
    _also_theirs(mine, theirs)
    # Not the DownloadError that retries end with: raised by the first attempt. (google-auth's
    # own search for credentials takes up to a few seconds on a loaded machine.)
    assert mine[0] == 'streaming.storage.errors.MissingCredentialsError'
    assert 'builtins.ValueError' in mine and 'DownloadError' not in str(mine)
    assert took < 20


def test_no_files_of_ours_in_the_users_directories(ours, ref) -> None:
    kept, mine, cache = ours['no_files_of_ours_in_local']
    assert kept is True
    assert ours['no_files_of_ours_in_local'] == ref['no_files_of_ours_in_local']
    assert not [name for name in mine[0] + cache[0] if name.startswith('.')]


def test_local_none_caches_where_the_reference_does(ours, ref) -> None:
    assert ours['local_none_path'] == ref['local_none_path']
    digest = hashlib.blake2s(b's3://bucket/path', digest_size=16).hexdigest()
    assert ours['local_none_path'][1] == f'<root>/tmp/{digest}/'


def test_fresh_state_says_epoch_minus_one(ours, ref) -> None:
    assert ours['fresh_state_epoch'] == ref['fresh_state_epoch']
    assert ours['fresh_state_epoch'][:2] == [[-1, {
        'epoch': -1, 'sample_in_epoch': 5, 'num_canonical_nodes': 1, 'shuffle_seed': 9176,
        'initial_physical_nodes': 1}], 2]
