"""Datasets written by the reference and committed under tests/golden/ (see
tests/oracle/make_golden.py): we read them exactly as the reference did, and writing the same
samples ourselves reproduces their files byte for byte. Needs no reference env."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest

from tests.format.test_interop import _comparable
from tests.oracle import ours
from tests.oracle.cases import CASES
from tests.oracle.make_golden import GOLDEN, GOLDEN_CASES


@pytest.mark.parametrize('case', GOLDEN_CASES)
def test_read_golden_as_reference_did(case: str) -> None:
    with open(os.path.join(GOLDEN, f'{case}.expected.json')) as f:
        expected = json.load(f)
    assert len(expected) == CASES[case]['n']
    # Read a copy: reading a compressed-only dataset decompresses shards next to their zips.
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(os.path.join(GOLDEN, case), tmp, dirs_exist_ok=True)
        assert ours.read(tmp) == expected


@pytest.mark.parametrize('case', GOLDEN_CASES)
def test_write_reproduces_golden_bytes(tmp_path, case: str) -> None:
    ours.write(case, str(tmp_path / case))
    compression = CASES[case]['kwargs'].get('compression')
    expected = _comparable(ours.files(os.path.join(GOLDEN, case)), compression)
    actual = _comparable(ours.files(str(tmp_path / case)), compression)
    assert sorted(actual) == sorted(expected)
    for name in expected:
        assert actual[name] == expected[name], f'{case}: {name} differs'


def test_golden_covers_compressed_split_and_image_data() -> None:
    kinds = {CASES[c]['writer'] for c in GOLDEN_CASES}
    assert {'MDSWriter', 'JSONWriter', 'CSVWriter', 'XSVWriter'} <= kinds
    assert any(CASES[c]['kwargs'].get('compression') for c in GOLDEN_CASES)
    for case in GOLDEN_CASES:
        assert os.path.exists(os.path.join(GOLDEN, case, 'index.json')), case
