"""The reference's ``streaming.base.hashing`` import path."""

from streaming.format.hashing import *  # noqa: F401,F403
from streaming.format.hashing import __all__  # noqa: F401
