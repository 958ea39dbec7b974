"""The damage campaign for JSON Lines: every damaged file is read right or refused by line.

A file written with ``json.dumps`` (non-ASCII text, nested values, a blank line, units of a few
hundred bytes) is damaged in every way generated below: cut at every line boundary, beside it
and inside multi-byte characters, garbage and flipped bytes at seeded offsets, newlines added
and removed, lines replaced by deep nesting (100,000 levels), invalid UTF-8, non-objects,
duplicated keys, a 5 MB line, NUL bytes, misplaced byte order marks, and whole files that are
empty, blank or not JSON; and, read with ``columns=``, lines lacking a key. Each is read locally
and from S3 (moto), damaged before indexing, after it, and under an index trusting the damaged
file. The truth comes from splitting the bytes at newlines and parsing each line with ``json``
(strict UTF-8, no key twice); a refusal must name the file and the first bad line.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tests.sources import damage
from tests.sources.damage import Case, local_place, run_campaign, s3_place

SEED = 32
OPTIONS = {'unit_bytes': 300}


def _original() -> bytes:
    lines = []
    for i in range(40):
        sample = {'id': i, 'text': 'é✓' * (i % 5) + 'x' * (i % 23), 'nested': {'v': [i, [i]]}}
        lines.append(json.dumps(sample, ensure_ascii=i % 2 == 0))
        if i == 17:
            lines.append('')
    return ('\n'.join(lines) + '\n').encode()


def _strict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({k for k, _ in pairs}) != len(pairs):
        raise ValueError('a key twice')
    return dict(pairs)


def jsonl_truth(data: bytes, columns: list[str] | None = None
                ) -> tuple[list[dict[str, Any]] | None, int | None]:
    """(the objects ``data`` holds, None) or (None, the number of its first bad line)."""
    lines = data.split(b'\n')
    if lines[-1] == b'':
        lines.pop()
    samples = []
    for number, raw in enumerate(lines, 1):
        if raw in (b'', b'\r'):
            continue
        try:
            text = raw.decode('utf-8')
            value = json.loads(text[1:] if number == 1 and text[:1] == '\ufeff' else text,
                               object_pairs_hook=_strict)
        except (ValueError, RecursionError):
            return None, number
        if not isinstance(value, dict) or (columns and any(c not in value for c in columns)):
            return None, number
        samples.append({c: value[c] for c in columns} if columns else value)
    return samples, None


def _case(name: str, data: bytes, columns: list[str] | None = None) -> Case:
    held, line = jsonl_truth(data, columns)
    return Case(name, data, lambda: held, line, columns)


REPLACEMENTS = {
    'deep-lists': b'{"a": ' + b'[' * 100_000 + b']' * 100_000 + b'}',
    'deep-objects': b'{"a":' * 100_000 + b'1' + b'}' * 100_000,
    'nested-200': b'{"a": ' + b'[' * 200 + b']' * 200 + b'}',
    'bad-utf8': b'{"t": "\xff"}',
    'overlong-utf8': b'{"t": "\xc0\xaf"}',
    'surrogate-utf8': b'{"t": "\xed\xa0\x80"}',
    'cut-utf8': b'{"t": "\xe2\x82"}',
    'list': b'[1, 2]', 'string': b'"s"', 'number': b'3', 'null': b'null', 'true': b'true',
    'dup-key': b'{"id": 1, "id": 2}', 'dup-nested': b'{"id": 1, "n": {"k": 1, "k": 2}}',
    'huge-line': b'{"id": 7, "t": "' + b'x' * 5_000_000 + b'"}',
    'nul': b'{"id": 1}\x00', 'bom': '\ufeff{"id": 1}'.encode(),
    'utf16': '{"id": 1}'.encode('utf-16'), 'spaces': b'   ', 'lone-cr': b'\r',
    'trailing-comma': b'{"id": 1,}', 'long-number': b'{"id": ' + b'1' * 5000 + b'}',
    'infinity': b'{"id": Infinity}', 'unclosed': b'{"id": 1', 'escaped': b'{"id": "\\ud800"}',
}


def _jsonl_cases(original: bytes) -> list[Case]:
    rng = np.random.RandomState(SEED)
    cases: list[Case] = []
    ends = [i for i, byte in enumerate(original) if byte == 10]
    multibyte = [i for i, byte in enumerate(original) if byte >= 0xc0]
    for at in sorted({0, *ends, *(e + 1 for e in ends)}):
        for delta in (-1, 0, 1):
            if 0 <= at + delta < len(original):
                cases.append(_case(f'cut{at + delta}', original[:at + delta]))
    for at in multibyte[::3]:
        cases.append(_case(f'cut-char{at + 1}', original[:at + 1]))
    for n in range(150):
        at, count = int(rng.randint(len(original))), int(rng.randint(1, 9))
        cases.append(_case(f'garbage{n}-{at}', original[:at] + rng.bytes(count) +
                           original[at + count:]))
        at = int(rng.randint(len(original)))
        byte = bytes([original[at] ^ (1 << int(rng.randint(8)))])
        cases.append(_case(f'flip{n}-{at}', original[:at] + byte + original[at + 1:]))
    for at in ends[::2]:
        cases.append(_case(f'joined{at}', original[:at] + b' ' + original[at + 1:]))
        cases.append(_case(f'split{at - 5}', original[:at - 5] + b'\n' + original[at - 4:]))
    lines = original.split(b'\n')
    for number in (0, 9, 18, 39, 40):
        for name, text in REPLACEMENTS.items():
            edited = lines[:number] + [text] + lines[number + 1:]
            cases.append(_case(f'{name}-line{number + 1}', b'\n'.join(edited)))
        edited = lines[:number] + [b'{"other": 1}'] + lines[number + 1:]
        cases.append(_case(f'missing-key-line{number + 1}', b'\n'.join(edited), ['id']))
    cases.append(_case('no-final-newline', original.rstrip(b'\n')))
    cases.append(_case('bom-first-line', b'\xef\xbb\xbf' + original))
    cases.append(_case('crlf', original.replace(b'\n', b'\r\n')))
    for name, data in {'empty': b'', 'blank': b'\n\n\n', 'crlf-blank': b'\r\n\r\n',
                       'one-line': b'{"id": 1}', 'random': rng.bytes(4096),
                       'zeros': bytes(4096), 'huge-only': REPLACEMENTS['huge-line']}.items():
        cases.append(_case(name, data))
    return cases


@pytest.fixture(scope='module')
def jsonl_campaign():
    original = _original()
    intact, line = jsonl_truth(original)
    assert line is None and intact is not None and len(intact) == 40
    return original, intact, _jsonl_cases(original)


# (when, cases in CI locally, from S3): the trusted read-time cases are the same-size damages.
PLAN = [('index', 120, 10), ('trusted', 50, 6), ('changed', 12, 3)]


def test_the_known_hole_deep_nesting_names_file_and_line(tmp_path) -> None:
    """Issue 32: a line nested 100,000 deep escaped as a bare RecursionError."""
    from streaming.errors import SourceFileError
    lines = _original().split(b'\n')
    data = b'\n'.join(lines[:5] + [REPLACEMENTS['deep-lists']] + lines[6:])
    place = local_place(str(tmp_path / 'data'))
    place.put('deep.jsonl', data)
    with pytest.raises(SourceFileError, match=r'deep\.jsonl, line 6: nested too deeply'):
        damage.read_source(place.url, str(tmp_path / 'cache'))


@pytest.mark.parametrize('when,local_count,_', PLAN)
def test_damaged_jsonl_local(jsonl_campaign, tmp_path, when, local_count, _) -> None:
    original, intact, cases = jsonl_campaign
    run_campaign('jsonl', '.jsonl', when, cases, local_count,
                 lambda n: local_place(str(tmp_path / f'd{n}')), str(tmp_path), original,
                 intact, OPTIONS)


@pytest.mark.parametrize('when,_,s3_count', PLAN)
def test_damaged_jsonl_s3(jsonl_campaign, s3, tmp_path, when, _, s3_count) -> None:
    client, bucket = s3
    original, intact, cases = jsonl_campaign
    run_campaign('jsonl', '.jsonl', when, cases, s3_count,
                 lambda n: s3_place(client, bucket, f'd{n}'), str(tmp_path), original, intact,
                 OPTIONS)
