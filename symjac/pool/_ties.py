"""Max pooling's tie structure: tie sets, first/last routes and policy supports, from SymPy's derivative of ``Max``.

Every max window has the template ``Max(a, r)`` (``a`` one slot, ``r`` the max of the
others), whose SymPy derivative is ``Heaviside(a - r)`` (:func:`max_pair`): slot k is in
the window's tie set iff that argument is >= 0 at ``a = s_k``. The Heaviside argument
lowered to NumPy (``np.subtract``: the sign of a difference is exact in floating point
too) finds the tie sets of every window (:func:`max_members`), the slot a ``first`` or
``last`` policy routes to (:func:`max_route`, axis by axis) and the support and weights
of every policy (:func:`symjac.pool._beta.policy_support`). Machinery below max pooling's definition
(:mod:`symjac.pool._ops.max`), which is the only reader that names the operator.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._exact import _int_array, strip_twos
from symjac._lastaxis import max_last
from symjac.pool._beta import check_tie, pick_slot, policy_support
from symjac.pool._symbolic import PAIR, Template

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry


@functools.lru_cache(maxsize=1)
def max_pair() -> tuple[sympy.Expr, sympy.Expr]:
    """Build and differentiate ``Max(a, r)`` once: (pair, Heaviside(a - r))."""
    a, r = PAIR
    pair = sympy.Max(a, r, evaluate=False)  # what Max(a, r) of two real symbols evaluates to, without the search
    d = sympy.diff(pair, a)
    if d != sympy.Heaviside(a - r):
        raise AssertionError(f"d Max(a, r)/da = {d}: expected Heaviside(a - r) from SymPy")
    return pair, d


@dataclasses.dataclass(frozen=True)
class MaxForms:
    """The SymPy forms of the max reduction (:class:`symjac.pool._symbolic.Forms`)."""

    identity: sympy.Expr = sympy.S.NegativeInfinity

    def pair(self, divisor: int) -> sympy.Expr:
        return max_pair()[0]

    def reduce(self, symbols: tuple[sympy.Symbol, ...], divisor: int) -> sympy.Expr:
        return sympy.Max(*symbols, evaluate=False)

    def rest(self, others: list[sympy.Symbol]) -> sympy.Expr:
        return sympy.Max(*others, evaluate=False)


MAX_FORMS = MaxForms()


@functools.lru_cache(maxsize=256)
def max_template(n: int, divisor: int) -> Template:
    """The max template of a class with ``n`` valid slots: SymPy's ``Heaviside(a - r)``
    (differentiated once, :func:`max_pair`) and its argument ``a - r`` lowered to NumPy:
    the sign of a difference is exact in floating point too (it is 0 only when a == r)."""
    return Template("max", n, divisor, max_pair()[1], MAX_FORMS, tie_arg=np.subtract)


def clear_caches(templates: bool = True) -> None:
    """Forget the last tie sets, routes and policies (and, ``templates``, the max templates)."""
    _LAST_MEMBERS.clear()  # keyed on geometries: let the arrays go with them
    _LAST_POLICY.clear()
    _LAST_ROUTE.clear()
    if templates:
        max_template.cache_clear()
        max_pair.cache_clear()


def pads_compete(geometry: Geometry) -> bool:
    """Whether pad cells hold the constant 0 and take part in the max (``Pool(pad_value=0)``)."""
    return getattr(geometry.spec, "pad_value", None) is not None  # only max pooling takes a pad_value


def pad_cells(geometry: Geometry) -> np.ndarray | None:
    """``Pool(pad_value=0)``: (windows, K) the pad slots (constants 0 in the max); else None."""
    if not pads_compete(geometry):
        return None
    pads: np.ndarray = geometry.padded & ~geometry.valid
    return pads


# The last tie sets computed: jacobian, vjp, forward and the verifier's exact rows
# ask for the same x in turn. Keyed by the input's bytes (exact: no hash collision
# can return another x's sets), numeric dtypes only; read-only so no caller can
# alter a shared result.
_LAST_MEMBERS: dict[tuple[Any, ...], np.ndarray] = {}


def max_members(geometry: Geometry, xc: np.ndarray, pads: bool = False) -> np.ndarray:
    """Max pooling: which slots of every window attain its maximum (:func:`_max_members`), cached for the last x."""
    pads = pads and pad_cells(geometry) is not None  # without pad cells both ask for the same sets
    key = None if xc.dtype == object else (geometry, pads, xc.dtype.str, xc.shape, np.ascontiguousarray(xc).tobytes())
    if key is not None and key in _LAST_MEMBERS:
        return _LAST_MEMBERS[key]
    member = _max_members(geometry, xc, pads=True) if pads else _max_members(geometry, xc)
    member.setflags(write=False)
    if key is not None:
        _LAST_MEMBERS.clear()
        _LAST_MEMBERS[key] = member
    return member


def _max_members(geometry: Geometry, xc: np.ndarray, pads: bool = False) -> np.ndarray:
    """Max pooling: which slots of every window attain its maximum.

    Every max class has the template ``Max(a, r)`` whose SymPy derivative is
    ``Heaviside(a - r)`` (:func:`max_template`): slot k is in the tie set iff that
    argument is >= 0 at ``a = s_k`` and ``r`` = the max of the other slots
    (:func:`tie_members`). Windows go in blocks of about 2^22 (window, slot) values,
    with invalid slots below every value, so memory stays O(block) beyond the result.

    Args:
      geometry: the windows.
      xc: (batch, n_in) canonical input values (exact integers, or floats: the sign
        of ``a - r`` is exact in floating point too).
      pads: ``Pool(pad_value=0)``: the pad slots (:func:`pad_cells`) hold the value 0
        and take part in the max (0 is 0 in canonical integers too).

    Returns:
      (batch, windows, K) bool, False on invalid slots (pad slots may be True when
      ``pads``).
    """
    tmpl = max_template(2, 2)
    n_win, n_slots = geometry.cells.shape
    pad = pad_cells(geometry) if pads else None
    xc, low = _comparable(xc)
    # One sentinel column after the cells: invalid slots (cell -1) read ``low``, so a
    # single gather gives every window's values and no invalid slot can tie.
    xs = np.concatenate([xc, np.full((xc.shape[0], 1), low, dtype=xc.dtype)], axis=1)
    member = np.zeros((xc.shape[0], n_win, n_slots), dtype=bool)
    step = max(1, 2**22 // max(1, xc.shape[0] * n_slots))
    for start in range(0, n_win, step):
        block = slice(start, start + step)
        values = xs[:, geometry.cells[block]]
        if pad is not None:  # pad cells hold the constant 0, a competitor in the max
            values = np.where(pad[block], 0, values)
        member[:, block] = tie_members(tmpl, values, scratch=True)  # values is this block's own gather
    return member


# The last first/last routes computed, per policy: jacobian, vjp and forward ask for the
# same x in turn. Keyed like _LAST_MEMBERS (the input's bytes: exact), read-only results.
_LAST_ROUTE: dict[str, tuple[tuple[Any, ...], tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}


def max_route(geometry: Geometry, xc: np.ndarray, tie: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Max pooling, policy ``first``/``last``: each window's one slot and its maximum
    (:func:`_max_route`), cached for the last x of each policy.

    Returns:
      (slot, top, cell): (batch, windows) the slot (column of ``geometry.cells``) the
      policy routes the window's gradient to, -1 for none (a pad cell of
      ``Pool(pad_value=0)`` won); the window's maximum, in ``xc``'s values (0 where a
      pad cell won); and the flat spatial input cell of the slot (-1 for none).
    """
    check_tie(tie)
    if tie not in ("first", "last"):
        raise ValueError(f"tie={tie!r}: only first/last route to one slot a window")
    if xc.dtype == object:  # near the overflow threshold: a common power of two out keeps the order, and 0
        small, twos = strip_twos(xc)
        if twos and small.dtype != object:
            slot, top, cell = max_route(geometry, small, tie)
            top = _int_array(top.astype(object) << twos)
            top.setflags(write=False)
            return slot, top, cell
    key = (geometry, xc.dtype.str, xc.shape, np.ascontiguousarray(xc).tobytes()) if xc.dtype != object else None
    last = _LAST_ROUTE.get(tie)
    if key is not None and last is not None and last[0] == key:
        return last[1]
    small = xc.shape[0] * geometry.n_out * math.prod(ax.cells.shape[1] for ax in geometry.axes) <= ROUTE_BY_MEMBERS
    route = _route_by_members(geometry, xc, tie) if small else _max_route(geometry, xc, tie)
    for a in route:
        a.setflags(write=False)  # shared by the next caller with the same x
    if key is not None:
        _LAST_ROUTE[tie] = (key, route)
    return route


#: Up to this many (batch, window, slot) entries :func:`max_route` reads the tie sets
#: (:func:`max_members`, one gather of every window's slots, which verify needs at the
#: same x anyway) rather than going axis by axis: below it the levels' fixed steps cost
#: more (3x3 at 32^2, 9,216 entries: ~0.11 ms by axis, ~0.05 ms by the tie sets).
ROUTE_BY_MEMBERS = 2**15


def _route_by_members(geometry: Geometry, xc: np.ndarray, tie: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`max_route` from the tie sets: the first (last) member of each window's row-major
    slots is its first (last) maximal slot, as :func:`policy_support` picks it. With
    ``Pool(pad_value=0)`` pad slots compete, and a window they win routes to no input."""
    slot = pick_slot(max_members(geometry, xc, pads=pads_compete(geometry)), tie)
    cell = geometry.cells[np.arange(geometry.n_out), slot]  # -1 at a slot outside the input: a pad cell
    xc, _ = _comparable(xc)
    top = xc[np.arange(xc.shape[0])[:, None], np.maximum(cell, 0)]
    top[cell < 0] = 0  # a pad cell of pad_value=0 won: the window's max is that 0
    return np.where(cell >= 0, slot, -1), top, cell


def _max_route(geometry: Geometry, xc: np.ndarray, tie: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`max_route`, one spatial axis at a time: O(sum_a K_a) work per window, never
    a (batch, windows, K) array (but in 1-D, where that is the one level's array).

    A window is the product of its axis windows and its slots are numbered row-major
    (axis 0 most significant), so a slot is a tuple (j_0, ..., j_{r-1}) and the first
    (last) maximal slot is the lexicographically smallest (largest) maximal tuple. Max
    is associative: ``Max(s) = Max_{j_0} M_0(j_0)`` with ``M_a(j_0..j_a) =
    Max_{j_{a+1}} M_{a+1}(j_0..j_{a+1})``, and the chain rule through the template
    ``Max(a, r)``, whose SymPy derivative is ``Heaviside(a - r)`` (:func:`max_template`),
    gives ``d Max(s)/d s_j = prod_a Heaviside(M_a(j_0..j_a) - r_a)``, r_a the max of
    the other entries at level a: slot j is in the tie set iff it ties at every level,
    and at each level ``tie_arg(M, Max M) >= 0`` is that level's test (as in
    :func:`tie_members`). The lexicographically first maximal tuple is therefore found
    innermost axis first: along axis r-1, each row's first member; then along axis
    r-2 the first member among the row maxima, carrying the inner choice of the row it
    picks; and so on out to axis 0 (``last``: the last member at every level).

    Each level gathers one axis: a (batch, ..., o_a, K_a, ...) array over the input
    cells of the outer axes and the windows of the inner ones (O(windows x K_a) for
    stride 1). Slots outside the window or the padded input read a value below every
    other (never the max); with ``Pool(pad_value=0)`` pad slots read 0 and compete, and
    a level that picks one routes the window to no input (slot -1), as
    :func:`max_support` does. The choice carried from level to level is one int64,
    ``slot * n_in + cell``: slot and flat input cell are both sums of one term per axis.
    """
    tmpl = max_template(2, 2)
    assert tmpl.tie_arg is not None
    pads = pads_compete(geometry)
    xc, low = _comparable(xc)
    val = xc.reshape((xc.shape[0],) + geometry.in_spatial)  # levels reduce it axis by axis, last first
    # Each entry's choice among the axes reduced so far, as one int64: slot * n_in + cell
    # (both sums of per-axis terms, so one carried array serves both), -1 for no input.
    n_in = geometry.n_in
    assert math.prod(ax.cells.shape[1] for ax in geometry.axes) * n_in < 2**62  # the budget keeps both far below
    route: np.ndarray | None = None
    width, cell_step = 1, 1  # slots of the axes reduced so far; input cells of one step along axis a
    for a in reversed(range(len(geometry.axes))):
        ax, axis = geometry.axes[a], a + 1
        o, k = ax.cells.shape
        # One sentinel cell past the axis end for slots outside the window (low), one more
        # for pad cells (0, pad_value=0); both carry slot -1 (no input).
        idx = np.where(ax.valid, ax.cells, ax.length)
        fills = [low]
        if pads:
            idx = np.where(ax.padded & ~ax.valid, ax.length + 1, idx)
            fills.append(0)
        edge = val.shape[:axis] + (1,) + val.shape[axis + 1:]
        ext = np.concatenate([val] + [np.full(edge, f, dtype=val.dtype) for f in fills], axis=axis)
        values = np.take(ext, idx, axis=axis)  # (..., o, k, ...): level a's entries, window by window
        del ext
        # the slots' axis is innermost on the last level: max_last, not NumPy's short-row pass
        last = axis + 1 == values.ndim - 1
        top = max_last(values, keepdims=True) if last else values.max(axis=axis + 1, keepdims=True)
        member = np.asarray(tmpl.tie_arg(values, top, out=values)) >= 0  # values is this level's own gather
        del values
        if tie == "first":
            j = member.argmax(axis=axis + 1)
        else:
            j = k - 1 - np.flip(member, axis=axis + 1).argmax(axis=axis + 1)
        del member
        pos = idx[np.arange(o).reshape((o,) + (1,) * (len(geometry.axes) - 1 - a)), j]  # the cell j reads
        if route is None:  # innermost axis: nothing carried yet
            inner: Any = np.where(pos < ax.length, 0, -1)
        else:
            ext_route = np.concatenate([route] + [np.full(edge, -1, dtype=np.int64)] * len(fills), axis=axis)
            inner = np.take_along_axis(ext_route, pos, axis=axis)
        route = np.where(inner >= 0, inner + (j * (width * n_in) + pos * cell_step), -1)
        val = np.squeeze(top, axis=axis + 1)
        width, cell_step = width * k, cell_step * ax.length
    assert route is not None
    route = route.reshape(xc.shape[0], -1)
    has = route >= 0
    slot, cell = np.where(has, route // n_in, -1), np.where(has, route % n_in, -1)
    return slot, val.reshape(xc.shape[0], -1), cell


def _comparable(xc: np.ndarray) -> tuple[np.ndarray, Any]:
    """``xc`` in a dtype whose differences are exact (int64 beyond 2^60 becomes Python ints),
    and a value below every value and below 0 (pad cells' value): the max of no slots. Floats,
    bfloat16 among them (its kind is "V"), take -inf: ``min - 1`` rounds back to min near the range's
    end (bfloat16's -3.4e38), tying a pad slot with a cell."""
    if xc.dtype.kind == "f" or xc.dtype.name == "bfloat16":
        return xc, -np.inf
    xc = xc if xc.dtype == object or not xc.size or int(np.abs(xc).max()) < 2**60 else xc.astype(object)
    return xc, min(xc.min() if xc.size else 0, 0) - 1


def tie_members(tmpl: Template, values: np.ndarray, scratch: bool = False) -> np.ndarray:
    """Which slots attain the window maximum, from SymPy's derivative of ``Max``.

    Args:
      tmpl: a max template.
      values: (..., n) slot values (exact integers, or floats: the sign of
        ``s_i - max(others)`` is exact in floating point too).
      scratch: ``values`` may be overwritten (no second array of its size).

    Returns:
      (..., n) bool: slot i is in the tie set (its Heaviside argument is >= 0).
    """
    n = values.shape[-1]
    if n == 1:
        return np.ones(values.shape, dtype=bool)  # a lone cell always attains the max
    assert tmpl.tie_arg is not None
    # r_i, the max of the other slots, is the window max t for every slot that is
    # not the (first) argmax; for that slot r_i = second largest <= t = s_i, and
    # s_i - r_i >= 0 as s_i - t = 0 >= 0. So ``tie_arg(s_i, t) >= 0`` is the same
    # verdict for every slot, with one reduction instead of four.
    top = max_last(values, keepdims=True)
    arg = tmpl.tie_arg(values, top, out=values) if scratch else tmpl.tie_arg(values, top)
    return np.asarray(arg) >= 0


def max_support(geometry: Geometry, xc: np.ndarray, tie: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Max pooling: :func:`policy_support` of the tie sets at canonical values ``xc``
    (the Jacobian's ``split`` policy and the lowering; ``first``/``last`` take
    :func:`max_route`, with no (batch, windows, K) array).

    With ``Pool(pad_value=0)`` the policy runs over every slot of the padded window
    in row-major order, pad cells included; a window routed to a pad cell (a
    constant) then sends its gradient to no input, so the support keeps only valid
    slots.
    """
    pads = pad_cells(geometry) is not None
    member = max_members(geometry, xc, pads=pads)
    last = _LAST_POLICY.get(tie)
    if last is not None and last[0] is member:  # the same cached tie sets (jacobian, then vjp, of one x)
        return last[1]
    support, weight, q = policy_support(member, tie)
    if pads:
        support = support & geometry.valid
    for a in (support, weight):
        a.setflags(write=False)  # shared by the next caller with the same tie sets
    _LAST_POLICY.clear()
    _LAST_POLICY[tie] = (member, (support, weight, q))
    return support, weight, q


# The last policy applied, keyed by tie and held with the tie sets it was applied to
# (compared by identity: max_members returns its cached array for the same x).
_LAST_POLICY: dict[str, tuple[np.ndarray, tuple[np.ndarray, np.ndarray, int]]] = {}
