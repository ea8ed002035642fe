"""The forward's fast route for a forward *beyond* its bound: the exact route's findings, proven in float64.

:mod:`symjac.verifiers.loss.fast._forward` encloses the reduced loss, ``|L - L̂| <= E_L``,
and bounds the forward bound ``B`` (:class:`symjac.loss._bounds.ForwardSums`, full) below
by ``B_lo``. Here ``B`` is bounded above too, ``B <= B_hi``, by the same sums of the kinds'
upper bounds (:class:`symjac.loss._fast.FastValue` ``cond_hi``, ``run_hi``; ``|ℓ_i|`` by
its ball's upper end), ``u·(1 + γ_k)``, ``γ_k``, ``γ_{n-1}``, ``γ_{k_D}`` and ``r`` each
rounded up, ``A`` by the setting's ``amp >= A``, ``|L|`` by ``|L̂| + E_L``, the underflow
terms added in full (and 8 float64 η per element for the float64 products' own
underflow), every float64 sum of non-negative terms inflated by ``1 + 2^-30`` (at most
2^24 terms, each rounding within ``u``: ``2^25·u < 2^-30``). Then the forward value ``F``
is *beyond* its bound when ``|F - L̂| - E_L > B_hi``: the exact route's check fails too.

The exact route's words follow, with every printed number proven: each is formed at both
ends of its enclosure (``L`` in ``L̂ ± E_L``, widened by 2^-100 relative for the exact
route's own MPFR rounding; ``B`` in ``[B_lo, B_hi]``; the error in ``|F - L̂| ± E_L``) and
must print the same at both (the printing is monotone), else the exact route decides:

- ``forward_values``: ``exact L`` (10 digits), the error and the bound in ulp of ``L``
  (3 digits; the ulp the same at both ends), and the hint of
  :meth:`symjac.verifiers.loss._fd._ForwardCheck._scaled_hint`: its candidates (the same
  at both ends of ``F/L``), each proven to fit (``|F - cL̂| + |c|E_L <= |c|·B_lo +
  |c|(|L̂| - E_L)·u``) or proven not to (``|F - cL̂| - |c|E_L > |c|·B_hi + |c|(|L̂| +
  E_L)·u``), in order; one left open leaves the verdict to the exact route.
- *Finite differences* at the exact route's probes (:mod:`symjac.verifiers.loss.fast._probes`):
  ``S·(F(z+) - F(z-))/(z+ - z-)`` and ``|g - fd|`` formed exactly as there; the tolerance
  ``B_j + S·(|trunc| + (E+ + E-)/step)`` with ``B_j`` evaluated exactly at the entry and
  ``E±`` between the lower and the upper sums. A probe is inconsistent when ``|g - fd| >
  tol_hi``, consistent when ``<= tol_lo``, else undecided (the exact route). The
  ``not_fd_consistent`` finding names the worst probe (its ratio's lower end above every
  other's upper end) and its tolerance (3 digits, the same at both ends). As on the
  exact route, no such finding follows a derivative finding that names a scale
  (missing_scale, wrong_scale): the probes are still called, and need not be decided.

A forward call that returns no usable value (a NaN, a wrong shape) is reported in the
Guard's words, as on the exact route, once ``L`` is proven to round to a finite value
in the dtype (then an infinity is no right answer there either).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from symjac.check._call import Guard
from symjac.check._report import Finding
from symjac.check._rounding import finfo, ulp_mp
from symjac.loss import _numbers
from symjac.verifiers.loss.fast._filter import _Setting
from symjac.verifiers.loss.fast._probes import Enclosure, Probe, probes
from symjac.verifiers.loss._fd import fd_finding, reduced_message, scale_candidates, scaled_words, ulps_text, \
    value_detail
from symjac.verifiers.loss._inputs import _ArgFactory
from symjac.verifiers.loss._values import _show

_WIDEN = Fraction(1, 2**100)  # relative: the exact route's L is MPFR (200 bits), within 2^-199 of L


def unusable(s: _Setting, enc: Enclosure, findings: list[Finding]) -> tuple[dict[str, Any], list[Finding]] | None:
    """The exact route's outcome for a forward that returned no usable value (its Guard's
    one bad_output finding about what came back: NaN/Inf, no array, a wrong shape), or
    None where that outcome may differ (a raise, which the exact route may find a dtype the
    forward rejects; a timeout; anything else)."""
    if len(findings) != 1 or findings[0].category != "bad_output" or \
            not findings[0].message.startswith("forward returned "):
        return None
    if not abs(enc.big_l) + enc.big_e < float(finfo(s.dt).max):
        return None  # L may round to inf in the dtype: the exact route may accept an infinity
    return {"fd": "skipped: the forward gave no usable value"}, findings


def beyond(s: _Setting, fwd: Guard, args_of: _ArgFactory, out: np.ndarray, observed: float, enc: Enclosure,
           u: float, findings: list[Finding], scale_found: bool = False) -> tuple[dict[str, Any], list[Finding]] | None:
    """The exact route's findings for a forward value proven beyond its bound, or None
    (``scale_found``: the derivative's finding names a scale; no probe is reported)."""
    if enc.bound_hi is None:
        return None
    f, big_l = Fraction(observed), Fraction(enc.big_l)
    e = Fraction(enc.big_e) + abs(big_l) * _WIDEN
    b_lo, b_hi = Fraction(enc.bound_lo) * (1 - _WIDEN), Fraction(enc.bound_hi)
    dist = abs(f - big_l)
    if not dist - e > b_hi:
        return None
    l_lo, l_hi = big_l - e, big_l + e
    if l_lo <= 0 <= l_hi:
        return None
    with _numbers.context():
        num = _numbers.number
        shown = {_show(num(q)) for q in (l_lo, l_hi)}
        ulp = {float(ulp_mp(s.dt, num(abs(q)))) for q in (l_lo, l_hi)}
        if len(shown) != 1 or len(ulp) != 1:
            return None
        unit = Fraction(ulp.pop())
        err = {ulps_text((dist + d) / unit) for d in (-e, e)}
        bound = {ulps_text(q / unit) for q in (b_lo, b_hi)}
        if len(err) != 1 or len(bound) != 1:
            return None
        hint = _hint(s, f, big_l, e, (b_lo, b_hi), (l_lo, l_hi))
        if hint is None:
            return None
        message = reduced_message(observed, value_detail(shown.pop(), err.pop(), bound.pop())) + hint
        value = Finding("forward_values", message, window=None, expected=_numbers.to_mpf(num(big_l)),
                        observed=observed)
    got = probes(s, fwd, args_of, out, enc, u, findings, forward_ok=False)
    if got is None or findings:
        return None
    checked, probed = got
    judged = _judge(checked)
    if judged is None and not scale_found:
        return None
    bad, worst = judged if judged is not None else ([], None)
    stats: dict[str, Any] = {
        "fd_checked": len(checked), "fd_skipped": probed - len(checked),
        "fd_consistent": None if judged is None else not bad, "fd_worst_error_over_tolerance_at_most": worst,
        "forward_filter": {"value": observed, "exact_within": enc.big_e, "bound_at_most": enc.bound_hi,
                           "beyond": True}}
    if not bad or scale_found:
        return stats, [value]
    fd = _fd(args_of.pred.shape, bad, len(checked))
    return None if fd is None else (stats, [value, fd])


def _hint(s: _Setting, f: Fraction, big_l: Fraction, e: Fraction, bound: tuple[Fraction, Fraction],
          ends: tuple[Fraction, Fraction]) -> str | None:
    """:meth:`symjac.verifiers.loss._fd._ForwardCheck._scaled_hint` proven ("" when no
    candidate fits), or None where a candidate is neither proven to fit nor not to."""
    if f == 0:
        return ""  # the exact route: a ratio of 0 names no factor
    u = Fraction(1, 2 ** (int(finfo(s.dt).nmant) + 1))
    lists = [scale_candidates(s.loss.scale, _numbers.number(f / q)) for q in ends]
    if lists[0] != lists[1]:
        return None
    size_lo, size_hi = min(abs(q) for q in ends), max(abs(q) for q in ends)
    for c in lists[0]:
        dev, spread = abs(f - c * big_l), abs(c) * e
        if dev + spread <= abs(c) * bound[0] + abs(c) * size_lo * u:
            return scaled_words(c, s.loss.scale)
        if not dev - spread > abs(c) * bound[1] + abs(c) * size_hi * u:
            return None
    return ""


def _judge(checked: list[Probe]) -> tuple[list[Probe], float] | None:
    """(the probes proven inconsistent, the largest ``|g - fd|/tol_lo``), or None when a
    probe is neither proven consistent nor inconsistent."""
    bad, worst = [], 0.0
    with _numbers.context():
        for p in checked:
            if p.miss > p.tol_hi:
                bad.append(p)
            elif not p.miss <= p.tol_lo:
                return None
            worst = max(worst, float(p.miss / p.tol_lo) if p.tol_lo > 0 else (float("inf") if p.miss else 0.0))
    return bad, worst


def _fd(shape: tuple[int, ...], bad: list[Probe], checked: int) -> Finding | None:
    """not_fd_consistent at the worst probe, proven the worst, its tolerance printed at both ends the same."""
    with _numbers.context():
        if any(not p.tol_lo > 0 for p in bad):
            return None
        lows = [p.miss / p.tol_hi for p in bad]
        at = max(range(len(bad)), key=lambda i: lows[i])
        if any(bad[i].miss / bad[i].tol_lo >= lows[at] for i in range(len(bad)) if i != at):
            return None
        p = bad[at]
        tol = {_show(p.tol_lo, 3), _show(p.tol_hi, 3)}
        if len(tol) != 1:
            return None
        return fd_finding(shape, [q.j for q in bad], checked, False, p.j, p.fd, p.observed, tol.pop())
