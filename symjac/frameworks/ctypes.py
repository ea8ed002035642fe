"""The documented import path of the native ctypes route: this module *is*
:mod:`symjac.frameworks.native.ctypes` (the name is bound to it in ``sys.modules``), so
``import symjac.frameworks.ctypes`` keeps working and both names see one module."""

import sys

from symjac.frameworks.native import ctypes as _route
from symjac.frameworks.native.ctypes import *  # noqa: F403  (the names type checkers see)

sys.modules[__name__] = _route
