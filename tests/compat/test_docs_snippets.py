"""The README's and the migration guide's Python snippets run as written.

Each file's ```python blocks run in order in one fresh process, in a temporary directory;
absolute example paths (``/data/...``, ``/tmp/cache``) are moved under it. Blocks fenced as
anything else (```bash, ```text) are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

import pytest

from tests.compat.helpers import ROOT

DOCS = ['README.md', 'docs/migrating.md']


def python_blocks(path: str) -> list[str]:
    with open(os.path.join(ROOT, path)) as f:
        return re.findall(r'^```python\n(.*?)^```', f.read(), flags=re.S | re.M)


@pytest.mark.parametrize('doc', DOCS)
def test_snippets_run(doc: str, tmp_path: Any) -> None:
    blocks = python_blocks(doc)
    assert blocks, f'{doc} has no python snippets'
    code = '\n'.join(blocks)
    code = code.replace("'/data/", f"'{tmp_path}/data/").replace("'/tmp/cache'",
                                                                  f"'{tmp_path}/cache'")
    code = code.replace('\n    ...\n', '\n    pass\n')
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f'{doc} snippets failed:\n{proc.stderr[-3000:]}'
