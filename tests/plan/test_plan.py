"""``streaming plan``: predictions from a real index, their rules, and bad input.

The plan replays the real order engine through a model of the node's scheduler and cache; these
tests check what must hold whatever the link: bytes and GETs add up to the index's shards, a
cache below the working set refetches (and says so), a big dataset is sampled (and says so),
the presets are the link emulator's, and bad input gets one clear line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from streaming.plan import DatasetShape, RunSettings, get_profile, plan
from streaming.plan.core import make_plan
from streaming.plan.quality import entropy_bits
from tests.cli.conftest import (
    REPO,
    N,
    cli_s3_env,
    moto,  # noqa: F401
    run_cli,
    run_json,
    write_dataset,
)
from tests.storage.conftest import new_name, s3_client


def _shard_bytes(path: str) -> tuple[int, int]:
    with open(f'{path}/index.json') as f:
        shards = json.load(f)['shards']
    fetched = sum((s.get('zip_data') or s['raw_data'])['bytes'] for s in shards)
    return len(shards), fetched


def test_presets_are_the_link_emulators_profiles() -> None:
    from benchmarks.linkemu import PROFILES
    for name in ('same-region', 'cross-region'):
        ours, theirs = get_profile(name), PROFILES[name]
        assert (ours.ttfb, ours.conn_rate, ours.link_rate) == \
            (theirs.ttfb, theirs.conn_rate, theirs.link_rate)


def test_plan_of_a_local_dataset_adds_up_to_its_index(tmp_path) -> None:
    path = write_dataset(str(tmp_path / 'ds'))
    shards, fetched = _shard_bytes(path)
    out = run_json('plan', path, '--workers', '2', '--batch-size', '8')
    node = out['nodes'][0]
    assert out['dataset']['shards'] == shards and out['dataset']['samples'] == N
    assert node['fetched_bytes'] == fetched and node['refetches'] == 0
    assert node['gets'] == shards + 1  # One GET per shard file, and the index.
    assert 0 < node['first_batch_s'] <= node['epoch_s'][0]
    assert node['steps'] == -(-N // 8)
    assert out['totals']['egress_bytes'] == fetched
    text = run_cli('plan', path, '--batch-size', '8')
    assert text.returncode == 0 and 'first batch' in text.stdout


def test_plan_reads_a_remote_index(tmp_path, moto) -> None:  # noqa: F811
    bucket = new_name('plan')
    s3_client(moto.url).create_bucket(Bucket=bucket)
    env = cli_s3_env(moto.url)
    path = write_dataset(str(tmp_path / 'ds'))
    run_json('cp', path, f's3://{bucket}/ds', env=env)
    remote = run_json('plan', f's3://{bucket}/ds', '--batch-size', '8', env=env)
    local = run_json('plan', path, '--batch-size', '8')
    assert remote['nodes'][0]['fetched_bytes'] == local['nodes'][0]['fetched_bytes']
    assert remote['nodes'][0]['first_batch_s'] == local['nodes'][0]['first_batch_s']


def _small() -> DatasetShape:
    return DatasetShape.synthetic(4000, 50, 20_000)  # 80 shards of 1 MB.


def test_a_cache_below_the_working_set_refetches_and_warns() -> None:
    shape = _small()
    # naive: a shuffle of the whole epoch, which no block size (capped by the limit) narrows.
    run = RunSettings(workers=2, batch_size=16, shuffle_algo='naive')
    free = plan(shape, run)
    working = free['cache']['working_set_bytes']
    assert free['nodes'][0]['refetches'] == 0
    tight = plan(shape, RunSettings(workers=2, batch_size=16, shuffle_algo='naive',
                                    cache_limit=working // 4))
    node = tight['nodes'][0]
    assert node['refetches'] > 0 and node['fetched_ratio'] > 1.0
    assert any('cache_limit below the working set' in w for w in tight['warnings'])
    assert node['peak_cache_bytes'] <= working // 4
    roomy = plan(shape, RunSettings(workers=2, batch_size=16, shuffle_algo='naive',
                                    cache_limit=int(shape.held_bytes.sum()) * 2))
    assert roomy['nodes'][0]['refetches'] == 0 and not roomy['warnings']


def test_smallest_cache_without_refetch_is_tight() -> None:
    shape, run = _small(), RunSettings(workers=2, batch_size=16)
    found = plan(shape, run, find_min_cache=True)['cache']['min_no_refetch']
    assert found is not None
    at = plan(shape, RunSettings(workers=2, batch_size=16, cache_limit=found))
    assert at['nodes'][0]['refetches'] == 0
    below = int(found * 0.8)
    if below >= 2 * int(shape.held_bytes.max()) + shape.index_bytes and \
            below > plan(shape, run)['cache']['working_set_bytes']:
        assert plan(shape, RunSettings(workers=2, batch_size=16, cache_limit=below)
                    )['nodes'][0]['refetches'] > 0


def test_a_slow_link_stalls_a_fast_model_and_a_fast_link_does_not() -> None:
    shape = _small()
    # In dataset order, shards are needed one after another: a slow link holds up every one
    # (two downloads in flight, as STREAMING_DOWNLOADS_IN_FLIGHT=2 sets).
    run = RunSettings(workers=2, batch_size=16, steps_per_s=50.0, shuffle=False)
    slow = plan(shape, run, get_profile('same-region').replace(conn_rate=1e6, link_rate=2e6),
                in_flight=2)
    fast = plan(shape, RunSettings(workers=2, batch_size=16, steps_per_s=0.5, shuffle=False),
                get_profile('same-region'))
    assert slow['nodes'][0]['stalled_steps'] > 10
    assert any('wait for data' in w for w in slow['warnings'])
    assert fast['nodes'][0]['stalled_steps'] <= 1  # Only the first batch waits.
    # The link bounds the epoch: 80 MB at 2 MB/s.
    assert slow['nodes'][0]['epoch_s'][0] >= shape.total_bytes / 2e6


def test_a_store_request_limit_throttles() -> None:
    shape = DatasetShape.synthetic(20_000, 20, 1000)  # 1,000 small shards.
    limited = plan(shape, RunSettings(workers=2, batch_size=16),
                   get_profile('same-region').replace(request_limit=50.0))
    node = limited['nodes'][0]
    assert node['throttled_gets'] > 0
    assert node['epoch_s'][0] >= 1000 / 50 * 0.9  # 1,000 GETs at 50/s.


def test_nodes_fetch_their_partition_or_everything() -> None:
    shape = _small()
    one = plan(shape, RunSettings(nodes=1, batch_size=16), 'internet')
    # py1e: each node reads its canonical nodes' shards, about a quarter each.
    four = plan(shape, RunSettings(nodes=4, batch_size=16), 'internet')
    assert len(four['nodes']) == 4
    assert all(n['fetched_bytes'] < 0.4 * shape.total_bytes for n in four['nodes'])
    assert four['totals']['egress_bytes'] < 1.3 * one['totals']['egress_bytes']
    # naive: every node's samples come from every shard: each node fetches them all.
    spread = plan(shape, RunSettings(nodes=4, batch_size=16, shuffle_algo='naive'), 'internet')
    assert spread['totals']['egress_bytes'] > 3.5 * one['totals']['egress_bytes']
    assert spread['totals']['cost'] > one['totals']['cost'] > 0


def test_a_thrashing_cache_is_cut_within_the_plans_budget_and_extrapolated() -> None:
    """A cache far below the working set refetches without end: the plan simulates at most
    ``max_downloads`` downloads in all (shared by its nodes), even before the first step, and
    extrapolates the run from the shard reads done, saying so."""
    shape = DatasetShape.synthetic(40_000, 100, 1000)  # 400 shards of 100 KB.
    run = RunSettings(nodes=4, workers=4, batch_size=32, shuffle_algo='naive',
                      cache_limit=400_000)
    budget = 600
    result = make_plan(shape, run, get_profile('same-region'), max_downloads=budget,
                       quality=False)
    cuts = [n for n in result['notes'] if ': cut after ' in n]
    assert len(cuts) == 4
    downloads = [int(n.split(': cut after ')[1].split()[0]) for n in cuts]
    assert all(budget // 4 < d <= budget // 4 + 4 * 2 for d in downloads), downloads
    steps = -(-shape.total_samples // (run.batch_size * run.nodes))
    for node in result['nodes']:
        # The whole epoch is reported (extrapolated), not the part simulated.
        assert node['steps'] == steps and node['samples'] == shape.total_samples // 4
        assert node['fetched_ratio'] > 2.0 and node['refetches'] > budget // 4
        assert node['epoch_s'][0] > node['first_batch_s'] > 0
    full = make_plan(shape, run, get_profile('same-region'), max_downloads=10**6,
                     quality=False)
    assert not any(': cut after ' in n for n in full['notes'])
    # The extrapolation is of the right size: the epoch's bytes within a factor of three (the
    # start, when every reader begins at once, thrashes most, so it errs high).
    for cut, whole in zip(result['nodes'], full['nodes']):
        assert 1.0 / 3 < cut['fetched_bytes'] / whole['fetched_bytes'] < 3.0


def test_a_huge_dataset_is_sampled_and_says_so() -> None:
    shape = DatasetShape.synthetic(10**9, 10_000, 2048)
    result = make_plan(shape, RunSettings(nodes=8, ranks_per_node=8, workers=8),
                       get_profile('cross-region'))
    assert result['sampled'] and any(n.startswith('sampled:') for n in result['notes'])
    node = result['nodes'][0]
    # Totals are the whole epoch's: the node's share of 2 TB, not the sample's.
    assert node['fetched_bytes'] == pytest.approx(shape.total_bytes / 8, rel=0.05)
    assert node['epoch_s'][0] > 100 * node['first_batch_s']


def test_shuffle_quality_scores_order() -> None:
    assert entropy_bits(np.arange(1000)) == 0.0
    shape = _small()
    plain = plan(shape, RunSettings(batch_size=16, shuffle=False))['quality']
    mixed = plan(shape, RunSettings(batch_size=16, shuffle_block_size=4000))['quality']
    assert plain['entropy_bits'] < 0.1 and plain['distinct_shards_per_batch']['mean'] <= 2
    assert mixed['entropy_score'] > 0.9 > plain['entropy_score']
    assert mixed['distinct_shards_per_batch']['mean'] > 8
    assert mixed['samples_between_reads']['median'] > plain['samples_between_reads']['median']


def test_suggest_meets_its_target_and_says_why() -> None:
    shape = _small()
    result = plan(shape, RunSettings(workers=1, batch_size=16, steps_per_s=20.0), suggest=True)
    suggestion = result['suggestion']
    assert suggestion['why'] and suggestion['why'][0].startswith('target:')
    if suggestion['meets_target']:
        assert suggestion['samples_per_s'] >= suggestion['target_samples_per_s']


@pytest.mark.parametrize('args, words', [
    (('--nodes', '0', '--synthetic-samples', '100'), '`nodes` must be a positive integer'),
    (('--synthetic-samples', 'lots'), '--synthetic-samples'),
    (('--synthetic-samples', '100', '--profile', 'moon'), 'Unknown link profile'),
    ((), 'give a dataset url'),
    (('/nonexistent/dataset',), '/nonexistent/dataset'),
    (('--synthetic-samples', '100', '--cache-limit', '-5'), 'cache_limit'),
])
def test_bad_input_is_one_clear_line(args, words) -> None:
    proc = run_cli('plan', *args)
    assert proc.returncode == 1, proc.stdout
    assert words in proc.stderr and 'Traceback' not in proc.stderr


def _ids(samples: list[dict]) -> list[int]:
    return [int(sample['id']) for sample in samples]


def test_the_planned_steps_are_what_a_real_loader_reads(tmp_path) -> None:
    """Two real DataLoader workers read, batch after batch, the shards the plan's steps list."""
    from streaming import StreamingDataLoader, StreamingDataset
    from streaming.plan.orders import block_size_in_effect, epoch_orders, node_steps
    path = write_dataset(str(tmp_path / 'ds'), n=400)
    shape = DatasetShape.from_urls([path])
    run = RunSettings(workers=2, batch_size=8)
    dataset = StreamingDataset(local=path, batch_size=8, shuffle=True)
    loader = StreamingDataLoader(dataset, batch_size=8, num_workers=2, collate_fn=_ids)
    read = list(loader)
    starts = np.concatenate([[0], np.cumsum(shape.samples)])
    steps = node_steps(epoch_orders(shape, run, 0, block_size_in_effect(shape, run))[0], starts)
    assert steps.steps == len(read)
    for step, ids in enumerate(read):
        shards = np.searchsorted(starts, ids, 'right') - 1
        assert steps.sample_shards[step][steps.sample_shards[step] >= 0].tolist() == \
            shards.tolist()


def test_a_reference_simulator_yaml_sets_the_run(tmp_path) -> None:
    """A training YAML as the reference simulator reads it: streams, batch, duration, loader."""
    first = write_dataset(str(tmp_path / 'a'), n=200)
    second = write_dataset(str(tmp_path / 'b'), n=100)
    config = tmp_path / 'run.yaml'
    config.write_text(f"""
compute:
  gpus: 4
parameters:
  global_train_batch_size: 32
  max_duration: 2ep
  train_loader:
    num_workers: 3
    dataset:
      streams:
        one: {{remote: {first}, proportion: 0.75}}
        two: {{local: {second}, proportion: 0.25}}
      shuffle: true
      shuffle_algo: py1s
      cache_limit: 1mb
      predownload: 64
""")
    out = run_json('plan', '--yaml', str(config), '--nodes', '2')
    run = out['run']
    assert (run['nodes'], run['ranks_per_node'], run['batch_size'], run['workers'],
            run['epochs']) == (2, 2, 8, 3, 2)
    assert run['proportions'] == [0.75, 0.25] and run['shuffle_algo'] == 'py1s'
    assert run['cache_limit'] == 1 << 20 and run['predownload'] == 64
    assert out['dataset']['samples'] == 300 and len(out['nodes'][0]['epoch_s']) == 2
    config.write_text('parameters:\n  global_train_batch_size: 32\n  max_duration: 10sp\n'
                      f'  train_loader:\n    dataset:\n      remote: {first}\n')
    proc = run_cli('plan', '--yaml', str(config))
    assert proc.returncode == 1 and 'max_duration' in proc.stderr and str(config) in proc.stderr


def test_a_yaml_without_pyyaml_names_the_plan_extra(tmp_path) -> None:
    """PyYAML comes with the ``plan`` extra; without it, ``--yaml`` says which extra to install.

    PyYAML is installed in the test env, so the subprocess hides it (``sys.modules['yaml'] =
    None`` makes ``import yaml`` fail as a missing package does); nothing else is faked.
    """
    config = tmp_path / 'run.yaml'
    config.write_text('global_train_batch_size: 8\n')
    code = ('import sys; sys.modules["yaml"] = None; from streaming.cli.main import main; '
            f'sys.exit(main(["plan", "--yaml", {str(config)!r}]))')
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          env={**os.environ, 'PYTHONPATH': str(REPO)}, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert 'shardflow[plan]' in proc.stderr and 'PyYAML' in proc.stderr
    assert str(config) in proc.stderr and 'Traceback' not in proc.stderr
    import tomllib
    with open(REPO / 'pyproject.toml', 'rb') as f:
        extras = tomllib.load(f)['project']['optional-dependencies']
    assert any(dep.lower().startswith('pyyaml') for dep in extras['plan'])


def test_the_calibration_table_judges_each_figure() -> None:
    from benchmarks.plan_calibration import table
    real = {'status': 'ok', 'first_batch_s': 2.0, 'epoch_s': 10.0, 'fetched_ratio': 1.1,
            'refetched_share': 0.1}
    close = {'first_batch_s': 2.2, 'epoch_s': 9.0, 'fetched_ratio': 1.0, 'refetched_share': 0.0}
    far = {**close, 'epoch_s': 7.0}
    text = table([{'name': 'close', 'measured': real, 'predicted': close},
                  {'name': 'far', 'measured': real, 'predicted': far},
                  {'name': 'absent', 'measured': {'status': 'needs the fleet emulator'}}])
    rows = text.splitlines()
    assert rows[3].endswith('| yes |') and '(10%)' in rows[3]  # 2.2 vs 2.0; 9 vs 10.
    assert rows[5].endswith('| no |') and '(30%)' in rows[5]
    assert 'not run: needs the fleet emulator' in rows[6]


def test_the_calibration_docs_join_the_single_node_and_fleet_runs(tmp_path) -> None:
    """``--no-fleet`` and ``--only-fleet`` each keep their results; the docs name both runs and
    list each row's machine costs and the fleet's per-node first batches."""
    import json

    from benchmarks.plan_calibration import docs_text
    figures = {'first_batch_s': 2.0, 'epoch_s': 10.0, 'fetched_ratio': 1.0,
               'refetched_share': 0.0}
    machine = {'startup_s': 0.7, 'build_s': 0.1, 'decode_s_per_sample': 1e-4,
               'uncapped_epoch_s': 1.5, 'uncapped_runs': 3}
    single = {'command': 'single-command', 'date': '2026-11-28 13:51', 'load': [2.0, 3.0, 3.0],
              'repeats': 3, 'link': 'kernel', 'big_plan': {'seconds': 2.2, 'load': [3.6]},
              'results': [{'name': 'one node', 'measured': {'status': 'ok', **figures},
                           'predicted': figures, 'machine': machine, 'shares': [0.97, 0.9]}]}
    fleet = {'command': 'fleet-command', 'date': '2026-11-28 14:04', 'load': [2.5, 3.0, 3.0],
             'repeats': 5, 'results': [{
                 'name': 'fleet', 'machine': machine,
                 'measured': {'status': 'ok', **figures, 'ranks_first_batch_s': [1.0, 7.9]},
                 'predicted': {**figures, 'first_batch_s': 3.0,
                               'ranks_first_batch_s': [1.5, 9.4]}}]}
    paths = [str(tmp_path / 'single.json'), str(tmp_path / 'fleet.json')]
    for path, part in zip(paths, [single, fleet]):
        with open(path, 'w') as f:
            json.dump(part, f)
    text = docs_text(paths + [str(tmp_path / 'absent.json')])
    assert '`single-command` (kernel link' in text and 'medians of 3' in text
    assert '`fleet-command`' in text and 'medians of 5' in text
    rows = [line for line in text.splitlines() if line.startswith('| ')]
    assert rows[1].startswith('| one node |') and rows[2].endswith('| yes |')
    assert rows[3].startswith('| fleet |') and rows[4].endswith('| no |')  # 3.0 vs 2.0.
    assert 'start-up 0.70 s' in text and '0.90 of its aggregate' in text
    assert 'measured 1.00, 7.90 s, planned 1.50, 9.40 s' in text
    assert 'answered in 2.2 s' in text


def test_the_fleet_row_compares_the_means_of_its_first_batches() -> None:
    """The fleet's slowest first batch spreads in clusters from epoch to epoch: the table
    compares the mean of the epochs with the mean of the plan's draws, the medians kept."""
    from benchmarks.plan_calibration import _draws
    from benchmarks.plan_calibration_fleet import with_mean_first_batch
    runs = [{'status': 'ok', 'metrics': {'first_batch_s': x}} for x in (6.0, 6.5, 12.0, 13.0)]
    draws = [5.0, 6.0, 12.0, 14.0, 15.0]
    row = with_mean_first_batch({'runs': runs, 'measured': {'first_batch_s': 9.25},
                                 'predicted': {'first_batch_s': 12.0,
                                               'draws_first_batch_s': draws}})
    assert row['measured']['first_batch_s'] == pytest.approx(9.375)
    assert row['predicted']['first_batch_s'] == pytest.approx(10.4)
    assert row['measured']['first_batch_median_s'] == 9.25
    assert row['predicted']['first_batch_median_s'] == 12.0
    assert with_mean_first_batch(row)['predicted']['first_batch_median_s'] == 12.0  # Once.
    assert 'the medians: measured 9.25 s, planned 12.00 s' in _draws(row)


def test_a_store_answering_one_get_after_another_delays_first_bytes() -> None:
    """``store_rate``: the store begins at most that many answers a second; a GET's first byte
    comes ``ttfb`` after it is sent or once the store has begun it, whichever is later. None (the
    default) plans as before; a slow store delays the run; a bad value is refused by name."""
    from streaming.plan.store import StoreQueue
    queue = StoreQueue(10.0)
    assert [round(queue.answer(0.0, 0.1), 6) for _ in range(4)] == [0.1, 0.2, 0.3, 0.4]
    assert queue.answer(5.0, 0.1) == pytest.approx(5.1)  # Idle again: only the link's delay.
    assert StoreQueue(None).answer(1.0, 0.1) == pytest.approx(1.1)
    shape = DatasetShape.synthetic(6_000, 100, 20_000)
    run = RunSettings(workers=2, batch_size=16)
    base = get_profile('cross-region')
    before = plan(shape, run, base, quality=False)['nodes'][0]
    unset = plan(shape, run, base.replace(store_rate=None), quality=False)['nodes'][0]
    assert unset['first_batch_s'] == before['first_batch_s']
    assert unset['epoch_s'] == before['epoch_s']
    slow = plan(shape, run, base.replace(store_rate=5.0), quality=False)['nodes'][0]
    # 60 shards at 5 answers a second: the epoch cannot end before the store has begun them all.
    assert slow['epoch_s'][0] >= 60 / 5.0 - 1.0
    assert slow['first_batch_s'] > before['first_batch_s']
    with pytest.raises(ValueError, match='store_rate'):
        base.replace(store_rate=0.0)


def test_the_calibration_measures_the_stores_rate_from_its_busy_time() -> None:
    """``store_rate``: GETs over the time at least one waited for its first byte (overlapping
    waits counted once, idle gaps not at all)."""
    from benchmarks.plan_calibration import store_rate
    waits = [(0.0, 0.1), (0.0, 0.2), (0.05, 0.15), (1.0, 1.1)]
    assert store_rate(waits) == pytest.approx(4 / 0.3)
    assert store_rate([]) == float('inf')
