"""The reference's ``streaming.base.format.mds.encodings`` import path.

``_encodings`` here is the very table the library uses, so encodings registered through this
path work everywhere.
"""

from streaming.format.mds.encodings import *  # noqa: F401,F403
from streaming.format.mds.encodings import __all__, _encodings  # noqa: F401
