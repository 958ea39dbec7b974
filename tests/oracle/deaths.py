"""Why a launched process died, kept in the error a test raises about it.

A DataLoader worker that dies without a Python exception (a signal, or an exit code from C)
leaves one line in its rank's log, inside the traceback torch raises: "DataLoader worker (pid
N) is killed by signal: ..." or "... exited unexpectedly with exit code N". Quoting only the
end of a long log can cut that line (main's CI at 9d5a408 did). So the processes these tests
launch run with ``PYTHONFAULTHANDLER=1`` (a fault prints every thread's Python stack, in
DataLoader workers too: they inherit it), and ``failure_log`` quotes such lines first, then
the log's end.
"""

from __future__ import annotations

__all__ = ['failure_log', 'with_fault_handler']

# Lines that say why a process (or one of its DataLoader workers) died.
_CAUSES = ('exited unexpectedly', 'is killed by signal', 'encountered in worker',
           'Fatal Python error', 'Killed', 'Segmentation fault', 'Bus error', 'Aborted')
_STACK_LINES = 60  # Of a fault handler's dump, after its "Fatal Python error" line.


def with_fault_handler(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a launched process: a fault prints its Python stacks (``faulthandler``)."""
    return {**env, 'PYTHONFAULTHANDLER': '1'}


def failure_log(text: str, tail: int = 4000) -> str:
    """A failed process's log for an error message: the causes of death found in it (with a
    fault handler's stacks), then its last ``tail`` characters."""
    lines = text.splitlines()
    causes: list[str] = []
    for number, line in enumerate(lines):
        if any(cause in line for cause in _CAUSES) and line not in causes:
            causes.append(line)
            if 'Fatal Python error' in line:
                causes.extend(lines[number + 1:number + 1 + _STACK_LINES])
    if not causes:
        return text[-tail:]
    return ('why a process died (lines of its log):\n' + '\n'.join(causes) +
            f'\n---- the end of the log ----\n{text[-tail:]}')
