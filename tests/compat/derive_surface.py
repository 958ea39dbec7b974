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
    source: ``__all__`` if it is a literal, else the defined functions, classes and constants
    and the names imported from ``streaming`` (as ``public_names`` finds them on import)."""
    with open(path) as f:
        tree = ast.parse(f.read())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.ImportFrom) and (node.module or '').startswith('streaming'):
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    if target.id == '__all__':
                        return sorted(ast.literal_eval(node.value))
                    names.add(target.id)
    return sorted(n for n in names if not n.startswith('_'))


def module_names(root: str) -> list[str]:
    """Every public module and package under the package directory ``root`` (from the files,
    so a package that fails to import still shows its submodules)."""
    names = []
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(('_', '.')) and
                             os.path.exists(os.path.join(dirpath, d, '__init__.py')))
        rel = os.path.relpath(dirpath, os.path.dirname(root)).replace(os.sep, '.')
        for name in files:
            if name.endswith('.py') and not name.startswith('_'):
                names.append(f'{rel}.{name[:-3]}')
        if rel != 'streaming':
            names.append(rel)
    return names


def derive() -> dict:
    import streaming
    assert streaming.__file__ and not streaming.__file__.startswith(ROOT), streaming.__file__
    modules: dict[str, list[str]] = {'streaming': public_names(streaming)}
    unimportable: dict[str, str] = {}
    for name in sorted(module_names(streaming.__path__[0])):
        try:
            module = importlib.import_module(name)
        except Exception as error:  # Reported in the output: an optional SDK the env lacks.
            unimportable[name] = f'{type(error).__name__}: {error}'
            spec = importlib.util.find_spec(name.rpartition('.')[0])
            base = os.path.dirname(spec.origin) if spec and spec.origin else None
            leaf = name.rpartition('.')[2]
            path = os.path.join(base, leaf, '__init__.py') if base else ''
            if base and not os.path.exists(path):
                path = os.path.join(base, leaf + '.py')
            modules[name] = static_names(path) if os.path.exists(path) else []
            continue
        modules[name] = public_names(module)
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
