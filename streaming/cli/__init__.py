"""The ``streaming`` command: ``streaming SUBCOMMAND ...`` (also ``python -m streaming``).

Each subcommand is a module with ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int`` (the exit code). Built-in subcommands are listed in ``COMMANDS`` and
imported only when run; add your own with ``register_command`` or through the entry-point
group ``streaming.cli`` (name = subcommand, value = ``package.module``). See
``docs/extending/cli-command.md``.
"""

from streaming.cli.main import COMMANDS, main, register_command

__all__ = ['COMMANDS', 'main', 'register_command']
