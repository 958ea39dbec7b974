"""The reference's public surface (tests/compat/reference_surface.json) imports from ours.

(a) With the reference env present, the surface derived again from it equals the committed file.
(b) Always: every module of that list imports from our package, with every name.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SURFACE = os.path.join(HERE, 'reference_surface.json')

# Modules of the reference that we do not provide, each with the reason. Nothing else may fail.
# All of them are Google's BERT pre-training scripts, which do not import in the reference's own
# env either: they need TensorFlow and absl, and import a top-level ``tokenization`` module, so
# they only ever ran as scripts from their directory.
_BERT_SCRIPT = 'BERT research script needing TensorFlow and absl'
NOT_PROVIDED: dict[str, str] = {
    f'streaming.text.convert.enwiki.{module}': _BERT_SCRIPT
    for module in ('mds.create_pretraining_data', 'mds.tokenization', 'tfrecord.count_samples',
                   'tfrecord.create_pretraining_data', 'tfrecord.pick_eval_samples',
                   'tfrecord.tokenization')}


def _surface() -> dict:
    with open(SURFACE) as f:
        return json.load(f)


def _skipped(module: str) -> str | None:
    return NOT_PROVIDED.get(module)


def test_surface_matches_the_reference_env() -> None:
    from tests.oracle.runner import reference_env, reference_python
    python = reference_python()
    env = reference_env()
    out = subprocess.run([python, os.path.join(HERE, 'derive_surface.py')], capture_output=True,
                         text=True, env=env, cwd='/', timeout=600, check=True).stdout
    derived, committed = json.loads(out), _surface()
    # Which modules import in that env depends on the SDKs installed there, not on the surface.
    assert derived['version'] == committed['version']
    assert derived['modules'] == committed['modules']


def _modules() -> list[str]:
    """The modules we provide: the reference's, less the documented exceptions."""
    return sorted(m for m in _surface()['modules'] if _skipped(m) is None)


def test_exceptions_are_documented_and_absent() -> None:
    """What we do not provide is a documented choice, not an accident."""
    with open(os.path.join(HERE, '..', '..', 'docs', 'migrating.md')) as f:
        guide = f.read()
    surface = _surface()
    excluded = [m for m in surface['modules'] if _skipped(m) is not None]
    for module in excluded:
        assert module.rsplit('.', 1)[-1] in guide, \
            f'{module} is not provided but docs/migrating.md does not say so'
        # Only what fails to import in the reference's own env may be left out.
        assert module in surface['unimportable'], f'{module} imports in the reference'
    assert len(excluded) == len(NOT_PROVIDED)


def test_surface_is_substantial() -> None:
    surface = _surface()
    assert surface['version'] == '0.13.0'
    assert len(surface['modules']) >= 100
    assert sum(map(len, surface['modules'].values())) >= 500


@pytest.mark.parametrize('module', _modules())
def test_module_and_names_import(module: str) -> None:
    imported = importlib.import_module(module)
    missing = [name for name in _surface()['modules'][module] if not hasattr(imported, name)]
    assert missing == [], f'{module} lacks {missing}'


def test_counts_report() -> None:
    """Counts what imports, for the closing note (printed with -s)."""
    surface = _surface()['modules']
    ok_modules = ok_names = 0
    for module, names in surface.items():
        try:
            imported = importlib.import_module(module)
        except Exception:  # noqa: BLE001 - counted as missing
            continue
        ok_modules += 1
        ok_names += sum(hasattr(imported, name) for name in names)
    total_names = sum(map(len, surface.values()))
    print(f'\nreference surface: {ok_modules}/{len(surface)} modules, '
          f'{ok_names}/{total_names} names import from ours', file=sys.stderr)
    assert ok_modules > 0
