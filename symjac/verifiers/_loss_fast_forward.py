"""The forward's fast route: the loss value and the finite-difference probes decided in float64.

After the derivative's fast route (:mod:`symjac.verifiers._loss_fast`) has decided the
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
  probe within these smaller bounds is within the exact route's.

Anything else (a forward value not proven within, a probe not proven consistent, a call
that misbehaves, ``reduction="none"``, a row at ``ignore_index``, a kind without
``fast_value``) returns None: the caller takes the exact route (within
``symjac.loss.MAX_ELEMENTS``, else refused up front), whose words every finding keeps.
NumPy's ``log``/``log1p`` (which the enclosures of sigmoid_ce and softmax_ce use) are not
trusted: each value's radius is proven with symjac's own enclosure of ``exp``
(:data:`symjac.loss._fast.LIBM_ULPS`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from symjac.check._call import Guard
from symjac.check._report import Finding
from symjac.check._rounding import finfo
from symjac.loss import _fast, _numbers
from symjac.loss._bounds import Bounds
from symjac.loss._evaluate import evaluate_checked
from symjac.loss._spec import kind_of
from symjac.verifiers._loss_fast import _Setting
from symjac.verifiers._loss_fd import MAX_FD_PROBES
from symjac.verifiers._loss_inputs import _ArgFactory

_DOWN = 1 - 2.0**-30  # a float64 sum of non-negative terms (blocks of BLOCK, then math.fsum): rounded down


def fast_forward(s: _Setting, forward: Callable[..., Any], derivative_out: np.ndarray, p0: np.ndarray,
                 l0: np.ndarray | None, timeout: float | None) -> dict[str, Any] | None:
    """The forward's stats when its value and every probe are proven within, else None."""
    kind = kind_of(s.loss)
    if s.loss.reduction == "none" or s.counted is not None or l0 is None:
        return None
    findings: list[Finding] = []
    args_of = _ArgFactory(s.loss, p0, l0, None)
    fwd = Guard(forward, "forward", args_of.names[:2], findings, timeout=timeout)
    ref = (p0, l0)
    got = fwd.array(*args_of.forward_args(), shape=(), dtype=None, index_name="loss", reference=ref)
    if got is None or findings or fwd.mutated:
        return None
    info = finfo(s.dt)
    u, eta = 2.0 ** -(int(info.nmant) + 1), float(info.smallest_subnormal)
    k = int(kind.template(s.loss, s.classes).loss_depth)
    g_lo = k * u
    centres: list[float] = []
    centre_abs = radius = abs_lo = err_lo = 0.0
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
        err_lo += max(k, 1) * eta * (stop - start)
    n = int(s.z.shape[0])
    phi = math.fsum(centres)
    centre_abs += abs(math.fsum(centres + [-phi]))
    phi_e = (radius * (1 + 2.0**-30) + centre_abs * (1 + 2.0**-50)) * (1 + 2.0**-44) + (len(centres) + 5) * _fast.ETA
    r = _fast.Ball.of(s.r)
    value = _fast.mul(r, _fast.Ball(np.array(phi), np.array(phi_e)))
    big_l, big_e = float(value.v), float(value.e)
    r_lo = float(s.r) * (1 - 2.0**-50)
    k_d = s.denominator_ops + 1
    abs_lo, err_lo = abs_lo * _DOWN, err_lo * _DOWN
    sums = abs_lo * (n - 1) * u
    bound_lo = (r_lo * (err_lo + sums) + k_d * u * max(abs(big_l) - big_e, 0.0)) * _DOWN
    observed = float(np.asarray(got, dtype=np.float64).reshape(-1)[0])
    if not math.isfinite(big_e) or not (abs(observed - big_l) + big_e) * (1 + 2.0**-44) <= bound_lo:
        return None
    probes = _probes(s, fwd, args_of, derivative_out, (big_l, big_e), (r_lo, (n - 1) * u, k_d * u),
                     (abs_lo, err_lo), u, findings)
    if probes is None or findings:
        return None
    checked, skipped, worst = probes
    return {"fd_checked": checked, "fd_skipped": skipped, "fd_consistent": True,
            "fd_worst_error_over_tolerance_at_most": worst,
            "forward_filter": {"value": observed, "exact_within": big_e, "bound_at_least": bound_lo}}


def _probes(s: _Setting, fwd: Guard, args_of: _ArgFactory, out: np.ndarray, value: tuple[float, float],
            factors: tuple[float, float, float], sums: tuple[float, float], u: float,
            findings: list[Finding]) -> tuple[int, int, float] | None:
    """The exact route's probes (:meth:`symjac.verifiers._loss_fd._ForwardCheck.finite_differences`),
    each proven within its tolerance's lower bound: (checked, skipped, worst |g - fd|/tol_lo), or None."""
    kind = kind_of(s.loss)
    pred = args_of.pred
    size = int(pred.size)
    probes = sorted(set(np.linspace(0, size - 1, min(size, MAX_FD_PROBES)).round().astype(int).tolist()))
    flat_out = out.reshape(-1)
    checked, worst = 0, 0.0
    summed = dataclasses.replace(s.loss, reduction="sum")
    for j in probes:
        z = float(pred.reshape(-1)[j])
        h = kind.fd_step(s.loss, z, 2.0 ** round(math.log2(u ** (1 / 3) * max(1.0, abs(z)))))
        if h is None:
            continue
        zp, zm = s.dt.type(z + h), s.dt.type(z - h)
        step = Fraction(float(zp)) - Fraction(float(zm))
        if step <= 0 or not kind.stencil_inside(s.loss, zm, zp):
            continue
        i = j // s.per
        exact = _element(s, summed, i, j % s.per, (z, float(zp), float(zm)))
        if exact is None:
            return None
        ells, errs, h_j = exact
        obs = []
        for zz in (zp, zm):
            pz = pred.copy()
            pz.reshape(-1)[j] = zz
            label = args_of.label
            assert label is not None
            val = fwd.array(pz.copy(), label.copy(), shape=(), dtype=None, index_name="loss", reference=(pz, label))
            del pz
            if val is None or findings:
                return None
            obs.append(float(np.asarray(val, dtype=np.float64).reshape(-1)[0]))
        with _numbers.context():
            num = _numbers.number
            r, sc, dstep = num(s.r), num(s.loss.scale), num(step)
            trunc = r * (ells[1] - ells[2]) / dstep - r * h_j
            # E± >= r·(Σ_{m≠i} e_m + e_i(z±) + γ_{n-1}·(Σ_{m≠i} |ℓ_m| + |ℓ_i(z±)|)) + γ_{k_D}·|Φ(z±)·r|:
            # the blocks' lower sums less element i's exact terms at z, plus its exact terms at z±
            big_l, big_e = num(value[0]), num(value[1])
            r_lo, g_n, g_d = (num(f) for f in factors)
            abs_lo, err_lo = num(sums[0]) - abs(ells[0]), num(sums[1]) - errs[0]
            e_pm, phi = [], []
            for m in (1, 2):
                phi.append(big_l + r * (ells[m] - ells[0]))  # Φ(z±)·r, within big_e
                low = r_lo * (err_lo + errs[m] + g_n * (abs_lo + abs(ells[m]))) + g_d * (abs(phi[-1]) - big_e)
                e_pm.append(max(low, num(0)) * num(1 - 2.0**-40))
            for o, p_, e in zip(obs, phi, e_pm):  # the forward at z± against the exact value there
                if abs(num(o) - p_) + big_e > e:
                    return None
            tol = sc * (abs(trunc) + (e_pm[0] + e_pm[1]) / dstep)
            fd = sc * (num(obs[0]) - num(obs[1])) / dstep
            miss = abs(num(float(flat_out[j])) - fd)
            if not miss <= tol:
                return None
            worst = max(worst, float(miss / tol) if tol > 0 else 0.0)
        checked += 1
    return checked, len(probes) - checked, worst


def _element(s: _Setting, summed: Any, i: int, slot: int,
             zs: tuple[float, float, float]) -> tuple[list[Any], list[Any], Any] | None:
    """The exact ``ℓ_i`` and its forward bound ``e_i`` at pred entry ``slot`` of element ``i``
    set to each of ``zs``, and ``dℓ_i/dz`` there at the first (MPFR)."""
    rows = []
    for zz in zs:
        zb = np.array(s.z[i:i + 1], dtype=np.float64)
        zb.reshape(-1)[slot] = zz
        rows.append(zb)
    zb = np.concatenate(rows)
    yb = np.concatenate([s.y[i:i + 1]] * 3)
    if s.z.ndim == 1 and _has_columns(s):
        return None  # a per-column option: the element alone would lose its column (the exact route)
    ev = evaluate_checked(summed, zb, yb, None, values=True, derivatives=True)
    bounds = Bounds(ev, s.dt)
    bounds.fill(of="loss")
    ells = list(ev.elements.reshape(-1))
    errs = list(np.asarray(bounds.element(ev.elements.reshape(-1), bounds.cond, bounds.run), dtype=object).reshape(-1))
    return ells, errs, ev.h.reshape(3, -1)[0, slot]


def _has_columns(s: _Setting) -> bool:
    return any(isinstance(getattr(s.loss, name, None), tuple) for name in kind_of(s.loss).options)
