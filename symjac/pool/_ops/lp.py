"""Power-average (lp) pooling: y = (Σ x^p)^(1/p) over the window (PyTorch ``lp_pool``).

Registered with its flags; its rules are still read from :mod:`symjac.pool._lp` and
:mod:`symjac.verifiers._pool_lp` by the stages that name it.
"""

from __future__ import annotations

from symjac.pool._ops._protocol import Operator


class Lp(Operator):
    """lp pooling (:class:`symjac.Pool` only: PyTorch's lp_pool geometry)."""

    name = "lp"
    any_geometry = False
    tie_family = True  # its all-zero windows are its nonsmooth points
    rational = False
    finite_differences = False
    extra_families = False
    second_derivative_zero = False


LP = Lp()
