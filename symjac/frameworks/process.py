"""The documented import path of the native process route: this module *is*
:mod:`symjac.frameworks.native.process` (the name is bound to it in ``sys.modules``), so
``import symjac.frameworks.process`` keeps working and both names see one module."""

import sys

from symjac.frameworks.native import process as _route
from symjac.frameworks.native.process import *  # noqa: F403  (the names type checkers see)

sys.modules[__name__] = _route
