"""The damage campaign for Parquet files: every damaged file reads right or fails typed.

Clean files of five page layouts pyarrow writes (codecs, data pages v1 and v2, dictionary and
PLAIN, with and without page CRCs), each damaged in every structure (see ``damage_parquet``),
indexed and read as ``SourceStream`` does, in place and copied, with the damage made before
indexing or after it (size and mtime kept). Outcomes: see ``tests/sources/damage_columnar.py``.

CI runs a seeded subset (4 damages per kind and file, each read in one mode: about 380
cases); the bigger run of the closing note (``-s`` prints the counts)::

    STREAMING_COLUMNAR_DAMAGES=40 pytest -q -s tests/sources/test_damage_parquet.py \
        tests/sources/test_damage_arrow.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from streaming import StreamingDataset
from streaming.dataset.source_stream import SourceStream
from streaming.errors import SourceFileError, StreamingError
from streaming.sources import parquet, parquet_pages
from tests.sources import damage_columnar as damage
from tests.sources import damage_parquet
from tests.sources.damage_parquet import (
    VARIANTS,
    Layout,
    clean_table,
    parquet_reference,
)

TALLY = damage.Tally()
VALID: Counter = Counter()  # (variant, where the damage was) -> cases read as another valid file
# Damage inside a page body that a page CRC covers: never "valid" in a file with CRCs.
BODY = ('data-page', 'dictionary-page')


@pytest.fixture(scope='module')
def clean_files(tmp_path_factory) -> dict[str, tuple[bytes, list[dict]]]:
    return damage.clean_files(damage_parquet, list(VARIANTS), str(tmp_path_factory.mktemp('clean')))


@pytest.mark.parametrize('variant', list(VARIANTS))
def test_damaged_parquet_reads_right_or_fails_typed(variant, clean_files, tmp_path, monkeypatch,
                                                    capsys) -> None:
    # The variants marked so have their binary and string columns read by the page reader
    # (its threshold lowered for these small values), the others by pyarrow.
    if VARIANTS[variant][1]:
        monkeypatch.setattr(parquet, 'WIDE_VALUE_BYTES', 1)
    tally = damage.Tally()
    modes = [(True, {'unit_bytes': 1}), (False, {'unit_bytes': 1 << 20})]
    cases = damage.campaign('parquet', {variant: clean_files[variant]},
                            damage.every_damage(damage_parquet), parquet_reference, modes,
                            str(tmp_path), tally)
    TALLY.counts.update(tally.counts)
    VALID.update((variant, c[2].split(' ')[0] if c[1] in ('garbage', 'flip') else c[1])
                 for c in cases if c[4] == 'valid')
    summary = tally.summary('parquet')
    with capsys.disabled():
        print(f'\nparquet {variant}: {summary}')
    assert not tally.failures, '\n'.join(tally.failures[:20])
    assert summary['cases'] >= 70 and summary['typed'] >= summary['cases'] // 3
    if 'crc' in variant:  # The CRC covers every byte of a page body.
        unseen = [c for c in cases if c[4] == 'valid' and
                  (c[2].startswith(BODY) or c[1] == 'invalid-utf8')]
        assert not unseen, unseen[:5]


def test_campaign_totals(capsys) -> None:
    """The counts of the module's campaign (cases, typed, bare, hangs, wrong, short)."""
    summary = TALLY.summary('parquet')
    with capsys.disabled():
        print(f'\nparquet damage campaign: {summary}')
        for kind, counts in TALLY.by_kind('parquet').items():
            print(f'  {kind}: {counts}')
        print(f'  read as another valid file, by variant and place: {dict(VALID)}')
    if summary['cases']:
        assert all(summary[name] == 0 for name in damage.BAD)


def test_the_page_reader_reads_the_clean_files(clean_files, tmp_path, monkeypatch,
                                               spied) -> None:
    """The campaign's page-reader variants are read by it (so their damages exercise it)."""
    monkeypatch.setattr(parquet, 'WIDE_VALUE_BYTES', 1)
    for variant, (_, pages) in VARIANTS.items():
        if not pages:
            continue
        data, rows = clean_files[variant]
        root = tmp_path / variant
        root.mkdir()
        (root / 'a.parquet').write_bytes(data)
        record = damage.index_file('parquet', str(root / 'a.parquet'), {'unit_bytes': 1})
        got = damage.read_units('parquet', str(root), 'a.parquet', record, str(root / 'c'), True)
        assert [damage.plain(s) for s in got] == rows
    assert spied and all(spied)


# ---- the holes the campaign found, each pinned --------------------------------------------
def test_footer_that_made_pyarrow_abort_is_a_typed_error(clean_files, tmp_path) -> None:
    """A schema element's repetition changed makes the column's level histogram one entry too
    long; pyarrow's ``RowGroupMetaData.column()`` aborted the process on it (no exception).
    Run in a child process, so that a regression shows as a failure, not a dead test run.
    """
    data, _ = clean_files['gzip-v2']
    layout = Layout(data)
    base = layout.footer[0]
    footer = data[base:layout.footer[1]]
    field = next(f for f in layout.footer_fields if f[0] == (2, 3, 3))  # Schema 3: repetition.
    shifted = (field[0], field[1], field[2] - base, field[3] - base)
    damaged = data[:base] + damage.set_field(footer, shifted, 0)
    damaged += len(damaged[base:]).to_bytes(4, 'little') + b'PAR1'
    path = tmp_path / 'data' / 'a.parquet'
    path.parent.mkdir()
    path.write_bytes(damaged)
    code = textwrap.dedent(f'''
        from streaming.errors import SourceFileError
        from tests.sources import damage_columnar as damage
        try:
            damage.index_file('parquet', {str(path)!r}, {{}})
        except SourceFileError as error:
            print('typed:', error)
    ''')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            cwd=os.getcwd(), env={**os.environ, 'PYTHONPATH': os.getcwd()},
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith('typed:') and 'a.parquet' in result.stdout


def test_thrift_parser_bounds_depth_and_counts() -> None:
    read = parquet_pages.read_struct
    deep = b'\x1c' * 100_000 + b'\x00' * 100_000  # Field 1, a struct, 100,000 deep.
    with pytest.raises(parquet_pages.ThriftError, match='deep'):
        read(deep, 0)
    huge_list = b'\x19\xf5' + b'\xff\xff\xff\xff\x0f' + b'\x00' * 16  # 2**32 - 1 i32 items.
    with pytest.raises(parquet_pages.ThriftError, match='do not fit'):
        read(huge_list, 0)
    long_varint = b'\x15' + b'\xff' * 20  # Field 1, an i32 whose varint never ends.
    with pytest.raises(parquet_pages.ThriftError, match='varint'):
        read(long_varint, 0)
    assert read(b'\x15\x04\x19\x35\x02\x04\x06\x00', 0) == ({1: 2, 2: [1, 2, 3]}, 8)


def _damaged_page(tmp_path, variant: str, column: str, edit) -> str:  # noqa: ANN001
    """A folder holding the clean file of ``variant``, the first data page of ``column``
    ``edit``ed (``edit(data, header start, body start, body end)``).
    """
    import pyarrow.parquet as pq
    root = tmp_path / 'data'
    root.mkdir()
    path = str(root / 'a.parquet')
    pq.write_table(clean_table(), path, row_group_size=8, **VARIANTS[variant][0])
    with open(path, 'rb') as f:
        data = f.read()
    layout = Layout(data)
    start, stop = layout.chunks[clean_table().column_names.index(column)]  # In row group 0.
    header, body, end, _ = next(p for p in layout.pages
                                if start <= p[0] < stop and p[3] != 2 and p[2] > p[1])
    with open(path, 'wb') as f:
        f.write(edit(data, header, body, end))
    return str(root)


@pytest.mark.parametrize('column', ['blob', 'id'])
def test_a_page_failing_its_crc_names_file_and_row_group(tmp_path, monkeypatch, column) -> None:
    # blob: the page reader's column (it checks the CRC and leaves the page to pyarrow, which
    # refuses it); id: pyarrow's own. One flipped bit in a page body, uncompressed, PLAIN.
    monkeypatch.setattr(parquet, 'WIDE_VALUE_BYTES', 1)

    def flip(data: bytes, header: int, body: int, end: int) -> bytes:
        return data[:end - 1] + bytes([data[end - 1] ^ 1]) + data[end:]

    root = _damaged_page(tmp_path, 'none-v2-crc', column, flip)
    stream = SourceStream(remote=root, local=str(tmp_path / 'cache'), columns=[column],
                          options={'unit_bytes': 1})
    dataset = StreamingDataset(streams=[stream], batch_size=4)
    with pytest.raises(SourceFileError, match=r'(?i)row group 0 of a\.parquet.*crc'):
        [dataset[i] for i in range(dataset.num_samples)]


def test_a_huge_declared_page_size_is_not_allocated(tmp_path, monkeypatch) -> None:
    """A page header declaring 2**31 - 1 bytes decompressed: the page reader does not allocate
    it (it leaves the page to pyarrow), and the read fails typed in bounded memory.
    """
    import resource
    monkeypatch.setattr(parquet, 'WIDE_VALUE_BYTES', 1)

    def huge(data: bytes, header: int, body: int, end: int) -> bytes:
        fields, _ = damage.thrift_fields(data, header)
        field = next(f for f in fields if f[0] == (2,))  # uncompressed_page_size
        return damage.set_field(data, field, 2**31 - 1)

    root = _damaged_page(tmp_path, 'snappy-v1-dict', 'blob', huge)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    stream = SourceStream(remote=root, local=str(tmp_path / 'cache'), options={'unit_bytes': 1})
    with pytest.raises(StreamingError, match=r'a\.parquet'):
        dataset = StreamingDataset(streams=[stream], batch_size=4)
        [dataset[i] for i in range(dataset.num_samples)]
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 512 << 10, f'peak memory grew by {grown_kib} KiB'


def test_a_string_that_is_not_utf8_names_column_row_and_file(tmp_path, monkeypatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    root = tmp_path / 'data'
    root.mkdir()
    table = pa.table({'text': pa.array(['fine', 'ok', 'also fine'])})
    pq.write_table(table, str(root / 'a.parquet'), compression='none', use_dictionary=False,
                   write_statistics=False)  # The value only in its page.
    data = (root / 'a.parquet').read_bytes()
    at = data.index(b'also fine')
    (root / 'a.parquet').write_bytes(data[:at] + b'\xff\xfe' + data[at + 2:])
    for wide in (1, 16 << 10):  # The page reader's spans, and pyarrow's buffers.
        monkeypatch.setattr(parquet, 'WIDE_VALUE_BYTES', wide)
        stream = SourceStream(remote=str(root), local=str(tmp_path / f'cache{wide}'))
        dataset = StreamingDataset(streams=[stream], batch_size=4)
        assert dataset[0] == {'text': 'fine'}
        with pytest.raises(SourceFileError,
                           match=r"column 'text' of row group 0 of a\.parquet .*row 2 is not "
                                 r"valid UTF-8"):
            dataset[2]


def test_a_dictionary_of_two_billion_values_is_a_typed_error(tmp_path) -> None:
    """A dictionary page header declaring 2**31 - 1 values: pyarrow fails to allocate 32 GiB
    and raises ``ArrowMemoryError`` (a ``MemoryError``), which must reach the user typed.
    """
    import pyarrow.parquet as pq
    root = tmp_path / 'data'
    root.mkdir()
    pq.write_table(clean_table(), str(root / 'a.parquet'), row_group_size=8,
                   **VARIANTS['snappy-v1-dict'][0])
    data = (root / 'a.parquet').read_bytes()
    layout = Layout(data)
    start, stop = layout.chunks[clean_table().column_names.index('blob')]  # Binary values.
    header = next(p for p in layout.pages if p[3] == 2 and start <= p[0] < stop)[0]
    fields, _ = damage.thrift_fields(data, header)
    count = next(f for f in fields if f[0] == (7, 1))  # DictionaryPageHeader.num_values
    (root / 'a.parquet').write_bytes(damage.set_field(data, count, 2**31 - 1))
    stream = SourceStream(remote=str(root), local=str(tmp_path / 'cache'),
                          options={'unit_bytes': 1})
    with pytest.raises(StreamingError, match=r'a\.parquet'):
        dataset = StreamingDataset(streams=[stream], batch_size=4)
        [dataset[i] for i in range(dataset.num_samples)]
