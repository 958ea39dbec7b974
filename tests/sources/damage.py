"""The damage campaign's harness: run one damaged file through indexing and reading, judge it.

A *case* is a directory (or S3 prefix) holding an intact file and a damaged one. It is read the
way a ``SourceStream`` reads (list, index into the sidecar, ``index.json``, fetch each unit,
read every sample) and the outcome is one of:

- ``correct``: the samples the files hold, in order (the truth comes from an oracle that does
  not use the library: GNU ``tar`` for tars, a line split and ``json`` for JSON Lines);
- ``typed``: a ``StreamingError`` whose message names the damaged file (and, where the oracle
  knows one, the right line);
- ``unnamed``: a ``StreamingError`` that does not name the file (or names the wrong line);
- ``bare``: any other exception; ``hang``: no end within ``SECONDS_PER_CASE``;
- ``short``: fewer samples than the truth, each of them right; ``wrong``: any other samples.

Only ``correct`` and ``typed`` pass. Counts per (format, where, when) are kept in ``OUTCOMES``,
shown in pytest's closing summary (``tests/sources/conftest.py``) and, with
``STREAMING_DAMAGE_REPORT=path``, written as JSON.
Cases are generated from a seed; CI runs a deterministic subset (every ``STRIDE``-th case),
``STREAMING_DAMAGE_CASES=all`` runs every one (see docs/sources/README.md#damage-campaign).
"""

from __future__ import annotations

import json
import os
import re
import traceback
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from streaming.dataset.cache_dirs import setup_cache_dir
from streaming.dataset.source_stream import SourceStream
from streaming.errors import StreamingError
from tests.unit_helpers import time_limit

SECONDS_PER_CASE = 20
ALL = os.environ.get('STREAMING_DAMAGE_CASES') == 'all'
OUTCOMES: Counter = Counter()  # (format, where, when, outcome) -> cases
FAILURES: list[str] = []
GOOD = ('correct', 'typed')


@dataclass
class Case:
    """One damaged file: its name, its bytes, and the samples it truly holds (None: unreadable).

    The truth is computed only when the library returned samples (an oracle may be slow).

    ``line``: for JSON Lines, the number of the first line a reader must refuse, if any.
    ``columns``: fields/keys to read (None: all).
    """

    name: str
    data: bytes
    truth: Callable[[], list[dict[str, Any]] | None]  # Called only if samples were read.
    line: int | None = None
    columns: list[str] | None = None


def subset(cases: list[Case], ci_count: int) -> list[Case]:
    """All cases with ``STREAMING_DAMAGE_CASES=all``, else about ``ci_count`` spread evenly."""
    if ALL or len(cases) <= ci_count:
        return cases
    stride = len(cases) / ci_count
    return [cases[int(i * stride)] for i in range(ci_count)]


def read_source(remote: str, local: str, columns: list[str] | None = None,
                options: dict[str, Any] | None = None, refresh: bool = True,
                fetch: bool = True) -> list[dict[str, Any]]:
    """Every sample of the files under ``remote``, as a ``SourceStream`` reads them, in order.

    ``fetch`` False: only index them (the sidecar and ``index.json``), read nothing.
    """
    stream = SourceStream(remote=remote, local=local, columns=columns, options=options,
                          refresh=refresh, download_retry=0, download_timeout=15)
    index = stream.get_index(fetch=True)
    samples: list[dict[str, Any]] = []
    if not fetch:
        return samples
    for shard in stream.get_shards(index, False):
        stream.prepare_shard(shard)
        try:
            samples.extend(dict(shard.get_item(i)) for i in range(shard.samples))
        finally:
            shard.close()
    return samples


def _plain(sample: dict[str, Any]) -> dict[str, Any]:
    return {k: bytes(v) if isinstance(v, (memoryview, bytearray)) else v
            for k, v in sample.items()}


def judge(case: Case, read: Callable[[], list[dict[str, Any]]],
          intact: list[dict[str, Any]]) -> tuple[str, str]:
    """(outcome, detail) of reading ``case`` (after the ``intact`` file's samples)."""
    try:
        with time_limit(SECONDS_PER_CASE):
            got = [_plain(s) for s in read()]
    except TimeoutError:
        return 'hang', f'no end within {SECONDS_PER_CASE} s'
    except StreamingError as error:
        text = str(error)
        if case.name not in text:
            return 'unnamed', f'{type(error).__name__}: {text}'
        named = re.search(r'\bline (\d+)', text)
        if case.line is not None and named is not None and int(named.group(1)) != case.line:
            return 'unnamed', f'expected line {case.line}: {type(error).__name__}: {text}'
        return 'typed', f'{type(error).__name__}: {text}'
    except Exception as error:  # noqa: BLE001 - the outcome judged.
        return 'bare', ''.join(traceback.format_exception(error)[-3:])
    held = case.truth()
    if held is not None and got == intact + held:
        return 'correct', f'{len(got)} samples'
    truth = intact + (held or [])
    if len(got) < len(truth) and all(sample in truth for sample in got):
        return 'short', f'{len(got)} of {len(truth)} samples'
    return 'wrong', f'{len(got)} samples, truth {len(truth)} ' \
                    f'({"the file is unreadable" if held is None else "differs"})'


def record(fmt: str, where: str, when: str, case: Case, outcome: str, detail: str) -> None:
    OUTCOMES[(fmt, where, when, outcome)] += 1
    if outcome not in GOOD:
        FAILURES.append(f'{fmt} {where} {when} {case.name}: {outcome}: {detail}')


def summary() -> dict[str, dict[str, int]]:
    """{"format where when": {outcome: cases, "cases": total}}."""
    table: dict[str, dict[str, int]] = {}
    for (fmt, where, when, outcome), count in sorted(OUTCOMES.items()):
        row = table.setdefault(f'{fmt} {where} {when}', {'cases': 0})
        row[outcome] = row.get(outcome, 0) + count
        row['cases'] += count
    return table


def report_lines() -> list[str]:
    """The counts as lines; also written to ``$STREAMING_DAMAGE_REPORT`` when it is set."""
    table = summary()
    if not table:
        return []
    path = os.environ.get('STREAMING_DAMAGE_REPORT')
    if path:
        with open(path, 'w') as out:
            json.dump(table, out, indent=1)
    return ['damage campaign outcomes (format, where, when):'] + [
        f'  {key}: ' + ', '.join(f'{k} {v}' for k, v in row.items())
        for key, row in table.items()]


@dataclass
class Place:
    """Where a case's files go: a local directory or an S3 prefix, and how to write there."""

    where: str  # 'local' or 's3'
    url: str
    put: Callable[[str, bytes], None]


def local_place(root: str) -> Place:
    os.makedirs(root, exist_ok=True)

    def put(name: str, data: bytes) -> None:
        with open(os.path.join(root, name), 'wb') as out:
            out.write(data)
    return Place('local', root, put)


def s3_place(client: Any, bucket: str, prefix: str) -> Place:
    def put(name: str, data: bytes) -> None:
        client.put_object(Bucket=bucket, Key=f'{prefix}/{name}', Body=data)
    return Place('s3', f's3://{bucket}/{prefix}', put)


def _trust_current_files(place: Place, local: str, fmt: str) -> None:
    """Make the stored sidecars record the files' current sizes and ETags (a trusted index)."""
    from streaming.sources.registry import get_source
    from streaming.sources.remote import list_objects
    from streaming.sources.sidecar import sidecar_name
    current = {url.rsplit('/', 1)[-1]: info for url, info in list_objects(place.url)}
    name = sidecar_name(get_source(fmt))
    paths = [os.path.join(setup_cache_dir(local), name)]
    if place.where == 'local':
        paths.append(os.path.join(place.url, name))
    for path in paths:
        if not os.path.exists(path):
            continue
        with open(path) as f:
            sidecar = json.load(f)
        for rel, record in sidecar['files'].items():
            record['size'], record['etag'] = current[rel].size, current[rel].etag
        with open(path, 'w') as f:
            json.dump(sidecar, f)


def run_case(fmt: str, ext: str, when: str, case: Case, place: Place, local: str,
             original: bytes, intact: list[dict[str, Any]],
             options: dict[str, Any] | None = None) -> str:
    """Read ``case`` at ``place`` and record its outcome; returns the outcome.

    ``when``: ``index`` (damaged before it is indexed), ``changed`` (damaged after it was
    indexed; the stream trusts its sidecar, ``refresh=False``), ``trusted`` (damaged after it
    was indexed, the sidecar then made to record the damaged file's size and ETag: what only the
    read-time checks can catch).
    """
    damaged = f'b-{case.name}{ext}'
    place.put(f'a-intact{ext}', original)
    place.put(damaged, original if when != 'index' else case.data)
    if when != 'index':
        read_source(place.url, local, case.columns, options, fetch=False)
        place.put(damaged, case.data)
        if when == 'trusted':
            _trust_current_files(place, local, fmt)
    kept = [{k: v for k, v in s.items() if k in case.columns or k == '__key__'}
            for s in intact] if case.columns else intact
    outcome, detail = judge(case, lambda: read_source(place.url, local, case.columns, options,
                                                      refresh=when != 'changed'), kept)
    record(fmt, place.where, when, case, outcome, detail)
    return outcome


def run_campaign(fmt: str, ext: str, when: str, cases: list[Case], count: int,
                 place_for: Callable[[int], Place], cache_root: str, original: bytes,
                 intact: list[dict[str, Any]], options: dict[str, Any] | None = None) -> None:
    """Run a subset of about ``count`` of ``cases`` (all same-size ones for ``trusted``).

    ``place_for(number)`` is where case ``number``'s files go. Fails listing the bad outcomes.
    """
    cases = [c for c in cases if c.data != original]  # An edit that changed nothing.
    if when == 'trusted':  # The index's byte ranges must still fit the damaged file.
        cases = [c for c in cases if len(c.data) == len(original)]
    where = ''
    for number, case in enumerate(subset(cases, count)):
        place = place_for(number)
        where = place.where
        run_case(fmt, ext, when, case, place, os.path.join(cache_root, f'c{number}'), original,
                 intact, options)
    prefix = f'{fmt} {where} {when} '
    bad = [line for line in FAILURES if line.startswith(prefix)]
    assert not bad, f'{len(bad)} bad outcomes:\n' + '\n'.join(bad[:40])
