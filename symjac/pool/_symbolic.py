"""Symbolic templates: one SymPy expression per window class, differentiated once.

Windows fall into few classes: the same valid slots and the same divisor up to
translation (interior, edges, corners). For each class SymPy builds the forward
expression over slot symbols ``s0, s1, ...`` (``(s0 + s1 + s2)/3`` or
``Max(s0, s1, s2, s3)``) and differentiates it once; the Jacobian stage stamps the
result over all windows of the class with NumPy. SymPy work is O(classes), array
work O(nnz); no per-window ``diff``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import sympy

from symjac._errors import InputError
from symjac.pool._geometry import Geometry

TIE_POLICIES = ("first", "last", "split")


@dataclasses.dataclass(frozen=True, eq=False)
class Template:
    """The forward expression of one window class and its exact partial derivatives.

    Attributes:
      mode: ``"avg"`` or ``"max"``.
      symbols: one symbol per valid slot, ``s0 .. s{n-1}``.
      expr: the forward expression.
      derivatives: ``diff(expr, s_i)`` for each slot, as SymPy returned it.
      weights: avg only: the derivatives as exact fractions (they are constants).
      tie_arg: max only: NumPy function ``(a, m) -> a - m``, the argument of SymPy's
        ``diff(Max(a, m), a) = Heaviside(a - m)``. With ``a = s_i`` and ``m`` the max
        of the other slots (max is associative), > 0 means s_i is the strict
        maximum, == 0 that it ties for the maximum, < 0 that it loses.
    """

    mode: str
    symbols: tuple[sympy.Symbol, ...]
    expr: sympy.Expr
    derivatives: tuple[sympy.Expr, ...]
    weights: tuple[Fraction, ...] = ()
    tie_arg: Callable[..., Any] | None = None
    constant: int | None = None  # max with pad cells of Pool(pad_value=0): Max(s0, ..., 0)

    @functools.cached_property
    def forward_numpy(self) -> Callable[..., Any]:
        """The forward expression lowered to NumPy with :func:`sympy.lambdify`."""
        fn: Callable[..., Any] = sympy.lambdify(self.symbols, self.expr, modules="numpy")
        return fn

    @functools.cached_property
    def derivatives_numpy(self) -> tuple[Callable[..., Any], ...]:
        """avg: each constant derivative lowered to NumPy (a float of the dtype used)."""
        return tuple(sympy.lambdify(self.symbols, d, modules="numpy") for d in self.derivatives)


@functools.lru_cache(maxsize=256)
def template(mode: str, n: int, divisor: int, constant: int | None = None) -> Template:
    """Build and differentiate the template of a class with ``n`` valid slots.

    ``constant``: max pooling over windows that hold pad cells of ``Pool(pad_value=0)``:
    the expression is ``Max(s0, ..., s{n-1}, constant)``, a constant argument of Max.
    """
    symbols = tuple(sympy.symbols(f"s0:{n}", real=True)) if n > 1 else (sympy.Symbol("s0", real=True),)
    if mode == "avg":
        expr = sympy.Add(*symbols) / sympy.Integer(divisor)
        derivatives = tuple(sympy.diff(expr, s) for s in symbols)
        if not all(d.is_Rational for d in derivatives):
            raise AssertionError(f"average template {expr} has a non-constant derivative")
        # The template is linear: expr == sum(d_i * s_i) exactly, so y = J x.
        if sympy.expand(expr - sum(d * s for d, s in zip(derivatives, symbols))) != 0:
            raise AssertionError(f"average template {expr} is not linear")
        weights = tuple(Fraction(int(d.p), int(d.q)) for d in derivatives)
        return Template(mode, symbols, expr, derivatives, weights=weights)
    # Max is associative: Max(s_0..s_n) = Max(s_i, m_i) with m_i the max of the other
    # slots, which does not depend on s_i. SymPy differentiates the two-argument Max
    # once; each slot's derivative is that result at (s_i, m_i). (Differentiating the
    # n-argument Max directly costs O(n^2) per slot in SymPy's Max simplification.)
    a, m = sympy.symbols("a m", real=True)
    d2 = sympy.diff(sympy.Max(a, m), a)
    if d2 != sympy.Heaviside(a - m):
        raise AssertionError(f"d Max(a, m)/da = {d2}: expected Heaviside(a - m) from SymPy")
    const = () if constant is None else (sympy.Integer(constant),)
    args = symbols + const
    expr = sympy.Max(*args, evaluate=False) if len(args) > 1 else symbols[0]
    derivatives = tuple(
        d2.xreplace({a: s, m: sympy.Max(*(o for o in args if o is not s), evaluate=False)}) if len(args) > 1
        else sympy.Integer(1)
        for s in symbols
    )
    tie_arg = sympy.lambdify((a, m), d2.args[0], modules="numpy")
    return Template(mode, symbols, expr, derivatives, tie_arg=tie_arg, constant=constant)


@dataclasses.dataclass(frozen=True, eq=False)
class WindowClass:
    """Windows sharing valid slots and divisor.

    Attributes:
      slots: indices of the valid slots (columns of ``geometry.cells``).
      divisor: the averaging divisor.
      windows: (nw,) window numbers.
      cells: (nw, n) flat spatial input cell of each valid slot.
      template: the class's :class:`Template`.
      pad_slots: ``Pool(pad_value=0)``: the slots holding pad cells (constants in the
        max), in the same numbering as ``slots``; empty otherwise.
    """

    slots: tuple[int, ...]
    divisor: int
    windows: np.ndarray
    cells: np.ndarray
    template: Template
    pad_slots: tuple[int, ...] = ()


def window_classes(geometry: Geometry) -> tuple[WindowClass, ...]:
    """Group the windows of ``geometry`` into classes and attach their templates."""
    return _classes(geometry)


@functools.lru_cache(maxsize=64)
def _classes(geometry: Geometry) -> tuple[WindowClass, ...]:
    # Windows are separable, so a window's class is the tuple of its per-axis
    # classes (valid pattern and include-pad count of the axis window): classify
    # each small axis, then combine the ids in mixed radix.
    axis_ids, radix = [], []
    for axis in geometry.axes:
        keys = np.concatenate([axis.valid.astype(np.int64), axis.counted[:, None]], axis=1)
        _, inverse = np.unique(keys, axis=0, return_inverse=True)
        axis_ids.append(inverse.reshape(-1))
        radix.append(int(inverse.max()) + 1)
    grid = np.meshgrid(*axis_ids, indexing="ij")
    ids = np.ravel_multi_index(tuple(g.reshape(-1) for g in grid), radix)
    order = np.argsort(ids, kind="stable")
    counts = np.bincount(ids)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    mode = geometry.spec.mode
    classes = []
    for c in np.flatnonzero(counts):
        windows = order[bounds[c] : bounds[c + 1]]
        first = int(windows[0])
        slots = tuple(int(i) for i in np.flatnonzero(geometry.valid[first]))
        divisor = int(geometry.divisor[first])
        cells = geometry.cells[windows][:, slots]
        pad_value = getattr(geometry.spec, "pad_value", None)
        pads = () if pad_value is None else tuple(
            int(i) for i in np.flatnonzero(geometry.padded[first] & ~geometry.valid[first]))
        tmpl = template(mode, len(slots), divisor, pad_value if pads else None)
        classes.append(WindowClass(slots, divisor, windows, cells, tmpl, pads))
    return tuple(classes)


def tie_members(tmpl: Template, values: np.ndarray) -> np.ndarray:
    """Which slots attain the window maximum, from SymPy's derivative of ``Max``.

    Args:
      tmpl: a max template.
      values: (..., n) slot values (exact integers, or floats: the sign of
        ``s_i - max(others)`` is exact in floating point too).

    Returns:
      (..., n) bool: slot i is in the tie set (its Heaviside argument is >= 0).
    """
    n = values.shape[-1]
    assert tmpl.tie_arg is not None
    if n == 1:
        if tmpl.constant is None:
            return np.ones(values.shape, dtype=bool)  # a lone cell always attains the max
        return np.asarray(tmpl.tie_arg(values, tmpl.constant)) >= 0
    # m_i, the max of the other slots (and of the constant): the second largest value
    # for the (first) argmax slot, the largest for every other slot.
    top = values.max(axis=-1, keepdims=True)
    pos = values.argmax(axis=-1)[..., None]
    masked = values.copy()
    np.put_along_axis(masked, pos, values.min(axis=-1, keepdims=True), axis=-1)
    second = masked.max(axis=-1, keepdims=True)
    others = np.where(np.arange(n) == pos, second, top)
    if tmpl.constant is not None:
        others = np.maximum(others, tmpl.constant)
    return np.asarray(tmpl.tie_arg(values, others)) >= 0


def constant_ties(tmpl: Template, values: np.ndarray) -> np.ndarray:
    """(...,) bool: the template's constant (the pad cells) attains the window maximum."""
    if tmpl.constant is None:
        return np.zeros(values.shape[:-1], dtype=bool)
    assert tmpl.tie_arg is not None
    return np.asarray(tmpl.tie_arg(tmpl.constant, values.max(axis=-1))) >= 0


def class_weights(c: WindowClass, values: np.ndarray, tie: str) -> tuple[np.ndarray, np.ndarray, int]:
    """(member, weights, q) of one window class at slot ``values`` (..., n).

    Without pad cells: :func:`policy_weights` of the tie set. With pad cells (each
    holding the constant), the policy runs over all slots of the padded window in
    row-major order, pad slots included, and the pad slots' weights are dropped: a
    window whose routed maximum is a pad cell sends its gradient to no input.
    """
    member = tie_members(c.template, values)
    if not c.pad_slots:
        weights, q = policy_weights(member, tie)
        return member, weights, q
    order = sorted(c.slots + c.pad_slots)
    valid_pos = [order.index(s) for s in c.slots]
    pad_pos = [order.index(s) for s in c.pad_slots]
    full = np.zeros(member.shape[:-1] + (len(order),), dtype=bool)
    full[..., valid_pos] = member
    full[..., pad_pos] = constant_ties(c.template, values)[..., None]
    weights, q = policy_weights(full, tie)
    return member, weights[..., valid_pos], q


def check_tie(tie: str) -> str:
    """Raise :class:`InputError` unless ``tie`` names a policy."""
    if tie not in TIE_POLICIES:
        raise InputError(f"tie={tie!r} is not valid: give one of {', '.join(map(repr, TIE_POLICIES))}")
    return tie


def policy_weights(member: np.ndarray, tie: str) -> tuple[np.ndarray, int]:
    """Integer routing weights over a common denominator for a tie policy.

    Returns (weights, q) with ``weights / q`` the Jacobian row of each window:
    ``first``/``last`` put 1 on the first/last tied slot (row-major order), ``split``
    puts 1/|I| on each of the |I| tied slots (the minimal-norm Clarke element).
    """
    check_tie(tie)
    n = member.shape[-1]
    if tie == "split":
        count = member.sum(axis=-1, keepdims=True)
        q = int(np.lcm.reduce(np.unique(count[count > 0]))) if (count > 0).any() else 1
        return np.where(member, q // np.maximum(count, 1), 0).astype(np.int64), q
    pick = member.argmax(axis=-1) if tie == "first" else n - 1 - member[..., ::-1].argmax(axis=-1)
    weights = (np.arange(n) == pick[..., None]) & member.any(axis=-1, keepdims=True)
    return weights.astype(np.int64), 1
