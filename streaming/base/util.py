"""The reference's ``streaming.base.util`` import path."""

from streaming.merge import merge_index
from streaming.util import bytes_to_int, get_list_arg, number_abbrev_to_int, retry


def clean_stale_shared_memory() -> None:
    """Do nothing; kept for compatibility.

    This library leaves no stale shared memory behind, so there is nothing to clean.
    """


__all__ = ['bytes_to_int', 'clean_stale_shared_memory', 'get_list_arg', 'merge_index',
           'number_abbrev_to_int', 'retry']
