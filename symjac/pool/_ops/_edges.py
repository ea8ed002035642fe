"""Reading an input that holds NaN or ±inf: what the operators' conventions share.

The exact engine holds finite rationals only. An operator reads an x with non-finite cells
through its ``nonfinite`` rule (:meth:`symjac.pool._ops._protocol.Operator.nonfinite`): the
windows whose exact value is not finite and that value (NaN, +inf or -inf), and a finite
*proxy* of x on which its exact rules give the convention's rows (and the exact forward at
every other window). The helpers here count a window's non-finite cells and apply IEEE 754's
rules for a sum of them; each operator's module states its own convention with them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from symjac._exact import NAN, NEG_INF, POS_INF, ExactArray, _int_array, finite_part, nonfinite_codes

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry


@dataclasses.dataclass(frozen=True, eq=False)
class Counts:
    """Per window (B, W) how many of its valid cells are NaN, +inf and -inf; and the codes (B, n_in)."""

    codes: np.ndarray
    nan: np.ndarray
    pos: np.ndarray
    neg: np.ndarray

    @property
    def any(self) -> np.ndarray:
        """(B, W) windows reading a non-finite cell."""
        return np.asarray((self.nan + self.pos + self.neg) > 0)


def counts(g: Geometry, x: np.ndarray) -> Counts:
    """The non-finite cells of x (the layout's array) window by window."""
    codes = nonfinite_codes(x)
    codes_c = np.zeros((g.batch, g.n_in), dtype=np.int8) if codes is None else g.to_canonical(codes)
    gathered = g.gather(codes_c, 0)  # (B, W, K): invalid slots (padding) read as finite
    return Counts(codes_c, (gathered == NAN).sum(axis=2), (gathered == POS_INF).sum(axis=2),
                  (gathered == NEG_INF).sum(axis=2))


def sum_value(c: Counts, signed: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """IEEE 754's sum of a window's cells where one is not finite: NaN with a NaN, or with both
    infinities (``inf + -inf``); else the infinity it holds (``signed=False``: any infinity is
    +inf, as ``x^p`` of even p makes it). Returns (special (B, W), value (B, W), 0 elsewhere)."""
    if signed:
        nan = (c.nan > 0) | ((c.pos > 0) & (c.neg > 0))
        value = np.where(nan, np.nan, np.where(c.pos > 0, np.inf, np.where(c.neg > 0, -np.inf, 0.0)))
    else:
        nan = c.nan > 0
        value = np.where(nan, np.nan, np.where(c.pos + c.neg > 0, np.inf, 0.0))
    return np.asarray(c.any), np.asarray(value)


def cells_read(g: Geometry, windows: np.ndarray) -> np.ndarray:
    """(B, n_in) the cells that the windows marked in ``windows`` (B, W) read."""
    out = np.zeros((g.batch, g.n_in + 1), dtype=bool)  # column -1: what an invalid slot (cell -1) marks
    b, w = np.nonzero(windows)
    out[b[:, None], g.cells[w]] = True
    return out[:, :-1]


def proxy(g: Geometry, x: np.ndarray, fill: float = 0.0) -> tuple[np.ndarray, ExactArray]:
    """x (the layout's array) as float64 with each non-finite cell ``fill``, and exactly."""
    finite = finite_part(x, fill)
    return finite, ExactArray.from_any(finite)


def ordered(g: Geometry, x: np.ndarray, policy: str) -> tuple[np.ndarray, ExactArray, np.ndarray | None]:
    """A maximum's convention at NaN and ±inf as an order (max pooling, RoI max pooling): x (the
    layout's array) as float64 with each non-finite cell 0 (the proxy), and exactly with every finite
    value kept, +inf above them all, -inf below, NaN above +inf (``propagate``: IEEE 754-2019
    *maximum*) or below -inf (``ignore``: *maximumNumber*); and x's non-finite codes (None: none).
    A maximum taken on the exact array has the convention's tie sets and routes."""
    codes = nonfinite_codes(x)
    finite, exact = proxy(g, x)
    num = exact.num.astype(object)
    top = max((abs(int(v)) for v in num.reshape(-1).tolist()), default=0)
    if codes is not None:
        num[codes == POS_INF] = top + 1
        num[codes == NEG_INF] = -(top + 1)
        num[codes == NAN] = top + 2 if policy == "propagate" else -(top + 2)
    return finite, ExactArray(_int_array(num), exact.den), codes


def code_values(won: np.ndarray) -> np.ndarray:
    """The values of non-finite codes (:data:`NAN`, :data:`POS_INF`, :data:`NEG_INF`; 0 for finite)."""
    return np.asarray(np.select([won == NAN, won == POS_INF, won == NEG_INF], [np.nan, np.inf, -np.inf], 0.0))


@dataclasses.dataclass(frozen=True, eq=False)
class Nonfinite:
    """An operator's reading of an x with NaN or ±inf cells (its ``nonfinite`` rule).

    Attributes:
      policy: the NaN policy read (a name of the operator's ``nan_policies``).
      proxy: x (the layout's float64 array) made finite: what the operator's rules that read x's
        floats read (the exact forward at windows whose value is finite, the rounding bounds).
      exact: the proxy as the exact array the rules read: the convention's exact rows at every
        window (max pooling: an order-preserving map of x, NaN and the infinities included).
      special: (B, W) windows whose exact value is not finite; ``value`` (B, W) that value.
      free: (B, n_in) cells whose gradient the convention leaves open (any value, NaN
        included, is right there), or None.
      zero: (B, W, K) entries whose exact derivative is 0 where the proxy's is not (a limit at
        an infinity), or None.
    """

    policy: str
    proxy: np.ndarray
    exact: ExactArray
    special: np.ndarray
    value: np.ndarray
    free: np.ndarray | None = None
    zero: np.ndarray | None = None


__all__ = ["Counts", "Nonfinite", "cells_read", "code_values", "counts", "ordered", "proxy", "sum_value"]
