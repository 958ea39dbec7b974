"""Shared state never collides: two datasets in one process, concurrent jobs on one machine,
and a rerun after ``kill -9`` all work with no cleanup (the reference's users hit "File exists"
and "Reused local directory" errors in each of these)."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time

from streaming import StreamingDataLoader, StreamingDataset
from streaming.coord import base_dir
from tests.dataset.launch import REPO, global_batches, run_job


def test_train_and_eval_over_the_same_data_in_one_process(remote_ids, tmp_path) -> None:
    local = str(tmp_path / 'cache')
    train = StreamingDataset(remote=remote_ids, local=local, batch_size=8, shuffle=True)
    evaluate = StreamingDataset(remote=remote_ids, local=local, batch_size=8)
    train_ids, eval_ids = [], []
    for a, b in zip(StreamingDataLoader(train, batch_size=8, num_workers=2),
                    StreamingDataLoader(evaluate, batch_size=8, num_workers=2)):
        train_ids += a['id'].tolist()
        eval_ids += b['id'].tolist()
    assert sorted(train_ids) == sorted(eval_ids) == list(range(960))
    assert train_ids != eval_ids  # One shuffles, the other does not.
    assert train._shared.path != evaluate._shared.path


def test_concurrent_jobs_share_a_cache_directory(remote_ids, tmp_path) -> None:
    dataset = dict(remote=remote_ids, local=str(tmp_path / 'shared-cache'), batch_size=8,
                   shuffle=True)
    results: list = [None, None]

    def job(i: int) -> None:
        results[i] = run_job(str(tmp_path / f'job{i}'), nodes=1, ranks_per_node=1,
                             num_workers=2, epochs=2, init_process_group=False,
                             dataset=dataset)

    threads = [threading.Thread(target=job, args=(i,)) for i in range(2)]
    os.makedirs(tmp_path / 'job0')
    os.makedirs(tmp_path / 'job1')
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for result in results:
        assert result is not None
        for epoch in (0, 1):
            ids = [i for b in global_batches(result, epoch) for i in b]
            assert sorted(ids) == list(range(960))


def test_rerun_after_kill_9_needs_no_cleanup(remote_ids, tmp_path) -> None:
    config = {'dataset': dict(remote=remote_ids, local=str(tmp_path / 'cache'), batch_size=8,
                              shuffle=True),
              'out': str(tmp_path), 'num_workers': 2, 'sleep_per_batch': 0.2,
              'init_process_group': False}
    path = tmp_path / 'config.json'
    path.write_text(json.dumps(config))
    env = {**os.environ, 'PYTHONPATH': REPO, 'RANK': '0', 'WORLD_SIZE': '1',
           'LOCAL_RANK': '0', 'LOCAL_WORLD_SIZE': '1'}
    victim = subprocess.Popen([sys.executable, '-m', 'tests.dataset.rank_main', str(path)],
                              env=env, cwd=REPO, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / 'progress0').exists():
        assert victim.poll() is None and time.monotonic() < deadline, 'job never started'
        time.sleep(0.05)
    before = set(glob.glob(os.path.join(base_dir(), 'streaming-*')))
    os.killpg(victim.pid, signal.SIGKILL)  # The rank and its DataLoader workers, mid-epoch.
    victim.wait()
    stale = [p for p in before if os.path.exists(p) and _owned_by(p, victim.pid)]
    assert stale, 'the killed job should have left its shared state behind'
    results = run_job(str(tmp_path / 'rerun'), nodes=1, ranks_per_node=1, num_workers=2,
                      init_process_group=False, dataset=config['dataset'])
    assert sorted(i for b in global_batches(results) for i in b) == list(range(960))
    assert not any(os.path.exists(p) for p in stale), 'stale shared state was not swept'


def _owned_by(path: str, pid: int) -> bool:
    try:
        with open(os.path.join(path, 'owner.json')) as f:
            return json.load(f)['pid'] == pid
    except (OSError, ValueError):
        return False
