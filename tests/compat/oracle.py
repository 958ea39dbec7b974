"""Run a snippet of Python in the reference's env (an oracle, driven as a subprocess).

The snippet sees the reference's ``streaming`` (with the torchvision stand-in of
``tests/oracle/ref_driver.py``) and must ``emit(value)`` JSON-able results, which the call returns.

``run_cases_in_reference`` and ``run_cases_here`` run the same named snippets of user code in
both libraries (each snippet sets ``result``; an exception becomes its class names and message).
"""

from __future__ import annotations

import json
import os
import textwrap
from typing import Any

from tests.oracle.deaths import failure_log
from tests.oracle.runner import reference_run

ORACLE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'oracle')

_PRELUDE = f"""
import json, sys
sys.path.insert(0, {ORACLE_DIR!r})
import ref_driver  # noqa: installs the torchvision stand-in, imports the reference
_out = []
def emit(value):
    _out.append(value)
"""
_EPILOGUE = "\nprint('\\n@@ORACLE@@' + json.dumps(_out))\n"


def run_reference_code(code: str, cwd: str | None = None, timeout: float = 300) -> list[Any]:
    """Run ``code`` in the reference env; returns the list of values it emitted."""
    script = _PRELUDE + textwrap.dedent(code) + _EPILOGUE
    proc = reference_run(['-c', script], cwd=cwd or '/', timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f'reference snippet failed:\n{failure_log(proc.stderr)}')
    return json.loads(proc.stdout.rsplit('@@ORACLE@@', 1)[1])


# Runs every case under ``base``; returns results by case name. The same source runs here and
# in the reference's process.
_CASE_RUNNER = '''
def run_all(base):
    results = {}
    for name, code in CASES.items():
        namespace = {'root': os.path.join(base, name)}
        os.makedirs(namespace['root'])
        try:
            exec(HEADER + code, namespace)
            results[name] = namespace['result']
        except Exception as error:
            results[name] = {'raised': [c.__name__ for c in type(error).__mro__],
                             'message': str(error)[:500]}
    return results
'''


def run_cases_in_reference(cases: dict[str, str], header: str, base: str) -> dict[str, Any]:
    """Each of ``cases`` (name -> code after ``header``) run by the reference, under ``base``."""
    code = (f'import os\nCASES = json.loads({json.dumps(json.dumps(cases))})\n'
            f'HEADER = {header!r}\n' + textwrap.dedent(_CASE_RUNNER) +
            f'\nemit(run_all({base!r}))\n')
    return run_reference_code(code)[0]


def run_cases_here(cases: dict[str, str], header: str, base: str) -> dict[str, Any]:
    """The same cases run by this library, in this process (results made JSON-like)."""
    namespace: dict[str, Any] = {'CASES': cases, 'HEADER': header, 'os': os}
    exec(_CASE_RUNNER, namespace)  # noqa: S102 - the tests' own runner
    return json.loads(json.dumps(namespace['run_all'](base)))
