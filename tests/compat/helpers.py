"""Running converters as users do (``python -m ...``) and small image files for the tests."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_module(module: str, *args: str) -> str:
    """Run ``python -m module args`` with this tree's package; returns stdout."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
    proc = subprocess.run([sys.executable, '-m', module, *args], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, f'{module} failed:\n{proc.stderr[-3000:]}'
    return proc.stdout


def image_bytes(seed: int, size: tuple[int, int] = (16, 12), fmt: str = 'JPEG',
                mode: str = 'RGB') -> bytes:
    """A small random image file's bytes."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    shape = (size[1], size[0], 3) if mode == 'RGB' else (size[1], size[0])
    image = Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode)
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def write_file(path: Any, data: bytes) -> None:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, 'wb') as f:
        f.write(data)
