"""Argument parsing and dispatch for the ``streaming`` command; errors become exit codes.

Exit codes: 0 success, 1 a problem was found or an operation failed (the message names the file,
URL or argument), 2 bad usage (from argparse). Every failure is one line on stderr,
``streaming SUBCOMMAND: error: ...``; ``--debug`` (or ``STREAMING_DEBUG=1``) lets the exception
propagate with its traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType
from typing import Any, Sequence

from streaming._version import __version__

__all__ = ['COMMANDS', 'DEBUG_ENV', 'main', 'register_command']

DEBUG_ENV = 'STREAMING_DEBUG'  # set to 1: failures show their traceback (as --debug)
_DEBUG_HELP = f'on failure, show the full traceback instead of one line (or set {DEBUG_ENV}=1)'

# Subcommand -> module (imported when that subcommand runs, so ``--help`` stays fast).
COMMANDS: dict[str, str] = {
    'inspect': 'streaming.cli.inspect',
    'validate': 'streaming.cli.validate',
    'merge': 'streaming.cli.merge',
    'convert': 'streaming.cli.convert',
    'cp': 'streaming.cli.cp',
    'cost': 'streaming.cli.cost',
    'clean': 'streaming.cli.clean',
    'index': 'streaming.cli.index',
    'plan': 'streaming.cli.plan',
}


def register_command(name: str, module: str | ModuleType | None) -> None:
    """Add (or, with None, remove) subcommand ``name``, given as a module or its dotted name."""
    if module is None:
        COMMANDS.pop(name, None)
    else:
        COMMANDS[name] = module  # type: ignore[assignment]


def _plugins() -> dict[str, Any]:
    from importlib.metadata import entry_points
    return {ep.name: ep.value for ep in entry_points(group='streaming.cli')}


def _load(spec: str | ModuleType) -> ModuleType:
    return importlib.import_module(spec) if isinstance(spec, str) else spec


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one sub-parser per registered subcommand."""
    parser = argparse.ArgumentParser(
        prog='streaming', description='Inspect, validate, convert, copy and manage streaming '
        'datasets (MDS, JSON, CSV/TSV/XSV shards; Parquet, JSONL, WebDataset tar and Arrow files) '
        'on local disk or object storage.')
    parser.add_argument('--version', action='version', version=f'%(prog)s {__version__}')
    parser.add_argument('--debug', action='store_true', dest='debug_all', help=_DEBUG_HELP)
    sub = parser.add_subparsers(dest='command', metavar='COMMAND')
    commands = {**_plugins(), **COMMANDS}
    for name in sorted(commands):
        module = _load(commands[name])
        doc = (module.__doc__ or '').strip()
        cmd = sub.add_parser(name, help=module.HELP, description=doc or module.HELP,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        cmd.add_argument('--json', action='store_true',
                         help='print the result as JSON on stdout (for scripts)')
        cmd.add_argument('--no-progress', action='store_true', help='no progress bar on stderr')
        cmd.add_argument('--debug', action='store_true', help=_DEBUG_HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    debug = args.debug_all or getattr(args, 'debug', False) or \
        os.environ.get(DEBUG_ENV, '').strip().lower() not in ('', '0', 'false', 'no')
    try:
        return int(args._module.run(args) or 0)
    except BrokenPipeError:  # Output piped into a reader that stopped early (| head).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        if debug:
            raise
        print(f'streaming {args.command}: interrupted', file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - every failure becomes one line (see above)
        if debug:
            raise
        print(f'streaming {args.command}: error: {_one_line(error)}', file=sys.stderr)
        return 1


def _one_line(error: Exception) -> str:
    """The message of a failure, on one line.

    The errors raised on purpose (ours, and the OSError/ValueError/... of bad input) carry a
    message naming the file, URL or argument; anything else is a defect, reported with its type
    and the way to see where it happened.
    """
    from streaming.cli.common import CLIError
    from streaming.errors import StreamingError
    if isinstance(error, KeyError) and error.args:
        text = str(error.args[0])
    else:
        text = str(error) or type(error).__name__
    if not isinstance(error, (CLIError, StreamingError, OSError, ValueError, KeyError,
                              RuntimeError, ImportError)):
        text = f'{type(error).__name__}: {text} (an internal error: run with --debug for the ' \
               f'traceback, and please report it)'
    return ' '.join(line.strip() for line in text.splitlines() if line.strip())
