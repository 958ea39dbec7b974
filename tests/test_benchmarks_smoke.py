"""Smoke tests of the benchmark suite's own logic (benchmarks/): no reference env, a few seconds."""

import json
import os
import sys

import pytest

from benchmarks import report
from benchmarks.aggregate import impl_summary, speedup, summarise
from benchmarks.config import QUICK, Case, Context, Metric, Target, build_cases
from benchmarks.runner import parse_result, run_case, run_worker
from streaming import MDSWriter

SPEED = Metric('samples_per_s', 'samples/s', 'samples/s', True)
LATENCY = Metric('median_us', 'median latency', 'µs', False)


def ok(**metrics):
    return {'status': 'ok', 'metrics': metrics}


def make_case(case_id, metrics, targets=(), impls=('ours', 'reference', 'litdata'), group='read'):
    return Case(id=case_id, group=group, title=case_id, script='x.py', impls=impls, datasets=(),
                params=lambda impl, ctx: {}, metrics=metrics, targets=targets)


def test_impl_summary_medians_and_ranges():
    summary = impl_summary([ok(samples_per_s=10.0, flag=True), ok(samples_per_s=30.0, flag=False),
                            ok(samples_per_s=20.0, flag=True)])
    assert summary['status'] == 'ok'
    assert summary['stats']['samples_per_s'] == {'median': 20.0, 'min': 10.0, 'max': 30.0, 'n': 3}
    assert 'flag' not in summary['stats']  # Booleans are not numbers to aggregate.


def test_impl_summary_keeps_the_first_failure():
    summary = impl_summary([{'status': 'unsupported', 'reason': 'no StreamingDataset yet'}])
    assert summary == {'status': 'unsupported', 'reason': 'no StreamingDataset yet', 'stats': {}}
    assert impl_summary([])['status'] == 'not run'


def test_ratios_and_targets_in_both_directions():
    fast = make_case('read/x', (SPEED,),
                     (Target('samples_per_s', 'reference', '>=', 20, '>= 20x'),
                      Target('samples_per_s', 'litdata', '>=', 1, '>= LitData')))
    quick = make_case('ra/x', (LATENCY,),
                      (Target('median_us', 'reference', '<=', 0.5, '<= 0.5x'),))
    runs = {
        'read/x': {'ours': [ok(samples_per_s=300.0), ok(samples_per_s=100.0)],
                   'reference': [ok(samples_per_s=10.0)], 'litdata': [ok(samples_per_s=400.0)]},
        'ra/x': {'ours': [ok(median_us=4.0)], 'reference': [ok(median_us=10.0)],
                 'litdata': [ok(median_us=1.0)]},
    }
    read, ra = summarise([fast, quick], runs)
    assert read['ratios']['samples_per_s']['ours/reference'] == pytest.approx(20.0)
    assert read['ratios']['samples_per_s']['litdata/reference'] == pytest.approx(40.0)
    assert [t['met'] for t in read['targets']] == [True, False]  # 20x met; 200 < 400 LitData.
    assert ra['targets'][0]['ratio'] == pytest.approx(0.4) and ra['targets'][0]['met'] is True
    assert speedup(0.4, higher_is_better=False) == pytest.approx(2.5)


def test_target_against_another_case_and_unsupported_ours():
    raw = make_case('raw/images', (Metric('read_mb_per_s', 'read', 'MB/s', True),),
                    impls=('machine',), group='raw')
    half_raw = Target('samples_per_s', ('raw/images', 'read_mb_per_s'), '>=', 0.5, 'half')
    images = make_case('read/images', (SPEED,), (half_raw,))
    pending = make_case('remote/x', (SPEED,),
                        (Target('samples_per_s', 'reference', '>=', 3, '3x'),))
    runs = {'raw/images': {'machine': [ok(read_mb_per_s=1000.0)]},
            'read/images': {'ours': [ok(samples_per_s=400.0)]},
            'remote/x': {'ours': [{'status': 'unsupported', 'reason': 'no S3 yet'}],
                         'reference': [ok(samples_per_s=5.0)]}}
    _, images_record, pending_record = summarise([raw, images, pending], runs)
    assert images_record['targets'][0]['ratio'] == pytest.approx(0.4)
    assert images_record['targets'][0]['met'] is False
    assert pending_record['targets'][0]['met'] is None
    assert 'unsupported' in pending_record['targets'][0]['why']


def test_markdown_lists_unsupported_reasons_and_chart(tmp_path):
    case = make_case('remote/x', (SPEED,),
                     (Target('samples_per_s', 'reference', '>=', 3, '>= 3x'),), group='remote')
    runs = {'remote/x': {'ours': [{'status': 'unsupported', 'reason': 'no S3 yet'}],
                         'reference': [ok(samples_per_s=1234.5), ok(samples_per_s=1000.0)],
                         'litdata': [ok(samples_per_s=2000.0)]}}
    machine = {'date': 'today', 'cpu': 'cpu', 'nproc': 2, 'memory_gib': 24, 'os': 'linux',
               'python': '3.11', 'load_average': [1, 1, 1], 'git_commit': 'abc'}
    doc = {'meta': {'mode': 'quick', 'repeats': 2, 'machine': machine, 'versions': {},
                    'datasets': 'tiny', 'load_average_after': [1, 1, 1], 'elapsed_min': 1.0},
           'cases': summarise([case], runs)}
    paths = [str(tmp_path / name) for name in ('r.json', 'r.md', 'r.png')]
    report.write_all(doc, *paths)
    text = open(paths[1]).read()
    assert '| unsupported [1] | 1,117 (1,000–1,234) | 2,000 | – |' in text
    assert '1. no S3 yet' in text
    assert json.load(open(paths[0]))['cases'][0]['id'] == 'remote/x'
    assert os.path.getsize(paths[2]) > 1000


def test_every_case_builds_params():
    ctx = Context(data_dir='/d', scale=QUICK, scratch='/s', s3_endpoint='http://x',
                  payload_per_sample={'tokens': 2048, 'images': 1e5, 'tiny': 49},
                  payload_total={'tokens': 4 << 20})
    cases = build_cases(QUICK)
    assert len({c.id for c in cases}) == len(cases)
    for case in cases:
        for impl in case.impls:
            assert isinstance(case.params(impl, ctx), dict)
    remote = next(c for c in cases if c.id == 'remote/tokens/cache25')
    assert remote.params('ours', ctx)['cache_limit'] == 1 << 20


def test_parse_result_takes_the_last_line():
    out = ('noise\nBENCH_RESULT {"status": "ok", "metrics": {"a": 1}}\n'
           'BENCH_RESULT {"status": "error"}\n')
    assert parse_result(out) == {'status': 'error'}
    assert parse_result('nothing here') is None


def test_workers_report_results_and_unsupported(tmp_path):
    data = str(tmp_path / 'ds')
    with MDSWriter(out=data, columns={'x': 'bytes'}, size_limit=1 << 12) as writer:
        for i in range(200):
            writer.write({'x': bytes([i % 256]) * 50})
    result = run_worker(sys.executable, 'raw_limit.py', 'machine', {'path': data},
                        str(tmp_path), timeout=60)
    assert result['status'] == 'ok', result
    on_disk = sum(e.stat().st_size for e in os.scandir(data) if e.name.endswith('.mds'))
    assert result['metrics']['bytes'] == on_disk
    assert result['metrics']['floor_ns_per_sample'] > 0


def test_failed_implementations_are_not_repeated(tmp_path):
    case = Case(id='write/x', group='write', title='x', script='write.py',
                impls=('ours', 'litdata'), datasets=(), params=lambda impl, ctx: {},
                metrics=(SPEED,))
    ctx = Context(data_dir=str(tmp_path), scale=QUICK, scratch=str(tmp_path))
    runs = run_case(case, ctx, {'ours': sys.executable, 'litdata': sys.executable}, repeats=3,
                    timeout=60, blocked={'ours': 'preparing x failed'})
    assert runs['ours'] == [{'status': 'error', 'reason': 'preparing x failed'}]
    assert len(runs['litdata']) == 1  # Unsupported once, then not run again.
    assert runs['litdata'][0]['status'] == 'unsupported'
