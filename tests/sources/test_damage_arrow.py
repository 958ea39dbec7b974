"""The damage campaign for Arrow IPC files and ``save_to_disk`` folders.

Clean files written by ``datasets.Dataset.save_to_disk`` and by ``pyarrow.ipc`` (stream and
file format, batches of 8 rows), each damaged in every structure (see ``damage_arrow``),
indexed and read as ``SourceStream`` does (a unit per batch, and a unit per file), the damage
made before indexing or after it (size and mtime kept). Then the folder: ``state.json`` and
``dataset_info.json`` damaged or missing, data files missing. Outcomes: see
``tests/sources/damage_columnar.py``; the bigger run: ``test_damage_parquet.py``'s docstring.
"""

from __future__ import annotations

import os
import shutil

import pytest

from streaming import StreamingDataset
from streaming.dataset.source_stream import SourceStream
from streaming.errors import SourceFileError
from tests.sources import damage_arrow
from tests.sources import damage_columnar as damage
from tests.sources.damage_arrow import (
    arrow_reference,
    clean_table,
)

VARIANTS = ['datasets', 'stream', 'file']


@pytest.fixture(scope='module')
def clean_files(tmp_path_factory) -> dict[str, tuple[bytes, list[dict]]]:
    return damage.clean_files(damage_arrow, list(VARIANTS), str(tmp_path_factory.mktemp('clean')))


@pytest.mark.parametrize('variant', VARIANTS)
def test_damaged_arrow_reads_right_or_fails_typed(variant, clean_files, tmp_path,
                                                  capsys) -> None:
    tally = damage.Tally()
    modes = [(False, {'unit_bytes': 1}), (False, {'unit_bytes': 1 << 24})]
    damage.campaign('arrow', {variant: clean_files[variant]}, damage.every_damage(damage_arrow),
                    arrow_reference, modes, str(tmp_path), tally)
    summary = tally.summary('arrow')
    with capsys.disabled():
        print(f'\narrow {variant}: {summary}')
        for kind, counts in tally.by_kind('arrow').items():
            print(f'  {kind}: {counts}')
    assert not tally.failures, '\n'.join(tally.failures[:20])
    assert summary['cases'] >= 40 and summary['typed'] >= summary['cases'] // 3


# ---- the folder: state.json, dataset_info.json, missing files ---------------------------------
def _saved(tmp_path, files: int = 3) -> tuple[str, list[dict]]:
    import datasets
    root = str(tmp_path / 'saved')
    table = clean_table()
    datasets.Dataset(table).save_to_disk(root, num_shards=files)
    return root, damage.plain(table.to_pylist())


def _read(root: str, cache: str) -> list[dict]:
    stream = SourceStream(remote=root, local=cache, options={'unit_bytes': 1})
    dataset = StreamingDataset(streams=[stream], batch_size=4)
    return [damage.plain(dataset[i]) for i in range(dataset.num_samples)]


STATE_DAMAGES = {
    'garbage': b'\x00\xffnot json',
    'empty': b'',
    'truncated': b'{"_data_files": [{"filename": "data-0',
    'not an object': b'[1, 2]',
    'no file list': b'{"_fingerprint": "x"}',
    'names not strings': b'{"_data_files": [{"filename": 7}]}',
    'deep': b'[' * 100_000 + b']' * 100_000,
}


@pytest.mark.parametrize('name', list(STATE_DAMAGES))
def test_a_damaged_state_json_is_refused_naming_it(tmp_path, name) -> None:
    root, _ = _saved(tmp_path)
    with open(os.path.join(root, 'state.json'), 'wb') as f:
        f.write(STATE_DAMAGES[name])
    with pytest.raises(SourceFileError, match=r'state\.json is not a datasets state\.json'):
        _read(root, str(tmp_path / 'cache'))


def test_dataset_info_json_is_not_needed(tmp_path) -> None:
    root, rows = _saved(tmp_path)
    with open(os.path.join(root, 'dataset_info.json'), 'wb') as f:
        f.write(b'\xff{garbage')
    assert _read(root, str(tmp_path / 'a')) == rows
    os.remove(os.path.join(root, 'dataset_info.json'))
    assert _read(root, str(tmp_path / 'b')) == rows


@pytest.mark.parametrize('state', ['kept', 'removed'])
def test_a_missing_data_file_is_refused_not_skipped(tmp_path, state) -> None:
    # With state.json its list says which files there are; without it, the files' numbering.
    root, rows = _saved(tmp_path)
    if state == 'removed':
        os.remove(os.path.join(root, 'state.json'))
    assert _read(root, str(tmp_path / 'a')) == rows
    os.remove(os.path.join(root, 'data-00001-of-00003.arrow'))
    with pytest.raises(SourceFileError, match=r'data-00001-of-00003\.arrow is missing'):
        _read(root, str(tmp_path / 'b'))


def test_a_folder_from_s3_with_a_missing_file_is_refused(s3, tmp_path) -> None:
    client, bucket = s3
    root, rows = _saved(tmp_path)
    for name in os.listdir(root):
        if name != 'data-00000-of-00003.arrow':
            client.upload_file(os.path.join(root, name), bucket, f'hf/{name}')
    with pytest.raises(SourceFileError, match=r'data-00000-of-00003\.arrow is missing'):
        _read(f's3://{bucket}/hf', str(tmp_path / 'cache'))
    client.upload_file(os.path.join(root, 'data-00000-of-00003.arrow'), bucket,
                       'hf/data-00000-of-00003.arrow')
    assert _read(f's3://{bucket}/hf', str(tmp_path / 'cache2')) == rows
    shutil.rmtree(root)


def test_a_type_made_unreadable_after_indexing_is_a_typed_error(clean_files, tmp_path) -> None:
    """An int64 field's bit width flipped to 192 in the schema message, after indexing: pyarrow
    raises ``ArrowNotImplementedError`` (no ``ValueError``), which must reach the user typed.
    """
    data, rows = clean_files['stream']
    layout = damage_arrow.Layout(data)
    _, metadata, body, _ = layout.messages[0]  # The schema message.
    spots = [at for at in range(metadata, body - 3) if data[at:at + 4] == b'\x40\0\0\0']
    assert spots
    outcomes = []
    for number, at in enumerate(spots):
        root = tmp_path / str(number)
        root.mkdir()
        damage.write_as(str(root / 'a.arrow'), data)
        damaged = data[:at] + b'\xc0' + data[at + 1:]
        read = damage.case_reader('arrow', str(root), 'a.arrow', damaged, 'read', False, {})
        outcome, detail = damage.judge(read, rows, arrow_reference(str(root / 'a.arrow')),
                                       'a.arrow')
        assert outcome in ('right', 'typed', 'valid'), detail
        outcomes.append(detail)
    assert any('ArrowNotImplementedError' in detail for detail in outcomes), outcomes
