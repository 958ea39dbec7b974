"""Every failure of the command is one line, ``streaming SUBCOMMAND: error: ...``; ``--debug``
(before or after the subcommand) or ``STREAMING_DEBUG=1`` shows the traceback instead."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

from tests.cli.conftest import REPO, cli_s3_env, run_cli
from tests.cli.core_env import core_env

MISSING_EXTRA = 'install it with: pip install "shardflow[s3]"'


def _installed(env_dir, *args: str, cwd: str, extra_env: dict[str, str] | None = None):
    # This tree first on the path (the env's own copy of the package is the wheel built when
    # the env was made), and nothing of the dev env's site-packages.
    env = {k: v for k, v in os.environ.items() if not k.startswith(('PYTHON', 'STREAMING_'))}
    env.update(PYTHONPATH=str(REPO), **(extra_env or {}))
    return subprocess.run([str(env_dir / 'bin' / 'streaming'), *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


def test_missing_extra_is_one_line_in_a_core_only_install(tmp_path) -> None:
    env_dir = core_env()
    probe = subprocess.run([str(env_dir / 'bin' / 'python'), '-c', 'import boto3'],
                           capture_output=True, text=True, cwd=tmp_path)
    assert probe.returncode == 1 and 'boto3' in probe.stderr, 'the core-only env has boto3'

    proc = _installed(env_dir, 'inspect', 's3://bucket/ds', cwd=str(tmp_path))
    assert proc.returncode == 1
    assert proc.stdout == ''
    line, = proc.stderr.splitlines()
    assert line.startswith("streaming inspect: error: URL 's3://bucket/ds' needs an optional "
                           'dependency'), line
    assert line.endswith(MISSING_EXTRA), line

    for args, extra_env in ((['inspect', '--debug', 's3://bucket/ds'], None),
                            (['--debug', 'inspect', 's3://bucket/ds'], None),
                            (['inspect', 's3://bucket/ds'], {'STREAMING_DEBUG': '1'})):
        debug = _installed(env_dir, *args, cwd=str(tmp_path), extra_env=extra_env)
        assert debug.returncode == 1, args
        assert debug.stderr.startswith('Traceback (most recent call last):'), debug.stderr[:500]
        assert 'streaming.storage.errors.MissingDependencyError' in debug.stderr
        assert MISSING_EXTRA in debug.stderr.splitlines()[-1]
        # The traceback runs through this tree's code (PYTHONPATH), not a stale copy.
        assert str(REPO / 'streaming' / 'cli' / 'main.py') in debug.stderr


def test_a_defect_is_one_line_naming_its_type(tmp_path) -> None:
    """A subcommand that fails in an unforeseen way (a third-party one added as
    docs/extending/cli-command.md says) still ends in one line, which says how to see more."""
    (tmp_path / 'broken_command.py').write_text(textwrap.dedent('''
        """A subcommand with a defect."""
        HELP = 'divide by the number of samples'

        def add_arguments(parser):
            parser.add_argument('count', type=int)

        def run(args):
            return 1 // args.count
    '''))
    script = tmp_path / 'run.py'
    script.write_text(textwrap.dedent('''
        import sys
        from streaming.cli import main, register_command

        register_command('broken', 'broken_command')
        raise SystemExit(main(sys.argv[1:]))
    '''))
    env = {'PYTHONPATH': os.pathsep.join([str(REPO), str(tmp_path)])}

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess:
        full = {k: v for k, v in os.environ.items() if k != 'STREAMING_DEBUG'}
        return subprocess.run([sys.executable, str(script), *args],
                              capture_output=True, text=True, env={**full, **env, **extra},
                              timeout=300, cwd=tmp_path)

    assert run('broken', '2').returncode == 0  # 1 // 2: it works
    proc = run('broken', '0')
    assert proc.returncode == 1
    line, = proc.stderr.splitlines()
    assert line == ('streaming broken: error: ZeroDivisionError: integer division or modulo by '
                    'zero (an internal error: run with --debug for the traceback, and please '
                    'report it)')
    for args, extra in ((('broken', '--debug', '0'), {}), (('--debug', 'broken', '0'), {}),
                        (('broken', '0'), {'STREAMING_DEBUG': '1'})):
        debug = run(*args, **extra)
        assert debug.returncode == 1
        assert debug.stderr.startswith('Traceback'), debug.stderr
        assert debug.stderr.splitlines()[-1] == 'ZeroDivisionError: integer division or modulo ' \
            'by zero'
    assert run('broken', '0', STREAMING_DEBUG='0').stderr.count('\n') == 1


def test_bad_input_is_one_line(tmp_path) -> None:
    """An error raised on purpose keeps its message, on one line, with no 'internal' label."""
    bad = tmp_path / 'ds'
    bad.mkdir()
    (bad / 'index.json').write_text('{"version": 2, "shards": [')
    proc = run_cli('inspect', str(bad))
    assert proc.returncode == 1
    line, = proc.stderr.splitlines()
    assert line.startswith('streaming inspect: error: ') and str(bad) in line, line
    assert 'internal error' not in line


def test_unreachable_endpoint_is_one_line_naming_the_url(tmp_path) -> None:
    """boto3's own errors (here: nothing listens at the endpoint) become the storage layer's
    typed error, naming the URL, not a defect."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]  # closed again: connections are refused
    env = {**cli_s3_env(f'http://127.0.0.1:{port}'), 'AWS_MAX_ATTEMPTS': '1'}
    proc = run_cli('inspect', 's3://bucket/ds', env=env, cwd=str(tmp_path))
    assert proc.returncode == 1
    line, = proc.stderr.splitlines()
    assert line.startswith('streaming inspect: error: s3://bucket/ds'), line
    assert 'EndpointConnectionError' in line and 'internal error' not in line, line
