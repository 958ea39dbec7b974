"""Interop with the reference (mosaicml-streaming 0.13.0), driven as a black box.

For every case in tests/oracle/cases.py both libraries write the same samples. Then:
the shard files and index.json are byte-identical (gz excepted: its header holds a time);
each library reads the other's dataset exactly as the reference reads its own.
"""

from __future__ import annotations

import gzip
import json

import pytest

from tests.oracle import ours
from tests.oracle.cases import CASES
from tests.oracle.runner import run_reference

CASE_NAMES = sorted(CASES)


@pytest.fixture(scope='module')
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Write every case with both libraries and have the reference read both; run once."""
    root = tmp_path_factory.mktemp('interop')
    ops = []
    for case in CASE_NAMES:
        ops.append({'op': 'write', 'case': case, 'out': str(root / 'ref' / case)})
        ours.write(case, str(root / 'ours' / case))
    for case in CASE_NAMES:
        for who in ('ref', 'ours'):
            ops.append({'op': 'read', 'dir': str(root / who / case),
                        'result': str(root / f'{who}-{case}.ref-read.json')})
    outcomes = run_reference(ops)
    failures = [(op, o['error']) for op, o in zip(ops, outcomes) if not o['ok']]
    assert not failures, failures
    return {'root': root}


def _ref_read(root, who: str, case: str) -> list:
    with open(root / f'{who}-{case}.ref-read.json') as f:
        return json.load(f)


def _comparable(files: dict[str, bytes], compression: str | None) -> dict[str, bytes]:
    """gz output embeds a timestamp: compare its decompressed content and drop the zip
    sizes/hashes from the index instead."""
    if not compression or not compression.startswith('gz'):
        return files
    out = {}
    for name, data in files.items():
        if name.endswith('.gz'):
            out[name] = gzip.decompress(data)
        elif name == 'index.json':
            index = json.loads(data)
            for shard in index['shards']:
                for key in ('zip_data', 'zip_meta'):
                    if shard.get(key):
                        shard[key] = {'basename': shard[key]['basename']}
            out[name] = json.dumps(index).encode()
        else:
            out[name] = data
    return out


@pytest.mark.parametrize('case', CASE_NAMES)
def test_written_files_are_byte_identical(datasets: dict, case: str) -> None:
    root = datasets['root']
    compression = CASES[case]['kwargs'].get('compression')
    ref_files = _comparable(ours.files(str(root / 'ref' / case)), compression)
    our_files = _comparable(ours.files(str(root / 'ours' / case)), compression)
    assert sorted(our_files) == sorted(ref_files)
    for name in ref_files:
        assert our_files[name] == ref_files[name], f'{case}: {name} differs'


@pytest.mark.parametrize('case', CASE_NAMES)
def test_we_read_reference_data_as_it_does(datasets: dict, case: str) -> None:
    root = datasets['root']
    expected = _ref_read(root, 'ref', case)
    assert len(expected) == CASES[case]['n']
    assert ours.read(str(root / 'ref' / case)) == expected


@pytest.mark.parametrize('case', CASE_NAMES)
def test_reference_reads_our_data_as_its_own(datasets: dict, case: str) -> None:
    root = datasets['root']
    assert _ref_read(root, 'ours', case) == _ref_read(root, 'ref', case)


@pytest.mark.parametrize('form', ['list', 'root'])
def test_merge_index_matches_reference(tmp_path, form: str) -> None:
    ops = []
    for who in ('ref', 'ours'):
        for part, case in enumerate(['mds_scalars', 'mds_zstd', 'csv']):
            out = tmp_path / who / f'part{part}'
            if who == 'ours':
                ours.write(case, str(out))
            else:
                ops.append({'op': 'write', 'case': case, 'out': str(out)})
    if form == 'list':
        index_files = [str(tmp_path / 'ref' / f'part{p}' / 'index.json') for p in range(3)]
        ops.append({'op': 'merge', 'args': [index_files, str(tmp_path / 'ref')], 'kwargs': {}})
        ours.merge([[p.replace('/ref/', '/ours/') for p in index_files], str(tmp_path / 'ours')],
                   {})
    else:
        ops.append({'op': 'merge', 'args': [str(tmp_path / 'ref')], 'kwargs': {}})
        ours.merge([str(tmp_path / 'ours')], {})
    ops.append({'op': 'read', 'dir': str(tmp_path / 'ours'),
                'result': str(tmp_path / 'ref-reads-ours.json')})
    outcomes = run_reference(ops)
    assert all(o['ok'] for o in outcomes), outcomes
    with open(tmp_path / 'ref' / 'index.json', 'rb') as f:
        ref_index = f.read()
    with open(tmp_path / 'ours' / 'index.json', 'rb') as f:
        our_index = f.read()
    assert our_index == ref_index
    with open(tmp_path / 'ref-reads-ours.json') as f:
        assert json.load(f) == ours.read(str(tmp_path / 'ours'))

