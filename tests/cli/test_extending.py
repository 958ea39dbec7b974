"""A third-party subcommand, added exactly as docs/extending/cli-command.md says."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

from tests.cli.conftest import REPO, N, run_cli

PAGE = REPO / 'docs' / 'extending' / 'cli-command.md'


def _page_module() -> str:
    """The example module, taken from the page itself so the page stays true."""
    blocks = re.findall(r'```python\n(.*?)```', PAGE.read_text(), re.S)
    return next(b for b in blocks if 'HELP =' in b)


def _install(site: Path) -> None:
    """What ``pip install`` of a package declaring the entry point leaves in site-packages."""
    (site / 'my_package').mkdir(parents=True)
    (site / 'my_package' / '__init__.py').write_text('')
    (site / 'my_package' / 'samples_command.py').write_text(_page_module())
    info = site / 'my_package-0.1.dist-info'
    info.mkdir()
    (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: my-package\nVersion: 0.1\n')
    (info / 'entry_points.txt').write_text(
        '[streaming.cli]\nsamples = my_package.samples_command\n')


def test_entry_point_subcommand(tmp_path, dataset) -> None:
    site = tmp_path / 'site'
    _install(site)
    env = {'PYTHONPATH': os.pathsep.join([str(REPO), str(site)])}
    listing = run_cli('--help', env=env)
    assert 'samples' in listing.stdout and 'count the samples of a dataset' in listing.stdout
    sub = run_cli('samples', '--help', env=env)
    assert sub.returncode == 0 and 'For example:' in sub.stdout and '--json' in sub.stdout
    proc = run_cli('samples', dataset, '--json', env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report['samples'] == N and sum(report['per_shard']) == N
    bad = run_cli('samples', str(tmp_path / 'nope'), env=env)
    assert bad.returncode == 1
    assert bad.stderr.startswith('streaming samples: error: No index.json at')


def test_register_command_from_a_script(tmp_path, dataset) -> None:
    site = tmp_path / 'site'
    _install(site)
    (site / 'my_package-0.1.dist-info' / 'entry_points.txt').unlink()
    script = tmp_path / 'run.py'
    script.write_text(textwrap.dedent(f'''
        from streaming.cli import main, register_command

        register_command('samples', 'my_package.samples_command')
        raise SystemExit(main(['samples', {dataset!r}]))
    '''))
    import subprocess
    import sys
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(REPO), str(site)])}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    shards = json.load(open(Path(dataset) / 'index.json'))['shards']
    assert proc.stdout.strip() == f'{N} samples in {len(shards)} shards'
