"""The documented path of the offline route (``python -m symjac.frameworks._offline``,
``from symjac.frameworks._offline import run_offline``): this module *is*
:mod:`symjac.frameworks.native._offline` (bound to it in ``sys.modules``), and run as a
script it runs that module's command line."""

import sys

from symjac.frameworks.native import _offline as _route
from symjac.frameworks.native._offline import *  # noqa: F403  (the names type checkers see)

if __name__ == "__main__":
    raise SystemExit(_route.main())
sys.modules[__name__] = _route
