"""The format layer encodes and writes local shards only: it imports nothing above it."""

from __future__ import annotations

import ast
import os

import streaming

FORMAT_DIR = os.path.join(os.path.dirname(streaming.__file__), 'format')
# What streaming.format may import from the package: itself and the modules below it (the leaf
# modules, and node coordination for the writer's output-directory lock).
ALLOWED = ('streaming.format', 'streaming.errors', 'streaming.fileio', 'streaming.util',
           'streaming.indexing', 'streaming.coord')


def imported_modules(path: str) -> set[str]:
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in ast.walk(tree):  # Function-level imports count too.
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_format_imports_no_storage_and_nothing_above_it() -> None:
    offenders = {}
    for root, _, files in os.walk(FORMAT_DIR):
        for name in files:
            if name.endswith('.py'):
                path = os.path.join(root, name)
                bad = sorted(m for m in imported_modules(path) if m.startswith('streaming')
                             and not m.startswith(ALLOWED))
                if bad:
                    offenders[os.path.relpath(path, FORMAT_DIR)] = bad
    assert not offenders, f'streaming.format imports layers above it: {offenders}'


def test_public_writers_upload_and_format_writers_do_not() -> None:
    from streaming.format.mds import MDSWriter as LocalMDSWriter
    from streaming.writing import UploadingWriter
    assert issubclass(streaming.MDSWriter, UploadingWriter)
    assert issubclass(streaming.MDSWriter, LocalMDSWriter)
    assert not issubclass(LocalMDSWriter, UploadingWriter)
