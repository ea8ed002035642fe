"""Max pooling's tie policies: the named ones (first, last, split) and the β family (seed 001).

A policy picks the Jacobian element at a tie from the window's tie set
(:mod:`symjac.pool._ties`): ``first``/``last`` put 1 on the first/last maximal cell
(row-major), ``split`` 1/|I| on each of the |I| maximal cells. Max pooling's
definition (:mod:`symjac.pool._ops.max`) reads them; the β family combines two.

Seed 001's public code builds a max pooling whose forward is
``β·split_pool(x) + (1 − β)·max_pool(x)``: the max either way, so its backward is

    J_β = β·J_split + (1 − β)·J_first.

On a window whose maximum is attained on the tie set I (first maximal cell f,
row-major), row ``J_β`` holds ``1 − β + β/|I|`` at f, ``β/|I|`` at the other cells
of I and 0 elsewhere; it sums to 1 for every β. β = 0 is PyTorch's choice (first),
β = 1 the minimal-norm element (split). The Clarke Jacobian of a tied window is
the convex hull of the one-hot rows of I, i.e. rows >= 0 supported on I that sum
to 1, so the row is in it exactly when

    β/|I| >= 0  and  1 − β + β/|I| >= 0   <=>   0 <= β <= |I|/(|I| − 1).

Untied windows (|I| = 1) get the one-hot row for every β. So J_β is a Clarke
element at x iff β >= 0 and β <= |I|/(|I| − 1) for the largest tie set: every β in
[0, 1] always is, β = 3/2 still is where ties have three cells, and β = 3 is not
at any tie (the limit is 2 for a pair and falls to 1 as |I| grows).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from symjac._errors import InputError
from symjac._exact import ExactArray, _int_array, to_fraction
from symjac.pool._stamp import SparseJacobian, apply, sparse, stamp
from symjac.pool._symbolic import TIE_POLICIES

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry


# -- the named policies: first, last, split ----------------------------------------------


def check_tie(tie: str) -> str:
    """Raise :class:`InputError` unless ``tie`` names a policy."""
    if tie not in TIE_POLICIES:
        raise InputError(f"tie={tie!r} is not valid: give one of {', '.join(map(repr, TIE_POLICIES))}")
    return tie


def policy_support(member: np.ndarray, tie: str) -> tuple[np.ndarray, np.ndarray, int]:
    """The Jacobian element a tie policy picks, as support and per-window weight.

    Args:
      member: (..., windows, K) tie sets (:func:`max_members`).
      tie: ``first``/``last`` put 1 on the first/last tied slot (row-major order),
        ``split`` puts 1/|I| on each of the |I| tied slots (the minimal-norm Clarke
        element).

    Returns:
      (support, weight, q): ``support`` (..., windows, K) bool, ``weight`` (...,
      windows) int64 (Python ints where ``q`` passes 2^63); the Jacobian row of each
      window is ``support * weight / q``.
    """
    check_tie(tie)
    n = member.shape[-1]
    if tie == "split":
        count = member.sum(axis=-1)
        # In Python ints: windows of hundreds of cells tie in many sizes, and lcm(1..43) passes 2^63.
        q = math.lcm(*(int(c) for c in np.unique(count[count > 0])))
        if q >= 2**63:  # weights q/|I| as exact Python ints
            return member, q // np.maximum(count, 1).astype(object), q
        return member, (q // np.maximum(count, 1)).astype(np.int64), q
    pick = pick_slot(member, tie)
    has = member.any(axis=-1)
    support = np.zeros(member.shape, dtype=bool)
    rows = support.reshape(-1, n)  # a view: one row a window
    rows[np.arange(rows.shape[0]), pick.reshape(-1)] = has.reshape(-1)
    return support, np.ones(member.shape[:-1], dtype=np.int64), 1


def pick_slot(member: np.ndarray, tie: str) -> np.ndarray:
    """(..., windows) the first (``tie="first"``) or last member slot of each window's row-major tie set."""
    if tie == "first":
        return np.asarray(member.argmax(axis=-1))
    return np.asarray(member.shape[-1] - 1 - member[..., ::-1].argmax(axis=-1))


def policy_weights(member: np.ndarray, tie: str) -> tuple[np.ndarray, int]:
    """Integer routing weights over a common denominator for a tie policy.

    Returns (weights, q) with ``weights / q`` the Jacobian row of each window
    (:func:`policy_support`, multiplied out).
    """
    support, weight, q = policy_support(member, tie)
    return support * weight[..., None], q



# -- the β family --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Beta:
    """A tie policy of max pooling: J_β = β·J_split + (1 − β)·J_first (seed 001).

    Args:
      value: any real β, exact: an int, a Fraction, a string such as ``"1/2"``
        or ``"0.25"``, a SymPy rational, or a float (its exact binary value).

    Raises:
      InputError: ``value`` is not a finite real rational number.

    Examples:
      ``Beta(0)`` routes like ``tie="first"``, ``Beta(1)`` like ``tie="split"``;
      ``Beta("1/2")`` puts 1/2 + 1/(2|I|) on the first tied cell.
    """

    value: Fraction

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", to_fraction(self.value, "Beta(value)"))

    def __str__(self) -> str:
        return f"beta:{self.value}"

    def clarke_limit(self, size: int) -> Fraction:
        """The largest β for which a tie set of ``size`` >= 2 cells stays in the Clarke set."""
        return Fraction(size, size - 1)

    def in_clarke(self, size: int) -> bool:
        """Whether the J_β row of a window tied on ``size`` cells is a Clarke element."""
        return size < 2 or 0 <= self.value <= self.clarke_limit(size)


#: A max-pooling tie policy: ``"first"``, ``"last"``, ``"split"`` or a :class:`Beta`.
Tie = str | Beta


def parse_tie(tie: Any, allowed: tuple[str, ...]) -> Tie:
    """A tie policy from a name, a :class:`Beta`, or the text ``"beta:<b>"`` (spec files, CLI).

    Raises:
      InputError: anything else; the message lists what is valid.
    """
    if isinstance(tie, Beta):
        return tie
    if isinstance(tie, str) and tie.startswith("beta:"):
        return Beta(to_fraction(tie[len("beta:"):], "tie"))
    if isinstance(tie, str) and tie in allowed:
        return tie
    raise InputError(f"tie={tie!r} is not valid: give one of {', '.join(map(repr, allowed))}, "
                     "symjac.Beta(b) or 'beta:<b>' (e.g. 'beta:1/2')")


def beta_weights(member: np.ndarray, beta: Beta) -> tuple[np.ndarray, int]:
    """Integer routing weights over a common denominator for J_β.

    With β = a/c and split weights ``s/q`` (``s = q/|I|`` on tied cells), the row is
    ``(a·s + (c − a)·q·f) / (c·q)`` with ``f`` the one-hot first-maximum row.

    Returns:
      (weights, q): ``weights / q`` is each window's row; weights may be negative.
    """
    split, q_split = policy_weights(member, "split")
    first, _ = policy_weights(member, "first")
    a, c = beta.value.numerator, beta.value.denominator
    q = c * q_split
    if max(abs(a), abs(c - a), 1) * q < 2**62:
        weights = a * split + (c - a) * q_split * first
    else:  # huge β denominators: exact Python ints
        weights = a * split.astype(object) + (c - a) * q_split * first.astype(object)
    return weights, q


# -- J_β from the named policies (the stamps know only first/last/split) ------------------


def lincomb(terms: list[tuple[Fraction, ExactArray]]) -> ExactArray:
    """Σ c_i·A_i of exact arrays (:class:`~symjac._exact.ExactArray`), exactly."""
    den = math.lcm(*(c.denominator * a.den for c, a in terms))
    num = sum(a.num.astype(object) * (c.numerator * (den // (c.denominator * a.den))) for c, a in terms)
    return ExactArray(_int_array(np.asarray(num, dtype=object)), den)


def beta_apply(g: Geometry, x: ExactArray | None, source: ExactArray, beta: Beta, transpose: bool) -> ExactArray:
    """Exact ``J_β^T dy`` (``transpose``) or ``J_β t`` = β·J_split + (1 − β)·J_first applied, exactly."""
    split = apply(stamp(g, x, "split"), source, transpose)
    first = apply(stamp(g, x, "first"), source, transpose)
    return lincomb([(beta.value, split), (1 - beta.value, first)])


def beta_jacobian(g: Geometry, x: ExactArray | None, beta: Beta) -> SparseJacobian:
    """Exact sparse J_β: entries of J_split and J_first combined, zeros dropped."""
    b = sympy.Rational(beta.value.numerator, beta.value.denominator)
    entries: dict[tuple[int, int], Any] = {}
    for weight, tie in ((b, "split"), (1 - b, "first")):
        J = sparse(stamp(g, x, tie))
        for r, c, v in zip(J.rows.tolist(), J.cols.tolist(), J.values):
            entries[r, c] = entries.get((r, c), 0) + weight * v
    keys = sorted(k for k, v in entries.items() if v != 0)
    table: dict[Any, int] = {}
    ids = [table.setdefault(entries[k], len(table)) for k in keys]
    rows = np.array([k[0] for k in keys], dtype=np.int64)
    cols = np.array([k[1] for k in keys], dtype=np.int64)
    return SparseJacobian(g.output_shape, g.input_shape, rows, cols, np.array(ids, dtype=np.int64), tuple(table),
                          spec=g.spec)
