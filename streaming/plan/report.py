"""A plan as text (the terminal summary), JSON, or one self-contained HTML page.

The page has no external resource: its plots are inline SVG drawn here, and a few lines of
inline JavaScript show a point's values under the pointer. Every number it prints carries a
``data-key`` naming its place in the JSON (``nodes.0.first_batch_s``), so a test can check the
page against ``--json``.
"""

from __future__ import annotations

import html
import json
from typing import Any

__all__ = ['to_html', 'to_json', 'to_text']


def human_bytes(value: float | None) -> str:
    if value is None:
        return 'none'
    for unit in ('B', 'KB', 'MB', 'GB', 'TB', 'PB'):
        if abs(value) < 1000 or unit == 'PB':
            return f'{value:.0f} {unit}' if unit == 'B' else f'{value:.2f} {unit}'
        value /= 1000
    return f'{value:.2f} PB'


def _plain(value: Any) -> Any:
    """Numpy scalars as Python numbers, for ``json``."""
    if hasattr(value, 'item'):
        return value.item()
    raise TypeError(f'not JSON: {value!r}')


def to_json(plan: dict[str, Any]) -> str:
    return json.dumps(plan, indent=1, default=_plain)


def to_text(plan: dict[str, Any]) -> str:
    """The terminal summary: the run, each node's figures, totals, quality, warnings."""
    d, r, t = plan['dataset'], plan['run'], plan['totals']
    lines = [f'dataset: {d["shards"]} shards, {d["samples"]} samples, '
             f'{human_bytes(d["bytes"])} ({d["source"]})',
             f'run: {r["nodes"]} node(s) x {r["ranks_per_node"]} rank(s) x {r["workers"]} '
             f'worker(s), batch {r["batch_size"]}, {r["epochs"]} epoch(s), {r["shuffle_algo"]} '
             f'block {r["shuffle_block_size"]}, cache_limit {human_bytes(r["cache_limit"])}, '
             f'predownload {r["predownload"] or "auto"}']
    for n in plan['nodes']:
        lines.append(
            f'node {n["node"]}: first batch {n["first_batch_s"]:.2f} s, epoch(s) '
            f'{", ".join(f"{e:.2f}" for e in n["epoch_s"])} s, {n["samples_per_s"]:.0f} '
            f'samples/s, {n["stalled_steps"]} of {n["steps"]} steps stalled '
            f'({n["stall_s"]:.2f} s, longest {n["longest_stall_s"]:.2f} s), fetched '
            f'{human_bytes(n["fetched_bytes"])} ({n["fetched_ratio"]:.2f}x its shards, '
            f'{n["refetches"]} again), {n["gets"]} GETs (peak {n["peak_get_rate"]:.0f}/s), '
            f'cache peak {human_bytes(n["peak_cache_bytes"])}')
    lines.append(f'total: {human_bytes(t["egress_bytes"])} egress, {t["gets"]} GETs '
                 f'({t["get_rate"]:.0f}/s), cost {t["cost"]:.4f} (egress {t["egress_cost"]:.4f} '
                 f'+ GETs {t["get_cost"]:.4f}), run {t["run_s"]:.1f} s')
    lines.append(f'working set: {human_bytes(plan["cache"]["working_set_bytes"])}' +
                 (f'; smallest cache_limit with no refetch: '
                  f'{human_bytes(plan["cache"]["min_no_refetch"])}'
                  if plan['cache'].get('min_no_refetch') else ''))
    q = plan.get('quality')
    if q:
        lines.append(f'shuffle: entropy {q["entropy_bits"]:.2f} bits ({q["entropy_score"]:.2f} '
                     f'of a full shuffle), {q["distinct_shards_per_batch"]["mean"]:.1f} shards '
                     f'per global batch of {q["distinct_shards_per_batch"]["global_batch"]}, '
                     f'{q["samples_between_reads"]["median"]} samples between reads of a shard')
    for note in plan['notes']:
        lines.append(f'note: {note}')
    for warning in plan['warnings']:
        lines.append(f'warning: {warning}')
    for line in plan.get('suggestion', {}).get('why', []):
        lines.append(f'suggest: {line}')
    return '\n'.join(lines)


# ---- HTML --------------------------------------------------------------------------------------
W, H, PAD = 560, 220, 72
COLORS = ('#1f77b4', '#d62728', '#2ca02c', '#9467bd')


def _ticks(low: float, high: float) -> list[float]:
    if high <= low:
        return [low]
    return [low + (high - low) * i / 4 for i in range(5)]


def _fmt(value: float, unit: str) -> str:
    if unit == 'bytes':
        return human_bytes(value)
    if value >= 1e4:
        return f'{value / 1e3:.3g}k'
    return f'{value:.0f}' if value >= 100 else f'{value:.3g}'


def _svg(name: str, title: str, series: list[tuple[str, list[list[float]]]], xlabel: str,
         ylabel: str, unit: str = '', hline: float | None = None) -> str:
    """One line plot as inline SVG; ``series`` is (label, [[x, y], ...]) per line."""
    points = [p for _, s in series for p in s]
    if not points:
        return f'<p class="empty">{html.escape(title)}: no data</p>'
    xmax = max(p[0] for p in points) or 1.0
    ymax = max([p[1] for p in points] + ([hline] if hline else [])) or 1.0
    ymax *= 1.05

    def x(v: float) -> float:
        return PAD + (W - PAD - 24) * v / xmax

    def y(v: float) -> float:
        return H - 30 - (H - 50) * v / ymax
    parts = [f'<svg class="plot" data-plot="{name}" viewBox="0 0 {W} {H}" width="{W}" '
             f'height="{H}" role="img" aria-label="{html.escape(title)}">',
             f'<text x="{W / 2}" y="14" text-anchor="middle" class="title">'
             f'{html.escape(title)}</text>',
             f'<line x1="{PAD}" y1="{H - 30}" x2="{W - 10}" y2="{H - 30}" class="axis"/>',
             f'<line x1="{PAD}" y1="20" x2="{PAD}" y2="{H - 30}" class="axis"/>']
    for v in _ticks(0, ymax):
        parts.append(f'<text x="{PAD - 4}" y="{y(v) + 4:.1f}" text-anchor="end" '
                     f'class="tick">{_fmt(v, unit)}</text>')
    for v in _ticks(0, xmax):
        parts.append(f'<text x="{x(v):.1f}" y="{H - 16}" text-anchor="middle" '
                     f'class="tick">{_fmt(v, "")}</text>')
    parts.append(f'<text x="{W / 2}" y="{H - 2}" text-anchor="middle" class="label">'
                 f'{html.escape(xlabel)}</text>')
    parts.append(f'<text x="12" y="{H / 2}" transform="rotate(-90 12 {H / 2})" '
                 f'text-anchor="middle" class="label">{html.escape(ylabel)}</text>')
    if hline:
        parts.append(f'<line x1="{PAD}" y1="{y(hline):.1f}" x2="{W - 10}" y2="{y(hline):.1f}" '
                     f'class="limit"/>')
    for i, (label, s) in enumerate(series):
        coords = ' '.join(f'{x(a):.1f},{y(b):.1f}' for a, b in s)
        data = html.escape(json.dumps(s, default=_plain))
        parts.append(f'<polyline fill="none" stroke="{COLORS[i % len(COLORS)]}" '
                     f'stroke-width="1.5" points="{coords}" data-label="{html.escape(label)}" '
                     f'data-points="{data}" data-xmax="{xmax}" data-ymax="{ymax}"/>')
    parts.append('</svg>')
    return ''.join(parts)


def _cell(key: str, value: Any, text: str | None = None) -> str:
    shown = text if text is not None else value
    return f'<td data-key="{key}" data-value="{html.escape(str(value))}">' \
           f'{html.escape(str(shown))}</td>'


_SCRIPT = """
(function () {
  var tip = document.getElementById('tip');
  document.querySelectorAll('svg.plot').forEach(function (svg) {
    svg.addEventListener('mousemove', function (event) {
      var box = svg.getBoundingClientRect();
      var lines = svg.querySelectorAll('polyline');
      var text = [];
      lines.forEach(function (line) {
        var pts = JSON.parse(line.getAttribute('data-points'));
        var xmax = parseFloat(line.getAttribute('data-xmax'));
        var fx = (event.clientX - box.left) / box.width * @W@;
        var want = (fx - @PAD@) / (@W@ - @PAD@ - 24) * xmax;
        var best = pts[0];
        pts.forEach(function (p) {
          if (Math.abs(p[0] - want) < Math.abs(best[0] - want)) best = p;
        });
        text.push(line.getAttribute('data-label') + ': ' + best[0] + ', ' + best[1]);
      });
      tip.textContent = text.join(' | ');
    });
  });
  var drawn = document.querySelectorAll('svg.plot polyline').length;
  document.body.setAttribute('data-ready', String(drawn));
})();
""".replace('@W@', str(W)).replace('@PAD@', str(PAD))

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1200px; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
.axis { stroke: #444; } .limit { stroke: #d62728; stroke-dasharray: 4 3; }
.tick { font-size: 10px; fill: #555; } .label { font-size: 11px; fill: #333; }
.title { font-size: 13px; font-weight: 600; }
.warning { color: #a30; font-weight: 600; } #tip { min-height: 1.4em; color: #555; }
"""

ROWS = [('first batch (s)', 'first_batch_s', None), ('epoch time (s)', 'epoch_s', None),
        ('samples/s', 'samples_per_s', None), ('steps', 'steps', None),
        ('stalled steps', 'stalled_steps', None), ('stall time (s)', 'stall_s', None),
        ('longest stall (s)', 'longest_stall_s', None),
        ('bytes fetched', 'fetched_bytes', 'bytes'), ('x its shards', 'fetched_ratio', None),
        ('shards fetched again', 'refetches', None), ('GETs', 'gets', None),
        ('peak GETs/s', 'peak_get_rate', None), ('throttled GETs', 'throttled_gets', None),
        ('downloads in flight (max)', 'max_in_flight', None),
        ('cache peak', 'peak_cache_bytes', 'bytes')]


def to_html(plan: dict[str, Any]) -> str:
    """The whole report as one HTML page (no external resources)."""
    nodes = plan['nodes']
    head = '<tr><th></th>' + ''.join(f'<th>node {n["node"]}</th>' for n in nodes) + '</tr>'
    rows = []
    for label, key, unit in ROWS:
        cells = []
        for i, n in enumerate(nodes):
            value = n[key]
            text: str | None
            if key == 'epoch_s':
                text = ', '.join(f'{e:.2f}' for e in value)
                value = json.dumps(value)
            else:
                text = human_bytes(value) if unit == 'bytes' else None
            cells.append(_cell(f'nodes.{i}.{key}', value, text))
        rows.append(f'<tr><td>{label}</td>{"".join(cells)}</tr>')
    t = plan['totals']
    totals = ''.join(f'<tr><td>{label}</td>{_cell(f"totals.{key}", t[key], text)}</tr>' for
                     label, key, text in (
                         ('egress', 'egress_bytes', human_bytes(t['egress_bytes'])),
                         ('GETs', 'gets', None), ('GETs/s (mean)', 'get_rate', None),
                         ('egress cost', 'egress_cost', None), ('GET cost', 'get_cost', None),
                         ('cost', 'cost', None), ('run time (s)', 'run_s', None)))
    cache = plan['cache']
    totals += f'<tr><td>working set</td>{_cell("cache.working_set_bytes", cache["working_set_bytes"], human_bytes(cache["working_set_bytes"]))}</tr>'  # noqa: E501
    if cache.get('min_no_refetch'):
        totals += f'<tr><td>smallest cache_limit, no refetch</td>{_cell("cache.min_no_refetch", cache["min_no_refetch"], human_bytes(cache["min_no_refetch"]))}</tr>'  # noqa: E501
    q = plan.get('quality') or {}
    quality = ''
    if q:
        quality = (f'<table><tr><th>shuffle quality</th><th></th></tr>'
                   f'<tr><td>entropy (bits)</td>{_cell("quality.entropy_bits", q["entropy_bits"])}</tr>'  # noqa: E501
                   f'<tr><td>of a full shuffle</td>{_cell("quality.entropy_score", q["entropy_score"])}</tr>'  # noqa: E501
                   f'<tr><td>shards per global batch</td>{_cell("quality.distinct_shards_per_batch.mean", q["distinct_shards_per_batch"]["mean"])}</tr>'  # noqa: E501
                   f'<tr><td>samples between reads of a shard</td>{_cell("quality.samples_between_reads.median", q["samples_between_reads"]["median"])}</tr>'  # noqa: E501
                   '</table>')
    plots = [
        _svg('throughput', 'Throughput', [(f'node {n["node"]}', n['series']['throughput'])
                                          for n in nodes], 'seconds', 'samples/s'),
        _svg('bytes', 'Bytes fetched', [(f'node {n["node"]}', n['series']['bytes'])
                                        for n in nodes], 'seconds', 'bytes', 'bytes'),
        _svg('cache', 'Cache occupancy', [(f'node {n["node"]}', n['series']['cache'])
                                          for n in nodes], 'seconds', 'bytes', 'bytes',
             hline=plan['run']['cache_limit']),
    ]
    settings = ''.join(f'<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>'
                       for k, v in {**plan['run'], **plan['profile']}.items())
    warnings = ''.join(f'<li class="warning">{html.escape(w)}</li>' for w in plan['warnings'])
    notes = ''.join(f'<li>{html.escape(n)}</li>' for n in plan['notes'])
    why = ''.join(f'<li>{html.escape(w)}</li>' for w in plan.get('suggestion', {}).get('why', []))
    d = plan['dataset']
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>streaming plan</title>
<style>{_STYLE}</style></head><body>
<h1>streaming plan</h1>
<p>{html.escape(d['source'])}: {d['shards']} shards, {d['samples']} samples,
{human_bytes(d['bytes'])}.</p>
<ul id="warnings">{warnings}</ul>
<div class="plots">{''.join(plots)}</div><div id="tip"></div>
<h2>Per node</h2><table id="nodes">{head}{''.join(rows)}</table>
<h2>Run</h2><table id="totals">{totals}</table>{quality}
{f'<h2>Suggestion</h2><ul id="suggestion">{why}</ul>' if why else ''}
<h2>Notes</h2><ul id="notes">{notes or '<li>every sample and node simulated</li>'}</ul>
<h2>Settings</h2><table id="settings">{settings}</table>
<script>{_SCRIPT}</script>
</body></html>
"""
