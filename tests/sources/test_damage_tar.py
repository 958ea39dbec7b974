"""The damage campaign for WebDataset tars: every damaged tar is read right or refused by name.

A tar written by ``webdataset.TarWriter`` (pax headers for a long and a non-ASCII key among
them) is damaged in every way generated below: cut at every structural boundary and beside it,
garbage, zeros and flipped bytes over every header block, header fields rewritten with a valid
checksum (sizes, types, names), garbage in padding, in the end-of-archive blocks and after them,
in member data, and whole files that are empty, hold no samples or are no tar. Each is read
locally and from S3 (moto), damaged before indexing (``index``), after it (``changed``), and
after it with the index trusting the damaged file (``trusted``: only the read-time walk can
tell). The truth is what GNU ``tar`` extracts from the damaged file, grouped as ``webdataset``
groups members; see ``tests/sources/damage.py`` for the outcomes.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import tarfile
import tempfile
from typing import Any

import numpy as np
import pytest

from tests.sources.damage import Case, local_place, run_campaign, run_case, s3_place

SEED = 32
_KEY = re.compile(r'^((?:.*/|)[^.]+)[.]([^/]*)$')  # webdataset's base_plus_ext
_META = re.compile(r'__[^/]*__($|/)')  # webdataset's skip_meta


def _write_original() -> bytes:
    import webdataset as wds
    out = io.BytesIO()
    rng = np.random.RandomState(SEED)
    keys = [f'sample{i:04d}' for i in range(10)] + ['ü-näme', 'k' * 120]
    with wds.TarWriter(out, mtime=1795851799.25) as sink:  # Fixed: the same bytes each run.
        for i, key in enumerate(keys):
            sample = {'__key__': key, 'cls': str(i).encode(),
                      'bin': rng.bytes([0, 1, 511, 512, 513, 1000, 7][i % 7])}
            if i % 3 == 0:
                sample['txt'] = f'caption {i}'.encode()
            sink.write(sample)
    return out.getvalue()


# Run by GNU tar for each regular member, its data on stdin: kept as <n>.data and <n>.name.
_KEEP = 'n=$(ls "$OUT" | wc -l); cat > "$OUT/$n.data"; printf %s "$TAR_FILENAME" > "$OUT/$n.name"'


def gnu_tar_samples(data: bytes) -> list[dict[str, Any]] | None:
    """What GNU tar extracts from ``data``, grouped into samples (None: tar refuses it).

    Members are piped to a command rather than written as files, so names the file system
    cannot hold (too long, binary) and links it cannot make do not count as refusals.
    """
    with tempfile.TemporaryDirectory(prefix='gnu-tar-') as tmp:
        path, out = os.path.join(tmp, 'x.tar'), os.path.join(tmp, 'out')
        os.makedirs(out)
        with open(path, 'wb') as f:
            f.write(data)
        extract = subprocess.run(['tar', '-xf', path, f'--to-command={_KEEP}'],
                                 capture_output=True, env={**os.environ, 'OUT': out})
        if extract.returncode:
            return None
        samples: list[dict[str, Any]] = []
        for number in sorted(int(n.split('.')[0]) for n in os.listdir(out) if n.endswith('.name')):
            with open(os.path.join(out, f'{number}.name'), 'rb') as f:
                name = os.fsdecode(f.read())
            match = _KEY.match(name)
            if _META.match(name) or not match:
                continue
            key, field = match.group(1), match.group(2).lower()
            if not samples or samples[-1]['__key__'] != key:
                samples.append({'__key__': key})
            with open(os.path.join(out, f'{number}.data'), 'rb') as f:
                samples[-1][field] = f.read()
        return samples


def _block(size: int) -> int:
    return size + (-size) % 512


def _checksummed(header: bytearray) -> bytearray:
    header[148:156] = b' ' * 8
    header[148:156] = b'%06o\0 ' % sum(header)
    return header


def _over(data: bytes, at: int, patch: bytes) -> bytes:
    return data[:at] + patch + data[at + len(patch):]


def _tar_cases(original: bytes) -> list[Case]:
    rng = np.random.RandomState(SEED)
    with tarfile.open(fileobj=io.BytesIO(original)) as archive:
        members = archive.getmembers()
    end = members[-1].offset_data + _block(members[-1].size)
    headers = sorted({at for m in members for at in (m.offset, m.offset_data - 512)})
    extension_data = sorted({at for m in members for at in range(m.offset, m.offset_data, 512)}
                            - set(headers))  # The records of pax headers.
    cases: list[Case] = []

    def add(name: str, data: bytes) -> None:
        cases.append(Case(name, data, lambda: gnu_tar_samples(data)))

    boundaries = {0, end, end + 512, end + 1024, len(original)}
    for m in members:
        boundaries |= {m.offset, m.offset_data - 512, m.offset_data, m.offset_data + m.size,
                       m.offset_data + _block(m.size)}
    for at in sorted(boundaries):
        for delta in (-1, 0, 1, 100):
            if 0 <= at + delta < len(original):
                add(f'cut{at + delta}', original[:at + delta])
    for at in extension_data:
        add(f'garbage-pax{at}', _over(original, at, rng.bytes(512)))
        add(f'zero-pax{at}', _over(original, at, bytes(512)))
        add(f'digit-pax{at}', _over(original, at, b'9'))
    main = {m.offset_data - 512: m for m in members}
    for at in headers:
        header = bytearray(original[at:at + 512])
        add(f'garbage-header{at}', _over(original, at, rng.bytes(512)))
        add(f'zero-header{at}', _over(original, at, bytes(512)))
        for _ in range(3):
            pos = int(rng.randint(512))
            add(f'flip-header{at}-{pos}', _over(original, at + pos,
                                                bytes([original[at + pos] ^ 0x10])))
        add(f'checksum-garbage{at}', _over(original, at + 148, b'zz9\0\0\0\0 '))
        stored = int(header[148:154], 8)
        add(f'checksum-off{at}', _over(original, at + 148, b'%06o\0 ' % (stored + 1)))
        size = int(header[124:135], 8)
        member = main.get(at)
        sizes = [size + 1, max(size - 1, 0), size + 512, 0, 0o77777777777]
        if member is not None:
            after = [m for m in members if m.offset > member.offset]
            if after:  # Swallow the next member whole: still a valid tar, one member fewer.
                sizes.append(_block(size) + (after[0].offset_data - after[0].offset) +
                             _block(after[0].size))
        for new in sizes:
            edited = bytearray(header)
            edited[124:136] = b'%011o\0' % new
            add(f'size{new}-header{at}', _over(original, at, bytes(_checksummed(edited))))
        edited = bytearray(header)
        edited[124:136] = b'\x80' + (2 ** 62).to_bytes(11, 'big')
        add(f'size-base256-header{at}', _over(original, at, bytes(_checksummed(edited))))
        for kind in b'5', b'2', b'x', b'S', b'g', b'V', b'L':
            edited = bytearray(header)
            edited[156:157] = kind
            add(f'type{kind.decode()}-header{at}', _over(original, at,
                                                          bytes(_checksummed(edited))))
        for name in (b'', b'other.bin', b'__meta__.json', b'dir/'):
            edited = bytearray(header)
            edited[0:100] = name.ljust(100, b'\0')
            add(f'name{len(name)}-header{at}', _over(original, at, bytes(_checksummed(edited))))
    for m in members:
        pad = _block(m.size) - m.size
        if pad:
            add(f'garbage-padding{m.offset_data + m.size}',
                _over(original, m.offset_data + m.size, rng.bytes(pad)))
        if m.size:
            pos = m.offset_data + int(rng.randint(m.size))
            add(f'data-flip{pos}', _over(original, pos, bytes([original[pos] ^ 0xff])))
            add(f'data-garbage{m.offset_data}', _over(original, m.offset_data,
                                                        rng.bytes(m.size)))
    for at in (end, end + 512, end + 1024, len(original) - 1):
        add(f'end-byte{at}', _over(original, at, b'\x01'))
    add(f'end-garbage{end}', _over(original, end, rng.bytes(1024)))
    add('appended-tar', original + original)
    add('appended-garbage', original + rng.bytes(700))
    add('empty', b'')
    add('only-end-blocks', bytes(10240))
    add('one-end-block', bytes(512))
    add('random-bytes', rng.bytes(10240))
    add('gzipped', __import__('gzip').compress(original))
    add('duplicate-field', _duplicate_field())
    add('meta-only', _meta_only())
    return cases


def _duplicate_field() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode='w') as archive:
        for name in ('s1.bin', 's1.bin'):
            info = tarfile.TarInfo(name)
            info.size = 3
            archive.addfile(info, io.BytesIO(b'abc'))
    return out.getvalue()


def _meta_only() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode='w') as archive:
        info = tarfile.TarInfo('__meta__.json')
        info.size = 2
        archive.addfile(info, io.BytesIO(b'{}'))
    return out.getvalue()


@pytest.fixture(scope='module')
def tar_campaign():
    original = _write_original()
    intact = gnu_tar_samples(original)
    assert intact is not None and len(intact) == 12
    cases = _tar_cases(original)
    return original, intact, cases


# (when, cases in CI, local / S3): the trusted read-time cases are the same-size damages.
PLAN = [('index', 120, 12), ('trusted', 60, 8), ('changed', 12, 3)]


def test_the_known_hole_garbage_over_member_51_is_refused(tmp_path) -> None:
    """Issue 32: 512 garbage bytes over member 51's header of 100 indexed 50 samples, silently."""
    import webdataset as wds
    out = io.BytesIO()
    with wds.TarWriter(out) as sink:
        for i in range(100):
            sink.write({'__key__': f's{i:04d}', 'bin': bytes([i]) * 10})
    data = out.getvalue()
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        at = archive.getmembers()[50].offset
    damaged = _over(data, at, np.random.RandomState(0).bytes(512))
    case = Case('hole', damaged, lambda: gnu_tar_samples(damaged))
    for when in ('index', 'trusted'):
        place = local_place(str(tmp_path / when))
        assert run_case('webdataset', '.tar', when, case, place, str(tmp_path / f'c-{when}'),
                        data, gnu_tar_samples(data)) == 'typed'
    from streaming.dataset.source_stream import SourceStream
    from streaming.errors import SourceFileError
    with pytest.raises(SourceFileError, match=rf'b-hole\.tar: member 51, header at byte {at}'):
        SourceStream(remote=str(tmp_path / 'index'), local=str(tmp_path / 'again')) \
            .get_index(fetch=True)


@pytest.mark.parametrize('when,local_count,_', PLAN)
def test_damaged_tar_local(tar_campaign, tmp_path, when, local_count, _) -> None:
    original, intact, cases = tar_campaign
    run_campaign('webdataset', '.tar', when, cases, local_count,
                 lambda n: local_place(str(tmp_path / f'd{n}')), str(tmp_path), original,
                 intact)


@pytest.mark.parametrize('when,_,s3_count', PLAN)
def test_damaged_tar_s3(tar_campaign, s3, tmp_path, when, _, s3_count) -> None:
    client, bucket = s3
    original, intact, cases = tar_campaign
    run_campaign('webdataset', '.tar', when, cases, s3_count,
                 lambda n: s3_place(client, bucket, f'd{n}'), str(tmp_path), original, intact)
