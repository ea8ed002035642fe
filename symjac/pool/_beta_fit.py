"""Name the β of a max-pooling backward: rows of the form β·J_split + (1 − β)·J_first.

At a window tied on n cells with first maximal cell f, J_β's row is ``1 − β + β/n``
at f and ``β/n`` at each of the n − 1 other tied cells, so the observed weights of
those other cells sum to ``(n − 1)·β/n`` and give the estimate
``β̂ = n/(n − 1) · Σ_{j in I, j != f} o_j``. The median estimate over the windows,
as the nearest fraction with denominator <= 1000, is the candidate; it is the
answer only if every window's observed row equals the candidate's J_β row within
the verifier's row tolerance (γ_3 relative, plus γ_3 absolute where the entry is 0).

A β whose rows leave the Clarke set (some tie has β < 0 or β > n/(n − 1); see
:mod:`symjac.pool._beta`) is the ``tie_beta_outside_clarke`` finding: the backward
is a consistent member of seed 001's family, but not a valid generalized
derivative there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fractions import Fraction
import numpy as np

from symjac.check._report import Finding, fmt_index, listing
from symjac.check._rounding import gamma
from symjac.pool._beta import Beta, beta_weights
from symjac.pool._beta import policy_weights
from symjac.pool._rows import ExactRows, Rows, tolerance

if TYPE_CHECKING:
    from symjac.pool._geometry import Geometry

MAX_DENOMINATOR = 1000


def beta_name(beta: Beta) -> str:
    """The policy name of a β: ``first`` (0), ``split`` (1), else ``beta:<b>``."""
    return {Fraction(0): "first", Fraction(1): "split"}.get(beta.value, str(beta))


def fit_beta(rows: Rows, exact: ExactRows, mask: np.ndarray, u: float) -> Beta | None:
    """The one β whose J_β rows match the observed rows on every window of ``mask``, or None."""
    if not mask.any():
        return None
    member = exact.member
    size = member.sum(axis=2)
    first = policy_weights(member, "first")[0].astype(bool)
    others = (rows.obs * (member & ~first)).sum(axis=2)
    estimate = others * size / np.maximum(size - 1, 1)
    beta = Beta(Fraction(float(np.median(estimate[mask]))).limit_denominator(MAX_DENOMINATOR))
    weights, q = beta_weights(member, beta)
    want = weights / q
    close = np.abs(rows.obs - want) <= tolerance(want, u) + gamma(3, u) * (want == 0)
    return beta if bool(close.all(axis=2)[mask].all()) else None


def outside_clarke(g: Geometry, rows: Rows, exact: ExactRows, suspects: list[tuple[int, int]], u: float,
                   context: str) -> tuple[Finding | None, Beta | None, list[tuple[int, int]]]:
    """Tied suspect windows that all follow one J_β outside the Clarke set.

    Returns:
      (finding, β, remaining suspects): the finding and β when such a β explains every
      tied suspect (those windows leave the suspect list), else (None, None, suspects).
    """
    tied = [(b, w) for b, w in suspects if exact.tied[b, w] and (b, w) not in rows.stray]
    if not tied:
        return None, None, suspects
    mask = np.zeros(exact.tied.shape, dtype=bool)
    for key in tied:
        mask[key] = True
    beta = fit_beta(rows, exact, mask, u)
    if beta is None:
        return None, None, suspects
    sizes = exact.member.sum(axis=2)
    bad = [(b, w) for b, w in tied if not beta.in_clarke(int(sizes[b, w]))]
    if len(bad) != len(tied):
        return None, None, suspects
    b, w = bad[0]
    n = int(sizes[b, w])
    valid = g.valid[w]
    cells = tuple(g.input_index(b, int(c)) for c in g.cells[w][valid])
    limits = [str(v) for v in sorted({beta.clarke_limit(int(sizes[k])) for k in bad}, reverse=True)]
    names = [fmt_index(g.output_index(*k)) for k in bad]
    finding = Finding(
        "tie_beta_outside_clarke",
        f"at ties the backward follows J_β = β·J_split + (1−β)·J_first with β = {beta.value}{context}, outside the "
        f"Clarke set on {len(bad)} tied windows (a tie of n cells needs 0 <= β <= n/(n−1): "
        f"{', '.join(limits)} here): {listing(names)}",
        window=g.output_index(b, w), cells=cells,
        expected=f"a convex combination of the {n} tied cells (β in [0, {beta.clarke_limit(n)}])",
        observed=[float(v) for v in rows.obs[b, w][valid]])
    explained = set(bad)
    return finding, beta, [k for k in suspects if k not in explained]


def name_policy(rows: Rows, exact: ExactRows, ok: np.ndarray, u: float) -> str | None:
    """A β name for tied windows in the Clarke set that no named policy explains."""
    beta = fit_beta(rows, exact, ok, u)
    return None if beta is None else beta_name(beta)

