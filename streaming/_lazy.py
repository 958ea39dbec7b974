"""Names of a package imported on first access (PEP 562), so importing it stays light."""

from __future__ import annotations

import importlib
from typing import Any


def load_lazy(namespace: dict[str, Any], table: dict[str, str], name: str) -> Any:
    """The package's public ``name``, imported from the module ``table`` gives for it.

    The value is kept in the package's ``namespace`` (its ``globals()``): imported once.
    """
    module = table.get(name)
    if module is None:
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value
