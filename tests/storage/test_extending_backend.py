"""docs/extending/backend.md, run as written: a backend added from outside the package.

The page's ``# file: PATH`` blocks are written to a directory outside the repository, its
pyproject entry point becomes the ``dist-info`` that pip would install, and its ``# run`` block
runs in a fresh interpreter: once found through the entry point, once registered in-process
with the page's ``register_backend`` block instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = os.path.join(REPO, 'docs', 'extending', 'backend.md')


def _blocks(language: str) -> list[str]:
    with open(PAGE) as f:
        text = f.read()
    return [m.group(1) for m in re.finditer(rf'```{language}\n(.*?)```', text, re.S)]


def _files() -> dict[str, str]:
    files = {}
    for block in _blocks('python'):
        first, _, rest = block.partition('\n')
        if first.startswith('# file: '):
            files[first[len('# file: '):].strip()] = rest
    return files


def _run_block() -> str:
    (block,) = [b for b in _blocks('python') if b.startswith('# run\n')]
    return block


def _registration_block() -> str:
    (block,) = [b for b in _blocks('python') if 'register_backend(' in b and
                not b.startswith('# ')]
    return block


def _entry_point() -> tuple[str, str]:
    (toml,) = _blocks('toml')
    assert '[project.entry-points."streaming.backends"]' in toml
    name, value = re.search(r'^(\w+) = "([^"]+)"$', toml, re.M).groups()
    return name, value


def _python(code: str, site: str, cwd: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith('STREAMING_DOWNLOAD')}
    # The package under test (this checkout) and the plugin's own "site-packages".
    env['PYTHONPATH'] = os.pathsep.join([site, REPO])
    return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def _install_plugin(root, with_entry_point: bool) -> str:
    site = root / 'site'
    for path, text in _files().items():
        target = site / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    if with_entry_point:
        name, value = _entry_point()
        dist = site / 'memstore-1.0.dist-info'
        dist.mkdir()
        (dist / 'METADATA').write_text('Metadata-Version: 2.1\nName: memstore\nVersion: 1.0\n')
        (dist / 'entry_points.txt').write_text(f'[streaming.backends]\n{name} = {value}\n')
    return str(site)


def _check(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "['mem://bucket/data/shard.bin']", result.stdout
    assert lines[1].startswith('missing: ') and 'mem://bucket/nothing' in lines[1]
    assert lines[-1] == 'ok'


def test_the_page_has_the_parts_the_test_uses() -> None:
    assert set(_files()) == {'memstore/__init__.py'}
    assert _entry_point() == ('mem', 'memstore:MemoryBackend')


def test_backend_from_the_page_through_its_entry_point(tmp_path) -> None:
    site = _install_plugin(tmp_path, with_entry_point=True)
    work = tmp_path / 'work'
    work.mkdir()
    result = _python(_run_block(), site, str(work))
    _check(result)
    # The retried transient failure was logged as a retry, not hidden.
    assert 'attempt 1 of 3 failed' in result.stderr and 'busy, try again' in result.stderr


def test_backend_from_the_page_registered_in_process(tmp_path) -> None:
    site = _install_plugin(tmp_path, with_entry_point=False)
    work = tmp_path / 'work'
    work.mkdir()
    code = _registration_block() + '\n' + _run_block()
    _check(_python(code, site, str(work)))
    # Without the registration, the scheme is unknown: the entry point was what found it.
    result = _python(textwrap.dedent('''
        from streaming.storage import get_backend
        get_backend('mem://bucket/x')
    '''), site, str(work))
    assert result.returncode != 0 and "unsupported scheme 'mem'" in result.stderr
