"""No import cycles between the modules of ``streaming/``.

Every ``import`` and ``from ... import`` in the package is read with ``ast`` (top-level and
function-local alike: a lazy import still ties two modules together), resolved to the module it
names inside ``streaming``, and the resulting graph must be acyclic. A package's ``__init__``
counts as its own module; importing ``a.b`` depends on ``a.b`` (and, through Python's import
machinery, on ``a``'s ``__init__``, which is not counted: an ``__init__`` that re-exports its
submodules would otherwise be a cycle by construction).
"""

from __future__ import annotations

import ast
import os

import streaming

ROOT = os.path.dirname(streaming.__file__)


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, '.')
    return rel[:-len('.__init__')] if rel.endswith('.__init__') else rel


def _modules() -> dict[str, str]:
    found = {}
    for folder, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith('.py'):
                path = os.path.join(folder, name)
                found[_module_name(path)] = path
    return found


def _resolve(target: str, modules: dict[str, str]) -> str | None:
    """The longest prefix of ``target`` that is a module of the package."""
    parts = target.split('.')
    while parts:
        name = '.'.join(parts)
        if name in modules:
            return name
        parts.pop()
    return None


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.endswith('__init__.py')
        package = name if is_package else name.rpartition('.')[0]
        with open(path) as file:
            tree = ast.parse(file.read(), path)
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ''
                if node.level:
                    anchor = package.split('.')
                    anchor = anchor[:len(anchor) - node.level + 1]
                    base = '.'.join(anchor + ([base] if base else []))
                # `from pkg import sub` imports the submodule when there is one.
                targets = [f'{base}.{alias.name}' for alias in node.names] or [base]
            for target in targets:
                if not target.startswith('streaming'):
                    continue
                resolved = _resolve(target, modules)
                if resolved and resolved != name:
                    graph[name].add(resolved)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _is_reexport(importer: str, imported: str) -> bool:
    """An ``__init__`` importing its own submodules (re-exports): not a dependency cycle."""
    return imported.startswith(importer + '.')


def test_no_import_cycles_inside_streaming() -> None:
    graph = import_graph()
    graph = {mod: {dep for dep in deps if not _is_reexport(mod, dep)}
             for mod, deps in graph.items()}
    cycles = find_cycles(graph)
    assert not cycles, 'import cycles inside streaming/:\n' + '\n'.join(
        ' <-> '.join(cycle) for cycle in cycles)


def test_cycle_finder_sees_a_cycle() -> None:
    graph = {'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}
    assert find_cycles(graph) == [['a', 'b', 'c']]
    assert find_cycles({'a': {'b'}, 'b': set()}) == []


# The layers of docs/architecture.md: each unit (a top-level module or package of streaming/)
# and the units it may import. Anything not listed here may import nothing of ours.
FOUNDATION = {'_version', '_lazy', 'errors', 'fileio', 'util', 'indexing', 'world', 'registry',
              'telemetry'}
ALLOWED = {
    'errors': set(), 'fileio': set(), '_version': set(), '_lazy': set(), 'indexing': set(),
    'registry': set(), 'telemetry': set(),
    'util': {'errors'}, 'world': {'errors'},
    'coord': FOUNDATION,
    'format': FOUNDATION | {'coord'},
    'storage': FOUNDATION | {'coord'},
    'order': FOUNDATION,
    'sources': FOUNDATION | {'format', 'storage'},
    'writing': FOUNDATION | {'format', 'storage'},
    'merge': FOUNDATION | {'format', 'storage'},
    'dataset_dir': FOUNDATION | {'format', 'storage'},
    'local_dataset': FOUNDATION | {'format'},
    'cache': FOUNDATION | {'format', 'storage', 'order', 'coord'},
    'dataset': FOUNDATION | {'format', 'storage', 'order', 'coord', 'cache', 'sources'},
    'dataloader': FOUNDATION | {'dataset'},
    'tokens': FOUNDATION | {'format', 'storage', 'coord', 'local_dataset'},
}
# The tools and the compatibility layer sit on top and may import any layer below them.
TOP = {'__init__', '__main__', 'cli', 'convert', 'plan', 'base', 'text', 'vision', 'multimodal'}


def _unit(module: str) -> str:
    parts = module.split('.')
    return parts[1] if len(parts) > 1 else '__init__'


def test_imports_point_down_the_layers() -> None:
    upward = []
    for module, deps in import_graph().items():
        unit = _unit(module)
        if unit in TOP:
            continue
        assert unit in ALLOWED, f'{unit} (streaming/{unit}) has no layer in ALLOWED: add it'
        for dep in deps:
            target = _unit(dep)
            if target != unit and target not in ALLOWED[unit]:
                upward.append(f'{module} -> {dep}')
    assert not upward, 'imports against the layers of docs/architecture.md:\n' + '\n'.join(
        sorted(upward))
