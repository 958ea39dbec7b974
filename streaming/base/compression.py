"""The reference's ``streaming.base.compression`` import path."""

from streaming.format.compression import *  # noqa: F401,F403
from streaming.format.compression import __all__  # noqa: F401
