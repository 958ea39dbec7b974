"""A pre-imported interpreter that forks one child process per command (a "zygote").

Every reference oracle run used to be a fresh interpreter that paid 3-5 s of CPU importing
torch and the reference before doing a few milliseconds of work, and held the machine-wide
reference lock (``runner.reference_lock``) all that time. A zygote imports them once per test
worker; each command then runs in a child forked from it, with its own argv, environment,
working directory, stdin and output files, and exits as a process does (``atexit`` handlers,
the exit handlers run). The child is a separate process like a subprocess, so commands do not
share state; only the imports are shared.

Server: ``<python> zygote.py MODULE...`` imports the modules, says ``{"ready": ...}``, then
answers JSON lines on stdin: ``{"op": "spawn", "argv": [...], "env": {...}, "cwd": ...,
"stdin": path|null, "stdout": path, "stderr": path|"stdout"}`` -> ``{"pid": n}`` and
``{"op": "wait", "pid": n}`` -> ``{"returncode": n}``. ``argv`` is what follows the python
executable on a command line: ``["-c", code, ...]``, ``["-m", module, ...]`` or
``[script, ...]``. The server itself only needs the standard library.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from typing import Callable


def _child(request: dict, base_path: list[str]) -> None:
    """Become the command of ``request``; never returns."""
    import atexit
    import runpy
    import traceback
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    os.dup2(os.open(request.get('stdin') or os.devnull, os.O_RDONLY), 0)
    os.dup2(os.open(request['stdout'], flags), 1)
    if request['stderr'] == 'stdout':
        os.dup2(1, 2)
    else:
        os.dup2(os.open(request['stderr'], flags), 2)
    os.chdir(request['cwd'])
    os.environ.clear()
    os.environ.update(request['env'])
    tempfile.tempdir = None  # gettempdir() follows the command's TMPDIR
    argv = request['argv']
    code: object = 0
    try:
        if argv[0] == '-c':
            sys.argv = ['-c', *argv[2:]]
            sys.path[:] = ['', *base_path]
            exec(compile(argv[1], '<string>', 'exec'), {'__name__': '__main__'})  # noqa: S102
        elif argv[0] == '-m':
            sys.argv = [argv[1], *argv[2:]]
            sys.path[:] = [os.getcwd(), *base_path]
            runpy.run_module(argv[1], run_name='__main__', alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[:] = [os.path.dirname(os.path.abspath(argv[0])), *base_path]
            runpy.run_path(argv[0], run_name='__main__')
    except SystemExit as error:
        code = error.code
    except BaseException:  # noqa: BLE001 - reported as python would, exit status 1
        traceback.print_exc()
        code = 1
    # As a forked multiprocessing child ends: the exit handlers run, then os._exit (tearing the
    # imported modules down one object at a time would cost seconds and change nothing).
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed stream has nothing left to write
            pass
    os._exit(code)


def serve(modules: list[str]) -> None:
    """The server loop (see the module docstring)."""
    import gc
    import importlib
    base_path = sys.path[1:]  # without this file's directory
    for module in modules:
        importlib.import_module(module)
    gc.freeze()  # children's collections skip the imports (and leave their pages shared)
    # The protocol moves off fds 0 and 1, which each child points at its own files.
    requests = os.fdopen(os.dup(0), 'r')
    answers = os.fdopen(os.dup(1), 'w', buffering=1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)
    answers.write(json.dumps({'ready': modules}) + '\n')
    for line in requests:
        request = json.loads(line)
        if request['op'] == 'spawn':
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                requests.close()
                answers.close()
                _child(request, base_path)
            answers.write(json.dumps({'pid': pid}) + '\n')
        else:
            try:
                _, status = os.waitpid(request['pid'], 0)
                code = os.waitstatus_to_exitcode(status)
            except ChildProcessError:  # not a child, or already waited for
                code = None
            answers.write(json.dumps({'returncode': code}) + '\n')


class Zygote:
    """Client of one zygote server (see the module docstring); not thread-safe."""

    def __init__(self, python: str, modules: list[str], env: dict[str, str],
                 wrap: Callable[[list[str]], list[str]] | None = None) -> None:
        command = [python, os.path.abspath(__file__), *modules]
        self.proc = subprocess.Popen(wrap(command) if wrap else command,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     text=True, bufsize=1)
        ready = self.proc.stdout.readline()
        if not ready:
            self.proc.wait()
            raise RuntimeError(f'zygote {python} {modules} failed to start '
                               f'(exit status {self.proc.returncode})')

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _ask(self, request: dict, timeout: float | None = None) -> dict | None:
        self.proc.stdin.write(json.dumps(request) + '\n')
        self.proc.stdin.flush()
        if timeout is not None and not select.select([self.proc.stdout], [], [], timeout)[0]:
            return None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError('the zygote died')
        return json.loads(line)

    def spawn(self, argv: list[str], *, env: dict[str, str], cwd: str, stdout: str,
              stderr: str = 'stdout', stdin: str | None = None) -> int:
        """Start ``python *argv`` as a child; returns its pid."""
        answer = self._ask({'op': 'spawn', 'argv': argv, 'env': env, 'cwd': cwd,
                            'stdin': stdin, 'stdout': stdout, 'stderr': stderr})
        return answer['pid']

    def wait(self, pid: int, timeout: float | None = None) -> int:
        """The child's exit status (negative: killed by that signal), as ``Popen.wait``.

        On timeout the child is killed and ``subprocess.TimeoutExpired`` raised."""
        answer = self._ask({'op': 'wait', 'pid': pid}, timeout)
        if answer is None:
            os.kill(pid, signal.SIGKILL)
            self.proc.stdout.readline()  # the answer to the wait, now that it has died
            raise subprocess.TimeoutExpired(f'zygote child {pid}', timeout)
        return answer['returncode']

    def run(self, argv: list[str], *, input: str | None = None, env: dict[str, str],
            cwd: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        """Like ``subprocess.run([python, *argv], capture_output=True, text=True, ...)``."""
        with tempfile.TemporaryDirectory(prefix='zygote-') as scratch:
            paths = {name: os.path.join(scratch, name) for name in ('in', 'out', 'err')}
            with open(paths['in'], 'w') as f:
                f.write(input or '')
            pid = self.spawn(argv, env=env, cwd=cwd, stdin=paths['in'], stdout=paths['out'],
                             stderr=paths['err'])
            returncode = self.wait(pid, timeout)
            with open(paths['out'], errors='replace') as out, \
                    open(paths['err'], errors='replace') as err:
                return subprocess.CompletedProcess(argv, returncode, out.read(), err.read())

    def close(self) -> None:
        if self.alive():
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except Exception:  # noqa: BLE001
                self.proc.kill()


_ZYGOTES: dict[tuple, Zygote] = {}


def zygote(python: str, modules: list[str], env: dict[str, str],
           wrap: Callable[[list[str]], list[str]] | None = None) -> Zygote:
    """This process's zygote of ``python`` with ``modules`` imported (started on first use,
    again if it died; stopped at exit). ``env`` is the server's own environment, taken at its
    start (each command passes its own); ``wrap`` turns the server's command line into the one
    to run (e.g. inside a private ``/dev/shm``: its children all inherit it)."""
    import atexit
    key = (python, tuple(modules), wrap)
    found = _ZYGOTES.get(key)
    if found is None or not found.alive():
        if not _ZYGOTES:
            atexit.register(lambda: [z.close() for z in _ZYGOTES.values()])
        found = _ZYGOTES[key] = Zygote(python, modules, env, wrap)
    return found


if __name__ == '__main__':
    serve(sys.argv[1:])
