"""The reference's ``streaming.base.util``: parsing, retry, file waits and index merging."""

from __future__ import annotations

import os
import time

from streaming.merge import merge_index
from streaming.util import bytes_to_int, get_list_arg, number_abbrev_to_int, retry

__all__ = ['bytes_to_int', 'clean_stale_shared_memory', 'get_import_exception_message',
           'get_list_arg', 'merge_index', 'number_abbrev_to_int', 'retry',
           'wait_for_file_to_exist']


def clean_stale_shared_memory() -> None:
    """Remove the shared state left behind by dataset processes that are gone.

    This library sweeps it by itself whenever a dataset is created, so calling this is never
    needed; it does the same sweep now.
    """
    from streaming.coord import sweep_stale
    sweep_stale()


def get_import_exception_message(package_name: str, extra_deps: str) -> str:
    """The message for a missing optional dependency ``package_name``.

    It names the extra that provides it.
    """
    return (f'The optional dependency {package_name} is not installed; install it with '
            f"`pip install 'shardflow[{extra_deps}]'`.")


def wait_for_file_to_exist(filename: str, poll_interval: float, timeout: float,
                           err_msg: str) -> None:
    """Wait until ``filename`` exists, checking every ``poll_interval`` seconds.

    Raises RuntimeError (``err_msg`` and the time waited) after ``timeout`` seconds.
    """
    start = time.monotonic()
    while not os.path.exists(filename):
        waited = time.monotonic() - start
        if waited > timeout:
            raise RuntimeError(f'{err_msg} (waited {waited:.3f} s for {filename}, timeout '
                               f'{timeout:.3f} s).')
        time.sleep(poll_interval)
