"""The forward's fast route: the loss value and the finite-difference probes decided in float64.

After the derivative's fast route (:mod:`symjac.verifiers.loss.fast._filter`) has decided the
derivative, a ``forward=`` of a reduced loss (``"mean"``, ``"sum"``, ``"batch_mean"``,
every element counted) is checked here without the exact evaluation of every element:

- *Value.* The kind's fast form (:meth:`symjac.loss._kind.LossKind.fast_value`) encloses
  each ``ℓ_i`` (radius ``e_i``). ``Φ = Σ_i ℓ_i`` is enclosed by ``math.fsum`` of the
  blocks' ``math.fsum``\\ s of the centres, with each fsum's own rounding measured by one
  more fsum of its terms less its result (correctly rounded: within ``u`` of itself, plus
  η), plus ``Σ e_i``; ``L = r·Φ`` (``r = 1/D``
  enclosed) by one more product. The forward bound of :mod:`symjac.loss._bounds`,
  ``r·(Σ e_i + γ_{n-1}·Σ|ℓ_i|) + γ_{k_D}·|L| + (n + k_D)·η``, with ``e_i = u(1+γ)R(ℓ_i) +
  γ_k(|ℓ_i| + cond_i) + max(k, 1)·η·A``, is bounded below by the same sums of the
  kinds' lower bounds (``R, cond >= their lower bounds``, ``A >= 1``, ``γ_m >= m·u``),
  each sum deflated for its own float64 rounding. The forward's value ``F`` is *within*
  when ``|F - L̂| + E_L <= B_lo``: the exact route's check passes too.
- *Finite differences*, at the exact route's probes (the same entries, steps and
  stencils): the forward at ``z±``, against the exact ``ℓ_i(z±)``, ``e_i(z±)`` and ``h_j``
  of the probed element (MPFR, one small evaluation each); the forward bounds ``E±`` (at
  ``z±`` and in the tolerance) bounded below by the blocks' lower sums less element i's
  exact terms at z plus its exact terms at z±, and the derivative bound ``B_j`` by 0. A
  probe within these smaller bounds is within the exact route's (the evaluation of the
  probed element: :mod:`symjac.verifiers.loss.fast._probes`).
- *Beyond.* A value with ``|F - L̂| - E_L > B_hi`` (the same sums of the kinds' upper
  bounds) is beyond its bound, and a forward that returns no usable value is reported as
  the exact route reports it: :mod:`symjac.verifiers.loss.fast._forward_fail`, which
  also proves the exact route's printed numbers, hint and probe verdicts.

Anything else (a forward value proven neither within nor beyond, a probe or printed
number not decided, a call that raises or misbehaves otherwise, ``reduction="none"``, a
row at ``ignore_index``, a kind without ``fast_value``) returns None: the caller takes
the exact route (within ``symjac.loss.MAX_ELEMENTS``, else refused up front), whose words
every finding keeps.
NumPy's ``log``/``log1p`` (which the enclosures of sigmoid_ce and softmax_ce use) are not
trusted: each value's radius is proven with symjac's own enclosure of ``exp``
(:data:`symjac.loss._fast.LIBM_ULPS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from symjac.check._call import Guard
from symjac.check._report import Finding
from symjac.check._rounding import finfo, gamma_mp
from symjac.loss import _fast, _numbers
from symjac.loss._spec import kind_of
from symjac.verifiers.loss.fast._filter import _Setting
from symjac.verifiers.loss.fast._forward_fail import beyond, unusable
from symjac.verifiers.loss.fast._probes import Enclosure, probes
from symjac.verifiers.loss._inputs import _ArgFactory

_DOWN = 1 - 2.0**-30  # a float64 sum of non-negative terms (blocks of BLOCK, then math.fsum): rounded down
_UP = 1 + 2.0**-30  # the same sums rounded up (at most 2^24 terms: within 2^25·u < 2^-30 relative)


def fast_forward(s: _Setting, forward: Callable[..., Any], derivative_out: np.ndarray, p0: np.ndarray,
                 l0: np.ndarray | None, timeout: float | None,
                 scale_found: bool = False) -> tuple[dict[str, Any], list[Finding]] | None:
    """The forward's stats and findings when its value is proven within its bound and every
    probe consistent (no findings), or proven beyond
    (:func:`symjac.verifiers.loss.fast._forward_fail.beyond`), else None. ``scale_found``:
    the derivative's finding names a scale, so the exact route reports no probe (its
    stencil points are still checked and called): a probe need not be decided."""
    if s.loss.reduction == "none" or s.counted is not None or l0 is None:
        return None
    findings: list[Finding] = []
    args_of = _ArgFactory(s.loss, p0, l0, None)
    fwd = Guard(forward, "forward", args_of.names[:2], findings, timeout=timeout)
    ref = (p0, l0)
    got = fwd.array(*args_of.forward_args(), shape=(), dtype=None, index_name="loss", reference=ref)
    if fwd.mutated or (got is not None and findings):
        return None
    info = finfo(s.dt)
    u = 2.0 ** -(int(info.nmant) + 1)
    enc = enclose(s, u, float(info.smallest_subnormal))
    if enc is None:
        return None
    if got is None:
        return unusable(s, enc, findings)
    observed = float(np.asarray(got, dtype=np.float64).reshape(-1)[0])
    big_l, big_e, bound_lo = enc.big_l, enc.big_e, enc.bound_lo
    if not (abs(observed - big_l) + big_e) * (1 + 2.0**-44) <= bound_lo:
        return beyond(s, fwd, args_of, derivative_out, observed, enc, u, findings, scale_found)
    checked = probes(s, fwd, args_of, derivative_out, enc, u, findings, forward_ok=True)
    if checked is None or findings:
        return None
    worst, decided = 0.0, True
    with _numbers.context():
        for p in checked[0]:
            if not p.miss <= p.tol_lo:
                if not scale_found:
                    return None
                decided = False  # not decided here, and not reported (see above)
                break
            worst = max(worst, float(p.miss / p.tol_lo) if p.tol_lo > 0 else 0.0)
    return {"fd_checked": len(checked[0]), "fd_skipped": checked[1] - len(checked[0]),
            "fd_consistent": True if decided else None,
            "fd_worst_error_over_tolerance_at_most": worst if decided else None,
            "forward_filter": {"value": observed, "exact_within": big_e, "bound_at_least": bound_lo}}, []


def enclose(s: _Setting, u: float, eta: float) -> Enclosure | None:
    """``L`` and its forward bound enclosed from the kind's :meth:`fast_value` blocks (see the
    module docstring; the upper bounds in :mod:`symjac.verifiers.loss.fast._forward_fail`'s),
    or None where a block has no finite enclosure."""
    kind = kind_of(s.loss)
    k = int(kind.template(s.loss, s.classes).loss_depth)
    g_lo = k * u
    g_hi = _up(gamma_mp(k, u))  # γ_k, rounded up
    run_u = u * (1 + g_hi) * (1 + 2.0**-50)  # u·(1 + γ_k), rounded up (u a power of two: only 1 + g_hi rounds)
    centres: list[float] = []
    centre_abs = radius = abs_lo = err_lo = abs_hi = err_hi = 0.0
    upper = True
    for start in range(0, s.z.shape[0], s.step):
        stop = min(start + s.step, s.z.shape[0])
        form = kind.fast_value(s.loss, s.z[start:stop], s.y[start:stop], s.column(start, stop))
        if form is None:
            return None
        v, e = form.ell.v.reshape(-1), form.ell.e.reshape(-1)
        if not (np.isfinite(v).all() and np.isfinite(e).all()):
            return None
        values = v.tolist()
        part = math.fsum(values)
        centres.append(part)
        centre_abs += abs(math.fsum(values + [-part]))  # the rounding of part, to within its own rounding
        radius += float(np.sum(e))
        low = form.ell.lower_abs().reshape(-1)
        abs_lo += float(np.sum(low))
        with np.errstate(all="ignore"):
            err_lo += float(np.sum(u * form.run_lo.reshape(-1) + g_lo * (low + form.cond_lo.reshape(-1))))
            if form.cond_hi is None or form.run_hi is None:
                upper = False
            else:
                high = form.ell.upper_abs().reshape(-1)
                abs_hi += float(np.sum(high))
                err_hi += float(np.sum(run_u * form.run_hi.reshape(-1) + g_hi * (high + form.cond_hi.reshape(-1))))
        err_lo += max(k, 1) * eta * (stop - start)
        # the exact underflow term, and 8 float64 η per element for what the float64 products above may lose
        err_hi += (max(k, 1) * eta * s.amp + 8 * _fast.ETA) * (stop - start)
    n = int(s.z.shape[0])
    phi = math.fsum(centres)
    centre_abs += abs(math.fsum(centres + [-phi]))
    phi_e = (radius * (1 + 2.0**-30) + centre_abs * (1 + 2.0**-50)) * (1 + 2.0**-44) + (len(centres) + 5) * _fast.ETA
    value = _fast.mul(_fast.Ball.of(s.r), _fast.Ball(np.array(phi), np.array(phi_e)))
    big_l, big_e = float(value.v), float(value.e)
    if not math.isfinite(big_e):
        return None
    r_lo, r_hi = float(s.r) * (1 - 2.0**-50), float(s.r) * (1 + 2.0**-50)  # float(r): within u of r
    k_d = s.denominator_ops + 1
    gn_hi, gd_hi = _up(gamma_mp(max(n - 1, 0), u)), _up(gamma_mp(k_d, u))
    abs_lo, err_lo = abs_lo * _DOWN, err_lo * _DOWN
    bound_lo = (r_lo * (err_lo + abs_lo * (n - 1) * u) + k_d * u * max(abs(big_l) - big_e, 0.0)) * _DOWN
    tail = (n + k_d) * eta * 2  # (n + k_D)·η, doubled: a product of small integers and η, rounded up
    bound_hi = None
    if upper:
        abs_hi, err_hi = abs_hi * _UP, err_hi * _UP
        bound_hi = (r_hi * (err_hi + gn_hi * abs_hi) + gd_hi * (abs(big_l) + big_e) + tail) * _UP
        if not math.isfinite(bound_hi):
            bound_hi = None
    return Enclosure(big_l, big_e, n, (r_lo, r_hi), ((n - 1) * u, gn_hi), (k_d * u, gd_hi), tail,
                     (abs_lo, abs_hi if bound_hi is not None else None),
                     (err_lo, err_hi if bound_hi is not None else None), bound_lo, bound_hi)


def _up(q: Any) -> float:
    """A float >= q >= 0, for q the exact route's own γ (:func:`symjac.check._rounding.gamma_mp`, 200
    bits; float() rounds to nearest: within u relative, or η below 2^-1022)."""
    return float(q) * (1 + 2.0**-50) + _fast.ETA
