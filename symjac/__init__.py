"""symjac: prove that a layer's backward pass is the exact derivative of its forward.

SymPy builds the exact forward expression of every pooling window, derives the
exact Jacobian once per window class, and lowers it to NumPy.
"""

from ._errors import InputError, SpecError, SymjacError, VerificationError
from .geometry import Geometry, resolve
from .jacobian import SparseJacobian, expressions, forward, jacobian, tie_sets, vjp
from .lowering import Lowered, lower
from .spec import AdaptivePool, GlobalPool, Pool

__version__ = "0.1.0"

__all__ = [
    "AdaptivePool",
    "Geometry",
    "GlobalPool",
    "InputError",
    "Lowered",
    "Pool",
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
    "vjp",
]
