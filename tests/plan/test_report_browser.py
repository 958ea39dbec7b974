"""The HTML report in a real headless browser (the distribution's Chromium, its own headless
mode): the page draws its plots, logs nothing to the console, and every number it shows equals
the JSON's.

Skipped only when no Chromium is installed and ``STREAMING_REQUIRE_BROWSER`` is unset (CI sets
it, and installs the ``chromium`` package).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from typing import Any

import pytest

from streaming.plan import DatasetShape, RunSettings, plan
from streaming.plan.report import to_html, to_json
from tests.cli.conftest import run_cli, write_dataset


def _browser() -> str:
    for name in ('chromium', 'chromium-browser'):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get('STREAMING_REQUIRE_BROWSER'):
        pytest.fail('STREAMING_REQUIRE_BROWSER is set but no chromium is installed '
                    '(apt-get install -y chromium)')
    pytest.skip('no chromium installed (apt-get install -y chromium)')


def _render(page: str, tmp_path: Any) -> tuple[str, list[str]]:
    """(The DOM after the page's scripts ran, the console lines it logged)."""
    profile = tmp_path / 'browser-profile'
    proc = subprocess.run(
        [_browser(), '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
         f'--user-data-dir={profile}', '--enable-logging=stderr', '--v=0',
         '--virtual-time-budget=3000', '--dump-dom', f'file://{page}'],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ':CONSOLE' in line]
    return proc.stdout, console


class _Cells(HTMLParser):
    """``data-key`` -> ``data-value`` of every cell, and each plot's polylines."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[str, str] = {}
        self.plots: dict[str, int] = {}
        self.points: list[str] = []
        self.ready: str | None = None
        self._plot: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == 'body':
            self.ready = a.get('data-ready')
        if a.get('data-key'):
            self.cells[a['data-key']] = a.get('data-value') or ''
        if tag == 'svg' and a.get('data-plot'):
            self._plot = a['data-plot']
            self.plots[self._plot] = 0
        if tag == 'polyline' and self._plot:
            self.plots[self._plot] += 1
            self.points.append(a.get('points') or '')

    def handle_endtag(self, tag: str) -> None:
        if tag == 'svg':
            self._plot = None


def _lookup(data: Any, key: str) -> Any:
    for part in key.split('.'):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def _check_page(path: str, result: dict[str, Any], tmp_path: Any) -> _Cells:
    dom, console = _render(path, tmp_path)
    assert console == [], console
    cells = _Cells()
    cells.feed(dom)
    assert set(cells.plots) == {'throughput', 'bytes', 'cache'}
    assert all(count == len(result['nodes']) for count in cells.plots.values())
    assert cells.ready == str(sum(cells.plots.values()))  # The inline script ran to its end.
    for points in cells.points:
        coords = [tuple(map(float, p.split(','))) for p in points.split()]
        assert len(coords) >= 2 and len({y for _, y in coords}) >= 2  # A line, not a dot.
    assert len(cells.cells) >= 20
    for key, shown in cells.cells.items():
        expected = _lookup(result, key)
        if isinstance(expected, list):
            assert json.loads(shown) == expected, key
        else:
            assert float(shown) == pytest.approx(float(expected)), key
    return cells


def test_the_report_renders_and_matches_the_json(tmp_path) -> None:
    """Through the CLI: --html and --json of the same plan, a real dataset, two nodes."""
    dataset = write_dataset(str(tmp_path / 'ds'), n=600)
    page = str(tmp_path / 'plan.html')
    args = ('plan', dataset, '--nodes', '2', '--batch-size', '8', '--cache-limit', '40kb',
            '--steps-per-s', '50', '--html', page)
    proc = run_cli(*args, '--json')
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    cells = _check_page(page, result, tmp_path)
    assert 'nodes.1.first_batch_s' in cells.cells and 'totals.cost' in cells.cells
    html = open(page).read()
    assert not re.search(r'(src|href)=["\']?(https?:)?//', html)  # Nothing from elsewhere.


def test_warnings_and_a_sampled_plan_show_on_the_page(tmp_path) -> None:
    shape = DatasetShape.synthetic(4000, 50, 20_000)
    result = plan(shape, RunSettings(batch_size=16, shuffle_algo='naive', cache_limit='10mb'),
                  find_min_cache=True)
    result = json.loads(to_json(result))
    assert result['warnings']
    page = tmp_path / 'warn.html'
    page.write_text(to_html(result))
    cells = _check_page(str(page), result, tmp_path)
    assert 'cache.min_no_refetch' in cells.cells
    assert 'cache_limit below the working set' in page.read_text()


def test_the_console_check_sees_an_error(tmp_path) -> None:
    """The check above is not blind: a page that throws is caught."""
    page = tmp_path / 'broken.html'
    page.write_text('<html><body><script>missingFunction();</script></body></html>')
    _, console = _render(str(page), tmp_path)
    assert any('missingFunction' in line for line in console)
