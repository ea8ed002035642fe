"""Max pooling: y = Max(window), derivative Heaviside(a - r): one-hot off ties, a Clarke set at ties.

The template ``Max(a, r)`` is differentiated once by SymPy (``Heaviside(a - r)``,
:func:`symjac.pool._ties.max_pair`); its argument lowered to NumPy finds every
window's tie set, and a tie policy picks the Jacobian element there: ``first`` /
``last`` (row-major; PyTorch, TF, JAX, ONNX Runtime route to the first), ``split``
(1/|I| to each tied cell, the minimal-norm Clarke element) or the β family
``β·J_split + (1 − β)·J_first`` (:class:`symjac.Beta`, :mod:`symjac.pool._beta`).
Off ties the Jacobian is piecewise constant: JVP and VJP are one stamp applied both
ways, and the second derivative is zero.

Rounding: the forward is exact in any float dtype (a max rounds nothing), the
Jacobian's entries 0/1 (split: 1/|I|). Inputs: the tie input (exact ties), the
all-negative family where windows touch padding (a zero-padded max is wrong there),
near-ties, and the extreme family: negative values near the dtype's lowest (a maximum
started from a finite sentinel such as -1e30, or float32's lowest in a float64 kernel, wins
over them). With ``Pool(pad_value=0)`` pad cells hold the constant 0 and compete.

Non-finite inputs (:meth:`Max.nonfinite`): +inf and -inf are ordered values (a window's
maximum may be either; one of -inf cells only is -inf, and its gradient a tie among them). A
NaN is read by one of two policies, as measured (float32/64, torch 2.13, JAX 0.10, TensorFlow
2.21, ONNX Runtime 1.2x; ``tests/test_nonfinite_frameworks.py``):

- ``propagate`` (the default; IEEE 754-2019 *maximum*, NumPy's ``max``): NaN is above every
  value, so a window holding one has the value NaN and its gradient goes to a NaN cell, any
  of several by the tie policy. PyTorch follows it: its backward picks the *last* NaN cell
  (``[nan, nan, 1]`` -> ``[0, 1, 0]``), which the report names (``nonfinite_tie_policy``).
- ``ignore`` (IEEE 754-2019 *maximumNumber*, C's ``fmax``): NaN is below every value, so a
  window's value is the maximum of its other cells (NaN only where every cell is NaN) and
  its gradient goes there.

The forward decides which one an implementation follows (a backward alone is checked under
``propagate``). Measured defects: JAX's forward propagates NaN but its backward routes by
``select(ge)`` (``[nan, 1, 2]`` -> the 2, ``[inf, nan, 1]`` -> the 1); TensorFlow's forward
ignores NaN, gives ``-max`` for a window of -inf, and its backward sends some NaN windows'
gradient to the NaN cell (``[nan, 1, 2]`` -> ``y = 2``, ``dx = [1, 0, 0]``); ONNX Runtime's
MaxPool ignores NaN and gives ``-max`` for -inf windows as TensorFlow does, and asked for its
``Indices`` too (another kernel) propagates a NaN only from a window's first cell
(``[nan, 1, 2]`` -> NaN, ``[1, nan, 2]`` -> 2): the value of a window depends on where its NaN
sits, which no policy allows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._errors import SpecError
from symjac._exact import ExactArray, _int_array, nonfinite_codes
from symjac._lastaxis import any_last, count_last
from symjac.check._report import fmt_index, listing
from symjac.check._rounding import finfo, gamma
from symjac.pool._beta import Beta, lincomb
from symjac.pool._ops._edges import Nonfinite, code_values, ordered
from symjac.pool._ops._stamped import StampedOperator
from symjac.pool._stamp import Stamp, apply
from symjac.pool._symbolic import Template, lines
from symjac.pool._ties import (
    clear_caches,
    max_members,
    max_route,
    max_support,
    max_template,
    pad_cells,
)
from symjac.pool._beta_fit import beta_name
from symjac.pool._beta_fit import outside_clarke as beta_outside_clarke
from symjac.pool._rows import ExactRows, Rows, stamp_rows

if TYPE_CHECKING:
    from symjac.check._report import Finding
    from symjac.pool._geometry import Geometry
    from symjac.pool._spec import Pool


class Max(StampedOperator):
    """Max pooling (:class:`symjac.Pool`, :class:`symjac.AdaptivePool`, :class:`symjac.GlobalPool`)."""

    name = "max"
    samples: tuple[dict[str, Any], ...] = ({}, {"padding": 1, "pad_value": 0}, {"padding": "same", "dilation": 2})
    nan_policies = ("propagate", "ignore")
    ties = True
    tie_family = True
    reuses_exact_input = True
    graph_needs_x = True
    explain_note = ("Heaviside(0), at a tie (a window's maximum attained by several cells): the derivative is not "
                    "unique there: symjac's check accepts any Clarke subgradient, a convex combination of the tied "
                    "cells (first, last, split, ...); the spec's [operator] option tie = \"first\" | \"last\" | "
                    "\"split\" | \"beta:<b>\" picks one (unset: golden data and [expect] use \"first\"; "
                    "docs/spec-files.md)")

    # -- spec ----------------------------------------------------------------------
    def check_divisor(self, spec: Pool, divisor: str | int) -> None:
        if divisor != "exclude_pad":
            raise SpecError(f"divisor={spec.divisor!r} is only meaningful for mode='avg'; "
                            "leave it unset for max pooling")

    def check_pad_value(self, spec: Pool) -> None:
        """``pad_value=0`` is max pooling's: pad cells hold 0 and take part in the max."""

    # -- symbolic and exact ----------------------------------------------------------
    def template(self, spec: Any, n: int, divisor: int) -> Template:
        return max_template(n, divisor)

    def with_pad_cells(self, expr: sympy.Expr) -> sympy.Expr:
        """Pad cells hold 0 and take part in the max: ``Max(0, ...)``."""
        return sympy.Max(sympy.Integer(0), expr)

    def clear_caches(self) -> None:
        clear_caches(templates=True)

    def stamp(self, g: Geometry, x: ExactArray | None, tie: str) -> Stamp:
        """The tie policy's element at x: one slot a window (first/last, found axis by axis:
        no (batch, windows, K) array) or the split over each tie set."""
        x = self.require_x(x)
        xc = g.to_canonical(x.num)
        if tie in ("first", "last"):
            slot, _, cell = max_route(g, xc, tie)
            return Stamp(g, np.ones(slot.shape, dtype=np.int64), 1, slot=slot, cell=cell)
        support, weight, q = max_support(g, xc, tie)  # split: any number of slots a window
        return Stamp(g, weight, q, mask=support)

    def exact_forward(self, g: Geometry, x: ExactArray) -> ExactArray:
        """Each window's maximum, found axis by axis with its first maximal slot
        (:func:`symjac.pool._ties.max_route`, cached for x)."""
        top = max_route(g, g.to_canonical(x.num), "first")[1]  # (B, W); 0 where a pad cell of pad_value=0 wins
        return ExactArray(_int_array(g.from_canonical(top, g.out_spatial)), x.den)

    # -- rounding model --------------------------------------------------------------
    def rows(self, g: Geometry, x: np.ndarray, dtype: np.dtype[Any], exact_of: Callable[[], ExactArray]) -> ExactRows:
        """Policy-"first" rows (0/1, exact in every dtype) and the tie sets."""
        ex = exact_of()
        member = max_members(g, g.to_canonical(ex.num), pads=True)
        pads = pad_cells(g)
        if pads is not None:  # pad cells hold 0 and compete for the max too
            pad_tied = any_last(member & pads)
            member = member & g.valid
        else:
            pad_tied = np.zeros(member.shape[:2], dtype=bool)
        return stamp_rows(g, self.stamp(g, ex, "first"), dtype, member, pad_tied)

    # -- lowering --------------------------------------------------------------------
    def lower_forward(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """The template's ``Max``, one line of the grid at a time."""
        xc = g.to_canonical(x)
        acc = np.full((g.batch, g.n_out), -np.inf, dtype=x.dtype)
        for line in lines(g):
            values = xc[:, line.cells]
            if line.window is None:
                acc[:, line.w] = np.maximum(acc[:, line.w], values)
            else:
                acc[:, line.window] = np.maximum(acc[:, line.window], np.maximum.reduce(values, axis=1))
        pads = pad_cells(g)
        if pads is not None:  # Pool(pad_value=0): a window holding pad cells has 0 among its values
            acc = np.where(pads.any(axis=1), np.maximum(acc, x.dtype.type(0)), acc)
        return g.from_canonical(acc)

    def lower_vjp(self, g: Geometry, x: np.ndarray, dy: np.ndarray, tie: str) -> np.ndarray:
        """Each window's dy to its tie policy's maximal cells (at NaN and ±inf: by the ``propagate`` order)."""
        xc, dyc = g.to_canonical(x), g.to_canonical(dy, g.out_spatial)
        dx = np.zeros((g.batch, g.n_in), dtype=x.dtype)
        if nonfinite_codes(x) is not None:  # NaN compares with nothing: route by the convention's order
            xc = g.to_canonical(self.nonfinite(g, x, "propagate").exact.num)
        support, weight, q = max_support(g, xc, tie)
        up = dyc if q == 1 else dyc * (weight / q).astype(x.dtype)
        for line in lines(g):
            dx[:, line.cells] += np.where(support[:, line.w, line.k], up[:, line.w], x.dtype.type(0))
        return g.from_canonical(dx, g.in_spatial)

    # -- inputs ------------------------------------------------------------------------
    def families(self, g: Geometry, touches_padding: bool) -> tuple[str, ...]:
        """All-negative inputs where windows touch padding (a zero-padded max wins there), near-ties (routing),
        the deterministic orders that decide routing whatever the seed (a wrong window's maximum), extreme
        negative values (a finite sentinel wins over them) and NaN and ±inf (the module's convention)."""
        return (("all_negative",) if touches_padding else ()) + ("near_ties", "orders", "extreme", "nonfinite")

    def extreme_magnitude(self, g: Geometry, dtype: np.dtype[Any]) -> tuple[float, str]:
        """Negative values near the dtype's lowest: below any finite sentinel a kernel might start from."""
        return float(finfo(dtype).max), "-"

    # -- non-finite inputs -------------------------------------------------------------
    def nonfinite(self, g: Geometry, x: np.ndarray, policy: str) -> Nonfinite:
        """The module's convention as an order: the proxy keeps every finite value, puts +inf above
        them (and above a pad cell's 0), -inf below, and NaN above +inf (``propagate``) or below -inf
        (``ignore``), so its tie sets and routes are the convention's; a window's value is not finite
        where its maximal cell (the first) is not."""
        finite, read, codes = ordered(g, x, policy)
        cell = max_route(g, g.to_canonical(read.num), "first")[2]
        codes_c = np.zeros((g.batch, g.n_in + 1), dtype=np.int8)
        if codes is not None:
            codes_c[:, :-1] = g.to_canonical(codes)
        won = codes_c[np.arange(g.batch)[:, None], cell]  # cell -1 (a pad cell won) reads the finite column
        value = code_values(won)
        return Nonfinite(policy, finite, read, np.asarray(won != 0), np.asarray(value))

    def nonfinite_note(self, policy: str) -> str:
        if policy == "ignore":
            return ("max pooling's NaN policy 'ignore' (IEEE 754-2019 maximumNumber, C's fmax): a window is the "
                    "maximum of its cells other than NaN, its gradient goes there; ±inf are ordered values")
        return ("max pooling's NaN policy 'propagate' (IEEE 754-2019 maximum, as PyTorch's): a window holding NaN "
                "is NaN, its gradient goes to a NaN cell; ±inf are ordered values")

    # -- diagnosis ---------------------------------------------------------------------
    def clarke_ok(self, g: Geometry, rows: Rows, exact: ExactRows, u: float) -> np.ndarray:
        """The row lies in the convex hull of the tie set's vertices (with a pad cell of
        ``pad_value=0`` among the maxima, the vertex 0 too: the row may sum to anything in [0, 1])."""
        obs, member = rows.obs, exact.member
        size = count_last(member)
        tol = gamma(3, u)
        outside = any_last(~member & g.valid[None] & (obs != 0)) | any_last(member & (obs < -tol))
        total, slack = obs.sum(axis=2), gamma(size + 2, u) * size
        in_sum = np.where(exact.pad_tied, (total >= -slack) & (total <= 1 + slack), np.abs(total - 1) <= slack)
        return np.asarray(~outside & in_sum)

    def outside_clarke(self, g: Geometry, rows: Rows, exact: ExactRows, suspects: list[tuple[int, int]], u: float,
                       context: str) -> tuple[Finding | None, str | None, list[tuple[int, int]]]:
        """Tied suspects that all follow one J_β outside the Clarke set (seed 001's family)."""
        finding, beta, rest = beta_outside_clarke(g, rows, exact, suspects, u, context)
        return finding, None if beta is None else beta_name(beta), rest

    def tie_rule(self, tie: Any) -> str | None:
        return str(tie or "first")

    def tie_policy(self, diagnosis: Any, rows: Rows, exact: ExactRows, suspects: list[tuple[int, int]]) -> None:
        diagnosis.tie_policy(rows, exact, suspects)

    def tied_detail(self, g: Geometry, exact: ExactRows, b: int, w: int, cells: list[Any]) -> tuple[str, str]:
        tied = [fmt_index(cells[i]) for i in np.flatnonzero(exact.member[b, w][g.valid[w]])]
        return f"; ties at {listing(tied)}", f"a convex combination of the tied cells {listing(tied)}"

    def fd_gaps(self, g: Geometry, x: np.ndarray) -> np.ndarray:
        """(B, W) each window's maximum minus its runner-up (inf for a one-cell window):
        a finite difference of step h stays on one side of the kink when gap > h."""
        values = g.gather(g.to_canonical(x).astype(np.float64), -np.inf)
        pads = pad_cells(g)
        if pads is not None:  # pad cells hold 0 and compete for the max (and the gap) too
            values = np.where(pads[None], 0.0, values)
        if values.shape[2] < 2:
            return np.full(values.shape[:2], np.inf)
        top2 = -np.partition(-values, 1, axis=-1)[..., :2]
        return np.asarray(top2[..., 0] - top2[..., 1])

    # -- metadata ----------------------------------------------------------------------
    def census_tied(self, g: Geometry, vals: np.ndarray) -> np.ndarray:
        """The maximum is attained twice."""
        lowest = vals.min()
        vals = np.where(g.valid[None], vals, lowest)
        top = vals.max(axis=-1, keepdims=True)
        tied: np.ndarray = ((vals == top) & g.valid[None]).sum(axis=-1) >= 2
        return tied

    def census_policies(self, betas: tuple[Any, Any]) -> tuple[Any, Any]:
        b0, b1 = (b if isinstance(b, Beta) else Beta(b) for b in betas)
        return (b0, b1)

    def census_difference(self, g: Geometry, x: ExactArray, dy: ExactArray, policies: tuple[Any, Any]) -> ExactArray:
        """J_β1 − J_β0 = (β1 − β0)·(J_split − J_first)."""
        step = policies[1].value - policies[0].value
        split, first = apply(self.stamp(g, x, "split"), dy, True), apply(self.stamp(g, x, "first"), dy, True)
        return lincomb([(step, split), (-step, first)])

    def neighbour_changes(self, spec: Pool, divisors: tuple[Any, ...]) -> list[dict[str, Any]]:
        if spec.padding != "valid":
            return [{"pad_value": 0 if spec.pad_value is None else None}]
        return []


MAX = Max()
