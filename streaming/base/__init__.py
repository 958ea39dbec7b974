"""The reference's ``streaming.base`` import path, kept so existing code keeps working."""

from streaming import *  # noqa: F401,F403
from streaming import __all__, __getattr__  # noqa: F401
