"""Derive the reference's public surface: every module under its ``streaming`` package and the
public names of each (``__all__`` when defined, else the public top-level names that are not
modules and not imported from outside ``streaming``).

Run with the REFERENCE env's python (never ours), from any directory but this tree's root:
``env -u PYTHONPATH $(bash scripts/reference_env.sh) tests/compat/derive_surface.py [out.json]``.
Writes a JSON object ``{"version": ..., "modules": {module: [names...]}}`` (stdout without a
path). Modules that cannot be imported in the reference env itself (a missing optional SDK) are
listed under ``"unimportable"`` with the error, and their names are read from the source.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import json
import os
import pkgutil
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
# Never derive from our own tree: drop this repository from sys.path before importing.
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) not in (ROOT, HERE)]
sys.path.append(os.path.join(ROOT, 'tests', 'oracle'))

from ref_driver import install_torchvision_stand_in  # noqa: E402,F401  (installs on import)

# The reference's CIFAR-10 converter imports torchvision's dataset class at module level.
sys.modules['torchvision.datasets'].CIFAR10 = type('CIFAR10', (), {})


# Values of these types are typing or import machinery, never a user-facing name.
SKIP_TYPES = ('typing', 'typing_extensions', 'types', '__future__', 'logging')


def public_names(module: types.ModuleType) -> list[str]:
    """The names a user may import from ``module``: its ``__all__`` plus the public classes and
    functions it defines itself (the MDS encoding classes are not in ``__all__``), or without
    ``__all__`` every public top-level name not imported from outside ``streaming``."""
    explicit = getattr(module, '__all__', None)
    names = set(explicit or [])
    for name, value in vars(module).items():
        if name.startswith('_') or name == 'TYPE_CHECKING' or isinstance(value, types.ModuleType):
            continue
        if inspect.isclass(value) or inspect.isroutine(value):
            owner = str(getattr(value, '__module__', ''))
            if owner == module.__name__ or (explicit is None and owner.startswith('streaming')):
                names.add(name)
        elif explicit is None and type(value).__module__ not in SKIP_TYPES:
            names.add(name)  # A constant or registry.
    return sorted(names)


def static_names(path: str) -> list[str]:
    """Public top-level names of a module the reference env cannot import, read from its
    source: ``__all__`` if it is a literal, else the defined functions, classes and constants."""
    with open(path) as f:
        tree = ast.parse(f.read())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    if target.id == '__all__':
                        return sorted(ast.literal_eval(node.value))
                    names.add(target.id)
    return sorted(n for n in names if not n.startswith('_'))


def derive() -> dict:
    import streaming
    assert streaming.__file__ and not streaming.__file__.startswith(ROOT), streaming.__file__
    modules: dict[str, list[str]] = {'streaming': public_names(streaming)}
    unimportable: dict[str, str] = {}
    failed: list[str] = []
    walk = pkgutil.walk_packages(streaming.__path__, 'streaming.', onerror=failed.append)
    for info in sorted(walk, key=lambda m: m.name):
        if info.name.rsplit('.', 1)[-1].startswith('_'):
            continue
        try:
            module = importlib.import_module(info.name)
        except Exception as error:  # Reported in the output: an optional SDK the env lacks.
            unimportable[info.name] = f'{type(error).__name__}: {error}'
            spec = importlib.util.find_spec(info.name)
            origin = spec.origin if spec else None
            modules[info.name] = static_names(origin) if origin else []
            continue
        modules[info.name] = public_names(module)
    for name in failed:
        unimportable.setdefault(name, 'walk failed')
    return {'version': streaming.__version__, 'modules': modules, 'unimportable': unimportable}


def main() -> None:
    text = json.dumps(derive(), indent=1, sort_keys=True) + '\n'
    if len(sys.argv) > 1:
        with open(sys.argv[1], 'w') as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == '__main__':
    main()
