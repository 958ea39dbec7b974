"""The node's shared-memory prefix registry, shared by both libraries on one machine.

``get_shm_prefix`` records each dataset's local directories in a block ``/dev/shm/<prefix>_locals``
that every later dataset of the node walks. A block of ours must read in the reference exactly as
its own (it once lost the last 4 bytes of ours, the prefix number, and its rank processes
crashed: issue 32), and ours must read the reference's. Here a process of one library holds a
prefix while a process of the other walks the registry, both in the test process's private
``/dev/shm`` (``tests/oracle/private_shm.py``), so nothing else on the machine is in the walk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from typing import Any

import pytest

from tests.compat.helpers import ROOT
from tests.compat.oracle import run_reference_code
from tests.oracle.private_shm import in_private_shm, private_shm_pid
from tests.oracle.runner import reference_env, reference_lock, reference_zygote

# The walks of a registry block that a process of the other library holds, run by either
# library (``pack`` / ``unpack``: its own functions for the block's layout).
WALK = """
import json
from streaming.base.shared import SharedMemory
from streaming.base.shared.prefix import get_shm_prefix
from streaming.base.world import World

def outcome(call):
    try:
        return ['ok', call()]
    except Exception as error:
        return [type(error).__name__, str(error)]

def isolate(spec):  # the registry's file locks (named by prefix, in the temp dir): ours alone
    import os, tempfile
    os.makedirs(spec['tmp'], exist_ok=True)
    tempfile.tempdir = spec['tmp']
def walk(spec, pack, unpack, follower):
    isolate(spec)
    leader = World(1, 1, 1, 0)
    prefix, dirs = spec['prefix'], spec['dirs']
    shm = SharedMemory(f'{prefix:06}_locals', False, auto_cleanup=False)
    block = bytes(shm.buf)
    dirnames, number = unpack(block)
    result = {
        'exact': block[:len(pack(dirs, prefix))] == pack(dirs, prefix),
        'unpacked': [dirnames, int(number)],
        'reused': outcome(lambda: get_shm_prefix([dirs[0]], ['s3://bucket/other'], leader)[0]),
        'new': outcome(lambda: get_shm_prefix([spec['new']], [None], leader)[0]),
    }
    if follower:  # another rank of the node, not its local leader
        result['follower'] = outcome(
            lambda: get_shm_prefix(dirs, spec['remotes'], World(1, 2, 1, 1))[0])
    return result
"""

# Ours, as a process in the private /dev/shm: ``hold SPEC`` registers SPEC's dirs and answers
# on stdin; ``walk SPEC`` prints the outcomes of the walks.
OURS = WALK + """
import sys
from streaming.base.shared.prefix import _read_block, pack_locals, unpack_locals
mode, spec = sys.argv[1], json.loads(sys.argv[2])
if mode == 'hold':
    isolate(spec)
    prefix, shm = get_shm_prefix(spec['dirs'], spec['remotes'], World(1, 1, 1, 0))
    print(json.dumps(prefix), flush=True)
    sys.stdin.readline()  # until the test says so
    print(json.dumps(_read_block(prefix)), flush=True)  # ours, intact after their walk
else:
    print(json.dumps(walk(spec, pack_locals, unpack_locals, True)), flush=True)
"""

# The reference's side of the same walks (run in its zygote, in the same private /dev/shm).
REFERENCE_WALK = WALK + """
from streaming.base.shared.prefix import _pack_locals, _unpack_locals
emit(walk(json.loads(SPEC), _pack_locals, _unpack_locals, False))
"""

# The reference holding a prefix until the file RELEASE appears.
REFERENCE_HOLD = """
import json, os, sys, time
from streaming.base.shared.prefix import get_shm_prefix
from streaming.base.world import World
spec = json.loads(sys.argv[1])
os.makedirs(spec['tmp'], exist_ok=True)
import tempfile
tempfile.tempdir = spec['tmp']  # the registry's file locks of this test alone
prefix, shm = get_shm_prefix(spec['dirs'], spec['remotes'], World(1, 1, 1, 0))
with open(spec['ready'] + '.tmp', 'w') as f:
    json.dump(prefix, f)
os.rename(spec['ready'] + '.tmp', spec['ready'])
deadline = time.monotonic() + 300
while not os.path.exists(spec['release']) and time.monotonic() < deadline:
    time.sleep(0.02)
"""


def _ours(mode: str, spec: dict, cwd: str, **popen: Any) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'PYTHONHOME')}
    env['PYTHONPATH'] = ROOT
    return subprocess.Popen(in_private_shm([sys.executable, '-c', OURS, mode, json.dumps(spec)],
                                           cwd), cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, **popen)


def _spec(tmp_path: Any) -> dict:
    dirs = [str(tmp_path / 'cache-a'), str(tmp_path / 'cache-b')]
    # 'tmp': both libraries skip a prefix whose file locks exist in the temp dir, which other
    # jobs on the machine share; a private one keeps the walk to this test's blocks.
    return {'dirs': dirs, 'remotes': ['s3://bucket/a', None], 'new': str(tmp_path / 'cache-c'),
            'tmp': str(tmp_path / 'tmp')}


def _check_walk(walk: dict, prefix: int, spec: dict) -> None:
    """What a walker of either library found in the other's registry."""
    assert walk['exact'] is True  # the block's bytes are what the walker's library writes
    assert walk['unpacked'] == [spec['dirs'], prefix]
    # A live dataset streams from a remote into dirs[0]: refused, having read the block.
    assert walk['reused'][0] == 'ValueError' and 'Reused local directory' in walk['reused'][1]
    new = walk['new']
    assert new[0] == 'ok' and new[1] > prefix, new  # walked past the other's prefix
    if 'follower' in walk:  # ours: a non-leader rank finds its leader's prefix (the
        # reference's ranks all walk before their leader registers, between two barriers)
        assert walk['follower'] == ['ok', prefix]


def test_the_reference_walks_a_block_ours_registered(tmp_path) -> None:
    spec = _spec(tmp_path)
    holder = _ours('hold', spec, str(tmp_path), stdin=subprocess.PIPE)
    try:
        line = holder.stdout.readline()
        assert line, 'our holder died'
        prefix = json.loads(line)
        walk, = run_reference_code(f'SPEC = {json.dumps({**spec, "prefix": prefix})!r}\n' +
                                   REFERENCE_WALK)
        holder.stdin.write('done\n')
        holder.stdin.flush()
        after = json.loads(holder.stdout.readline())
        assert holder.wait(timeout=60) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    _check_walk(walk, prefix, spec)
    assert after == [spec['dirs'], prefix]  # their walk left our block as it was


def test_ours_walks_a_block_the_reference_registered(tmp_path) -> None:
    spec = _spec(tmp_path)
    ready, release = str(tmp_path / 'ready'), str(tmp_path / 'release')
    zygote = reference_zygote()
    log = str(tmp_path / 'reference.log')
    with reference_lock():
        pid = zygote.spawn(['-c', textwrap.dedent(REFERENCE_HOLD),
                            json.dumps({**spec, 'ready': ready, 'release': release})],
                           env=reference_env(), cwd=str(tmp_path), stdout=log)
        try:
            deadline = time.monotonic() + 240
            while not os.path.exists(ready) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not os.path.exists(ready):
                with open(log) as f:
                    pytest.fail(f'the reference did not register a prefix:\n{f.read()[-3000:]}')
            with open(ready) as f:
                prefix = json.load(f)
            walker = _ours('walk', {**spec, 'prefix': prefix}, str(tmp_path))
            out, _ = walker.communicate(timeout=240)
            assert walker.returncode == 0, out
        finally:
            open(release, 'w').close()
            returncode = zygote.wait(pid, timeout=120)
    with open(log) as f:
        assert returncode == 0, f.read()[-3000:]
    _check_walk(json.loads(out), prefix, spec)


def test_oracle_processes_have_a_private_dev_shm(tmp_path) -> None:
    """What another job on the machine puts in /dev/shm is not seen by the reference's processes
    (nor by ours in the cross tests), and theirs is not seen by the machine."""
    if private_shm_pid() is None:
        pytest.skip('no mount namespace here (not root, or unshare is not allowed): the oracle '
                    "processes share the machine's /dev/shm")
    machine = f'/dev/shm/shardflow-machine-{uuid.uuid4().hex}'
    theirs = f'/dev/shm/shardflow-oracle-{uuid.uuid4().hex}'
    open(machine, 'w').close()
    try:
        seen, = run_reference_code(f'import os\nopen({theirs!r}, "w").close()\n'
                                   f'emit([os.path.exists({machine!r}), '
                                   f'os.path.exists({theirs!r})])')
        ours = subprocess.run(in_private_shm([sys.executable, '-c', f'import os; print(os.path.'
                                              f'exists({theirs!r}))'], str(tmp_path)),
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
    finally:
        os.remove(machine)
    assert seen == [False, True]
    assert ours.stdout.strip() == 'True'  # ours in the cross tests: the same private /dev/shm
    assert not os.path.exists(theirs)
