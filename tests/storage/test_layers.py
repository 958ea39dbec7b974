"""The storage package's layering: no import cycle, no optional import where none belongs.

Imports are read from the source (every ``import`` statement, including those inside
functions), so a lazy import cannot hide a cycle.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORAGE = os.path.join(REPO, 'streaming', 'storage')
MODULES = sorted(name[:-3] for name in os.listdir(STORAGE)
                 if name.endswith('.py') and name != '__init__.py')
# The transfer layer, which backends build on and which must not know about them.
TRANSFER = ['download', 'ranged', 'verify', 'watchdog', 'retry', 'transport', 'clients',
            'objects', 'registry', 'errors', 'secrets', 'upload']


def _imports(module: str) -> tuple[set[str], set[str]]:
    """What ``module`` imports: modules of ``streaming.storage`` (short names), and top-level
    packages from outside ``streaming``."""
    with open(os.path.join(STORAGE, f'{module}.py')) as f:
        tree = ast.parse(f.read())
    internal, external = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f'{node.module}.{alias.name}' for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith('streaming.storage.'):
                short = name.split('.')[2]
                if short in MODULES:
                    internal.add(short)
            elif not name.startswith('streaming'):
                external.add(name.split('.')[0])
    return internal, external


def test_no_import_cycle_inside_storage() -> None:
    graph = {m: _imports(m)[0] for m in MODULES}

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            assert nxt not in path, f'import cycle: {" -> ".join(path + [nxt])}'
            visit(nxt, path + [nxt])

    for module in MODULES:
        visit(module, [module])


@pytest.mark.parametrize('module', TRANSFER)
def test_the_transfer_layer_imports_no_backend_and_no_http_library(module) -> None:
    internal, external = _imports(module)
    backends = {'backend', 'local', 's3', 'gcs', 'azure', 'oci', 'hf', 'http'}
    assert not internal & backends, (module, internal & backends)
    assert not external & {'urllib3', 'requests', 'boto3', 'botocore', 'google', 'azure',
                           'oci', 'huggingface_hub'}, (module, external)


def test_the_registry_does_not_import_the_download_layer() -> None:
    assert _imports('registry')[0] == {'errors', 'objects'}


@pytest.mark.parametrize('module', ['oci', 'gcs', 's3', 'azure'])
def test_backends_share_helpers_through_transport_not_the_http_backend(module) -> None:
    internal, external = _imports(module)
    assert 'http' not in internal and 'urllib3' not in external, (internal, external)


def test_transport_and_retry_work_without_urllib3() -> None:
    result = subprocess.run([sys.executable, '-c', textwrap.dedent('''
        import sys
        sys.modules['urllib3'] = None
        sys.modules['requests'] = None
        from streaming.storage.transport import status_error
        from streaming.storage import download_file, upload_file  # noqa: F401
        error = status_error('s3://b/k', 503, {'retry-after': '7'})
        print(type(error).__name__, error.retry_after, error.throttled)
    ''')], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ['TransientError', '7.0', 'True']


def test_storage_modules_stay_small() -> None:
    for module in MODULES:
        with open(os.path.join(STORAGE, f'{module}.py')) as f:
            assert sum(1 for _ in f) <= 500, module
