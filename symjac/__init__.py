"""symjac: prove that a layer's backward pass is the exact derivative of its forward.

SymPy builds the exact forward expression of every pooling window, derives the
exact Jacobian once per window class, and lowers it to NumPy.
"""

from ._errors import InputError, SpecError, SymjacError, VerificationError
from .geometry import Geometry, resolve
from .graph import probe_plan, window_graph
from .jacobian import SparseJacobian, expressions, forward, jacobian, tie_sets, vjp
from .lowering import Lowered, lower
from .report import Finding, Report
from .spec import AdaptivePool, GlobalPool, Pool
from .verify import verify
from . import testing

__version__ = "0.1.0"

__all__ = [
    "AdaptivePool",
    "Geometry",
    "GlobalPool",
    "InputError",
    "Lowered",
    "Pool",
    "Finding",
    "Report",
    "SparseJacobian",
    "SpecError",
    "SymjacError",
    "VerificationError",
    "expressions",
    "forward",
    "jacobian",
    "lower",
    "resolve",
    "tie_sets",
    "probe_plan",
    "testing",
    "verify",
    "vjp",
    "window_graph",
]
