"""Verify a loss layer's derivative against the exact one, and a family of them at once.

:func:`verify_loss` runs an implementation's derivative (and, if given, its forward)
on NumPy arrays and returns a :class:`symjac.report.Report`. It never crashes on a
misbehaving implementation: raising, wrong shape or dtype, NaN/Inf, changing its
inputs in place and nondeterminism are findings. Bad *inputs* (a label of the
wrong shape, a probability outside [0, 1], ...) are the caller's mistake and raise
:class:`symjac.InputError` / :class:`symjac.SpecError`.

Implementations are called only through the guarded-call core
(:mod:`symjac.check._call`); :mod:`symjac.verifiers.loss._family` checks sibling losses
that share one loss scale S as a table. The stages: the call arguments in the dtype
(:mod:`symjac.verifiers.loss._inputs`), the derivative against the exact one and the
scale findings (:mod:`symjac.verifiers.loss._values`), the forward and the finite
differences (:mod:`symjac.verifiers.loss._fd`); what differs per kind is the kind's
rule (:mod:`symjac.loss._kinds`).

Error bounds
------------
No tolerance here is guessed: the derivative bound ``B_j`` and the forward bounds
``E`` are derived in :mod:`symjac.loss._bounds` (rounding depth, running error and
condition of the SymPy expressions, computed in MPFR at the input).

*Finite differences* of the implementation's own forward ``F``, at the
representable points ``z± = fl(z_j ± h)`` with ``h`` a power of two near
``u^(1/3)·max(1, |z_j|)`` (the optimum order for central differences), narrowed
to stay inside (0, 1) for bce and kld::

    |g_j - S·(F(z+) - F(z-))/(z+ - z-)| <= B_j + S·(|T_j| + (E+ + E-)/(z+ - z-))

``T_j = (Φ(z+) - Φ(z-))/(z+ - z-) - dΦ/dz_j`` is the truncation error, computed
exactly (MPFR) from the spec's loss ``Φ`` (``L``, or ``Σ u_i ℓ_i`` for
``"none"``); ``E±`` are the forward bounds above at ``z±`` (the forward is checked
against them there too); ``B_j`` is the derivative bound. The exact ``T_j`` is
valid when the forward computes the spec's loss, which the forward check
confirms; where it does not, the FD verdict still compares the backward with
the forward's own difference quotients at the same tolerance (and says so).
Stencils that straddle a kink are skipped, and so is pred = 1 for kld (no
centred stencil fits); both are counted in the stats.

Errors are reported in ULPs of the dtype at ``max(|expected|, |observed|)``.

Size
----
:func:`verify_loss` first tries the fast route
(:mod:`symjac.verifiers.loss.fast._filter`): a float64 filter with proven error bounds decides,
block by block, the entries within their bound ``B_j`` and those beyond it, and only the
others (and the few that may be the worst) go through the exact evaluation above; a
failing derivative is classified as here (the same words, the loss scale named). The
verdict is the exact route's, in bounded memory, for mse, sigmoid_ce and softmax_ce with
their options. With a forward of a reduced loss and a derivative decided there,
:mod:`symjac.verifiers.loss.fast._forward` proves the forward's value and the
finite-difference probes within their bounds in float64 where it can, and
:mod:`symjac.verifiers.loss.fast._forward_fail` a value beyond its bound (with the exact
route's findings, every printed number proven); a forward it decides neither way,
``"none"`` with a forward, the other kinds, and a misbehaving call take the exact route,
within ``symjac.loss.MAX_ELEMENTS``; beyond it they are refused. So does a pred holding NaN
or ±inf (:mod:`symjac.verifiers.loss._nonfinite`: its finite elements exact, the kind's
convention at the others): the fast route takes finite inputs only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from symjac import loss as _loss_package
from symjac._errors import InputError, known_keywords
from symjac._progress import with_progress
from symjac.check._call import DEFAULT_TIMEOUT, Guard, same, sha256
from symjac.check._report import Finding, Report
from symjac.check._rounding import finfo, float_dtype, is_float
from symjac.check._unsupported import cast_floats, returns_in, unsupported
from symjac.loss import _numbers
from symjac.loss._bounds import Bounds
from symjac.loss._domain import index as _index
from symjac.loss._evaluate import evaluate_checked
from symjac.loss._families import Nonfinite
from symjac.loss._spec import DPS, Loss, check_loss, kind_of
from symjac.verifiers._impl import implementation
from symjac.verifiers.loss._fd import MAX_FD_PROBES, _ForwardCheck
from symjac.verifiers.loss.fast._verdict import Fast as FastOutcome
from symjac.verifiers.loss.fast._verdict import fast_check
from symjac.verifiers.loss._extras import families_text, family_names, policy_text, run_families
from symjac.verifiers.loss._inputs import _ArgFactory, prepare_inputs
from symjac.verifiers.loss._nonfinite import check_nonfinite
from symjac.verifiers.loss._sequence import verify_whole
from symjac.verifiers.loss._values import _check_values, _Expected, _Misfit

__all__ = ["MAX_FD_PROBES", "prepare_inputs", "verify_loss"]


@dataclasses.dataclass(frozen=True, eq=False)
class _Outcome:
    report: Report
    observed: np.ndarray | None
    expected: np.ndarray
    base: np.ndarray


#: Other libraries' words for :func:`verify_loss`'s keywords, which spelling distance would not find.
KEYWORD_SYNONYMS = {"backward": "derivative", "bwd": "derivative", "grad": "derivative", "fwd": "forward",
                    "target": "label", "input": "pred"}


@known_keywords(KEYWORD_SYNONYMS)
@with_progress("verify_loss")
def verify_loss(loss: Loss, impl: Any = None, /, *, derivative: Callable[..., Any] | None = None,
                forward: Callable[..., Any] | None = None, pred: Any = None, label: Any = None, upstream: Any = None,
                dtype: Any = None, timeout: float | None = DEFAULT_TIMEOUT, hvp: Callable[..., Any] | None = None,
                v: Any = None, deterministic: bool = False, families: Sequence[str] | None = None,
                progress: Any = None) -> Report:
    """Check a loss derivative against the exact ``S·dL/dpred``; every fault a finding.

    The implementation is called on NumPy arrays of ``dtype``: ``derivative(pred, label)`` ->
    ``S·dL/dpred`` (pred's shape and dtype); for ``reduction="none"``, ``derivative(pred, label,
    upstream)`` -> the VJP ``S·Σ_i u_i·dℓ_i/dpred``. ``forward(pred, label)`` -> ``L`` (one number;
    one per element for ``"none"``), unscaled. ``ctc`` takes PyTorch's arguments instead
    (:mod:`symjac.verifiers.loss._sequence`; label ``(targets, input_lengths, target_lengths)``).

    Findings: ``bad_output`` (raises, wrong shape or dtype, NaN/Inf); ``mutates_inputs``
    (pred, label or upstream changed by a call: sha256 checksums in the message; wrong values
    from a second call on the same buffers add ``wrong_values``); ``nondeterministic`` (equal
    calls differ bitwise, one outside the derived bound, or at all with ``deterministic=True``;
    both within it is a note: ``report.notes``, ``stats["nondeterminism"]``); ``missing_scale``
    (the unscaled ``dL/dpred``), ``wrong_scale`` (``c·dL/dpred`` for another, named ``c``) or
    ``wrong_values`` (neither, outside the bound); ``forward_values`` (the forward is not the
    exact ``L``); ``not_fd_consistent`` (not S times the central differences of the
    implementation's own forward, unless a scale finding explains it).

    Bounds are derived in the module docstring, reported in ULPs of ``dtype``. At the default inputs
    the kind's ``extreme`` and ``nonfinite`` families run too (:mod:`symjac.verifiers.loss._extras`;
    ``families`` below); their findings carry the family's name.

    Args:
      loss: the spec (its ``scale`` is S).
      impl: the implementation as one object instead of ``derivative``/``forward``: a
        :class:`symjac.LossImpl` (its ``pred``/``label``/``upstream`` too, when not given here)
        or an object or dict with ``derivative`` (and optionally ``forward`` and ``hvp``: an
        ``hvp`` it defines is checked too; one it lacks is named not checked in the headline and
        ``stats["hvp"]``); ``derivative=``/``forward=``/``hvp=`` given too replace its own.
      derivative, forward: the implementation's derivative callable (or give ``impl``), and its
        forward, optional (the forward and FD checks).
      pred, label, upstream: inputs; default :func:`symjac.losses.default_inputs`. They are rounded
        to ``dtype`` first and the exact analysis uses the rounded values. ``upstream`` only for ``"none"``.
      dtype: ``"float16"``, ``"bfloat16"``, ``"float32"`` or ``"float64"``; default, as :func:`symjac.verify`
        takes x's: the dtype of a float ``pred`` (else of a float ``label``), else float64.
      timeout: seconds a call may take (None: no limit); a longer one is a ``timeout`` finding.
      Given ``forward`` alone (no derivative, no hvp; or a :class:`symjac.LossImpl` with ``derivative=None``,
        a runtime without autodiff), only the forward's values are checked, within their derived bound, and the
        report says the derivative was not checked (:mod:`symjac.verifiers.loss._forward_only`).
      hvp: optional ``hvp(pred, label, v) -> H·v`` (``hvp(pred, label, v, upstream)`` for
        ``"none"``), ``H = S·∂²L/∂pred²``: checked against the exact Hessian within the bound
        derived from the second derivative's expressions (:mod:`symjac.verifiers.loss._hvp`;
        its figures under ``stats["hvp"]``). Give derivative and/or hvp.
      v: the direction of the hvp call (pred's shape; default distinct dyadic values).
      deterministic: the implementation promises bitwise reproducible results: any bitwise difference
        between equal calls is a ``nondeterministic`` finding.
      families: the extra input families to run: ``"extreme"`` magnitudes, where a naive float
        evaluation overflows and the exact values are finite (a NaN or inf there is ``bad_output``),
        and ``"nonfinite"`` NaN/±inf predictions, checked against the kind's convention (as a given
        ``pred`` holding them is). Default: every family the kind has when ``pred`` is not given
        (after the default inputs show no finding), none when it is; ``()``: none.
      progress: as :func:`symjac.verify`'s (a callable gets one step: ``progress(1, 1, "done")``).

    Returns:
      The :class:`symjac.report.Report`; ``report.ok`` when there is no finding. A dtype the derivative,
      forward or hvp rejects (every call raises, all one exception type, and it returns in another float
      dtype, or the type is ``NotImplementedError``), as :func:`symjac.verify` decides it, is ``unsupported``:
      ``report.unsupported`` gives the reason, ``report.verdict`` is ``"UNSUPPORTED"``, its raises no findings.

    Raises:
      SpecError: ``loss`` is not a valid spec for these inputs.
      InputError: bad inputs (shape, domain, class index, dtype, ...), named.

    Example::

        >>> import numpy as np, symjac
        >>> unscaled = lambda z, y: (1 / (1 + np.exp(-z)) - y).astype(z.dtype)
        >>> r = symjac.verify_loss(symjac.Loss("sigmoid_ce", scale=8), derivative=unscaled,
        ...                        pred=[0.0], label=[1.0])
        >>> r.categories()
        ['missing_scale']
    """
    loss = check_loss(loss)  # the one validation: the stages below take the spec as valid
    unchecked = None  # why an implementation object's hvp is not checked
    if impl is not None:
        derivative, forward, pred, label, upstream = _from_impl(impl, derivative, forward, pred, label, upstream)
        if hvp is None:  # every derivative the object defines is checked: its hvp too
            from symjac.verifiers.loss._hvp import own_hvp

            hvp, unchecked = own_hvp(impl)
    if kind_of(loss).whole:  # a sequence loss (ctc): its own route, PyTorch's call signature
        return verify_whole(loss, derivative, forward, pred, label, upstream, dtype, timeout, hvp, families, _dtype)
    if derivative is None and hvp is None:  # a runtime without autodiff, or nothing to verify
        return _forward_only(loss, forward, pred, label, upstream, dtype, timeout)
    second = None if hvp is None else _check_hvp(loss, hvp, pred, label, upstream, v, dtype, timeout)
    if derivative is None:
        assert second is not None
        return second
    first = _verify(loss, derivative, forward, pred, label, upstream, dtype, timeout, fast=True,
                    deterministic=deterministic, families=families).report
    if second is None:  # an object without an hvp (as a pool object of backward and forward alone): in stats only
        return first if unchecked is None else \
            dataclasses.replace(first, stats={**first.stats, "hvp": {"checked": False, "why": unchecked}})
    return _joined(first, second)


def _forward_only(loss: Loss, forward: Callable[..., Any] | None, pred: Any, label: Any, upstream: Any, dtype: Any,
                  timeout: float | None) -> Report:
    """A forward alone: its values checked (:mod:`symjac.verifiers.loss._forward_only`); none: nothing to verify."""
    if forward is None:
        raise InputError("verify_loss needs the implementation: give derivative=(pred, label) -> S·dL/dpred, "
                         "hvp=(pred, label, v) -> H·v, forward=(pred, label) -> L alone (a forward-only check), or "
                         "an implementation object as the second argument: there is nothing to verify")
    from symjac.verifiers.loss._forward_only import verify_forward_only

    return verify_forward_only(loss, forward, pred, label, upstream, _dtype(dtype, pred, label), timeout)


def _joined(first: Report, second: Report) -> Report:
    """The derivative's report and the hvp's as one: the failing one's headline first."""
    rejected = "; ".join(r for r in (first.unsupported, second.unsupported) if r) or None
    return Report(first.subject, first.findings + second.findings, {**first.stats, **second.stats},
                  "; ".join(r.headline for r in sorted((first, second), key=lambda r: r.ok)),
                  first.notes + second.notes, rejected, returns_in((first, second)))


def _check_hvp(loss: Loss, hvp: Callable[..., Any], pred: Any, label: Any, upstream: Any, v: Any, dtype: Any,
               timeout: float | None) -> Report:
    """The hvp's check (:mod:`symjac.verifiers.loss._hvp`), at finite predictions."""
    from symjac.verifiers.loss._hvp import check_hvp, finite_for_hvp

    finite_for_hvp(pred)
    return check_hvp(loss, hvp, pred, label, upstream, v, _dtype(dtype, pred, label), timeout)


def _from_impl(impl: Any, derivative: Any, forward: Any, pred: Any, label: Any, upstream: Any) -> tuple[Any, ...]:
    """``derivative, forward, pred, label, upstream``: those given, else the implementation object's."""
    fns = implementation(impl, loss=True)
    return (derivative or fns["derivative"], forward or fns["forward"],
            *(getattr(impl, k, None) if given is None else given
              for k, given in (("pred", pred), ("label", label), ("upstream", upstream))))


def _verify(
    loss: Loss,
    derivative: Callable[..., Any],
    forward: Callable[..., Any] | None,
    pred: Any,
    label: Any,
    upstream: Any,
    dtype: Any,
    timeout: float | None = DEFAULT_TIMEOUT,
    fast: bool = False,
    deterministic: bool = False,
    families: Sequence[str] | None = None,
) -> _Outcome:
    """The verification; ``fast``: try the fast route first (no forward; the report
    alone: its outcome has no exact arrays), :mod:`symjac.verifiers.loss.fast._filter`. ``loss``
    is a valid spec (its caller's entry checked it). Then the extra ``families``
    (:func:`symjac.verifiers.loss._extras.family_names`; None: the kind's, at the default inputs)."""
    if not isinstance(deterministic, (bool, np.bool_)):
        raise InputError(f"deterministic={deterministic!r} is not valid: give True or False")
    if not callable(derivative):
        raise InputError(f"derivative={derivative!r} is not callable")
    if forward is not None and not callable(forward):
        raise InputError(f"forward={forward!r} is not callable")
    names = family_names(loss, families, pred is None)
    dt = _dtype(dtype, pred, label)
    with_forward = forward is not None
    _check_budget(loss, pred, fast, forward=with_forward)
    p0, l0, u0, rounded = prepare_inputs(loss, pred, label, upstream, dt)
    split = Nonfinite.of(loss, p0)
    if split is not None:  # NaN or inf in pred: the exact route of its finite elements, the convention at its own
        _check_budget(loss, pred, False, forward=with_forward)
        outcome = _nonfinite_outcome(loss, derivative, forward, p0, l0, u0, dt, rounded, timeout, split)
        return _with_families(loss, outcome, names, derivative, forward, dt, timeout)
    if fast:
        got = fast_check(loss, derivative, p0, l0, u0, dt, timeout, forward)
        if got is not None:
            outcome = _fast_outcome(loss, dt, p0, l0, u0, rounded, got, with_forward)
            return _with_families(loss, outcome, names, derivative, forward, dt, timeout)
        _check_budget(loss, pred, False, fast_tried=True, forward=with_forward)
    outcome = _exact_outcome(loss, derivative, forward, p0, l0, u0, dt, rounded, timeout, bool(deterministic))
    return _with_families(loss, outcome, names, derivative, forward, dt, timeout)


def _exact_outcome(loss: Loss, derivative: Callable[..., Any], forward: Callable[..., Any] | None, p0: np.ndarray,
                   l0: np.ndarray | None, u0: np.ndarray | None, dt: np.dtype[Any], rounded: bool,
                   timeout: float | None, deterministic: bool) -> _Outcome:
    """The exact route at finite inputs: three derivative calls, the values, the forward and FD."""
    # the loss values only for the forward check, the bounds where a verdict needs them (Bounds.fill)
    ev = evaluate_checked(loss, p0, l0, u0, values=forward is not None, derivatives=True)
    findings: list[Finding] = []
    stats = _stats(loss, dt, p0, rounded)
    bounds = Bounds(ev, dt)
    args_of = _ArgFactory(loss, p0, l0, u0)
    with _numbers.context():
        ex = _Expected.of(ev, bounds, dt, p0.shape)
        deriv = Guard(derivative, "derivative", args_of.names, findings, timeout=timeout, restore=False)
        notes: list[str] = []
        out1 = _purity_calls(deriv, args_of, ex, dt, findings, stats, notes, deterministic)
        scale_found = _check_values(out1, ex, ev, dt, stats, findings)
        fwd = None if forward is None else Guard(forward, "forward", args_of.names[:2], findings, timeout=timeout)
        if fwd is not None:
            _ForwardCheck(fwd, ev, bounds, args_of, dt, stats, findings).run(out1, ex, scale_found)
        for guard in (deriv, fwd):  # every call is made: the last look at what they returned
            if guard is not None:
                guard.finish()
    stats["checksums"] = {
        name: sha256(a) for name, a in zip(("pred", "label", "upstream"), args_of.originals()) if a is not None
    }
    report = Report(f"{loss!r} in {dt.name}", tuple(findings), stats,
                    _headline(loss, p0.size, forward is not None, stats, findings), tuple(notes))
    if findings:  # a dtype the derivative or forward rejects on every call: unsupported, not a defect
        report = unsupported(report, dt, [(deriv, lambda other: cast_floats(args_of.fresh(), other)),
                                          (fwd, lambda other: cast_floats(args_of.forward_args(), other))])
    return _Outcome(report, out1, ex.value, ex.base)


def _stats(loss: Loss, dt: np.dtype[Any], p0: np.ndarray, rounded: bool) -> dict[str, Any]:
    return {
        "kind": loss.kind,
        "reduction": loss.reduction,
        "scale": loss.scale,
        "dtype": dt.name,
        "unit_roundoff": f"2^-{int(finfo(dt).nmant) + 1}",
        "elements": int(p0.size),
        "inputs_rounded": rounded,
        "dps": DPS,
        "nondeterminism": None,  # equal calls that differed bitwise, each within the bound (a note)
    }


def _fast_outcome(loss: Loss, dt: np.dtype[Any], p0: np.ndarray, l0: np.ndarray | None, u0: np.ndarray | None,
                  rounded: bool, got: FastOutcome, with_forward: bool = False) -> _Outcome:
    """The fast route's report: its findings (the exact route's words) and stats."""
    stats = {**_stats(loss, dt, p0, rounded), **got.stats}
    stats["checksums"] = {name: sha256(a) for name, a in zip(("pred", "label", "upstream"), (p0, l0, u0))
                          if a is not None}
    findings = tuple(got.findings)
    none = np.empty(0, dtype=object)
    return _Outcome(Report(f"{loss!r} in {dt.name}", findings, stats,
                           _headline(loss, p0.size, with_forward, stats, list(findings))), got.observed, none, none)


def _nonfinite_outcome(loss: Loss, derivative: Callable[..., Any], forward: Callable[..., Any] | None,
                       p0: np.ndarray, l0: np.ndarray | None, u0: np.ndarray | None, dt: np.dtype[Any], rounded: bool,
                       timeout: float | None, split: Nonfinite) -> _Outcome:
    """A given pred holding NaN or ±inf (:mod:`symjac.verifiers.loss._nonfinite`): one call each."""
    findings, more, out, expected, base = check_nonfinite(loss, derivative, forward, p0, l0, u0, dt, timeout, split)
    stats = {**_stats(loss, dt, p0, rounded), **more}
    stats["checksums"] = {name: sha256(a) for name, a in zip(("pred", "label", "upstream"), (p0, l0, u0))
                          if a is not None}
    headline = _headline(loss, p0.size - int(split.entries.sum()), forward is not None, stats, findings)
    if not findings:
        headline = headline.replace("; forward within bound; FD-consistent at 0 points", "; forward right")
        headline += f"; at the {int(split.entries.sum())} entries non-finite predictions reach: {policy_text(stats['nonfinite']['policy'])}"
    return _Outcome(Report(f"{loss!r} in {dt.name}", tuple(findings), stats, headline), out, expected, base)


def _with_families(loss: Loss, outcome: _Outcome, names: tuple[str, ...], derivative: Callable[..., Any],
                   forward: Callable[..., Any] | None, dt: np.dtype[Any], timeout: float | None) -> _Outcome:
    """The outcome with the extra families run (:func:`symjac.verifiers.loss._extras.run_families`);
    not when the main inputs already show a finding, nor in a dtype the implementation rejects."""
    report = outcome.report
    if not names or report.findings or report.unsupported:
        return outcome
    findings, ran = run_families(loss, names, derivative, forward, dt, timeout)
    stats = {**report.stats, "families": ran}
    headline = (f"{report.headline}; {families_text(ran)}" if not findings else
                _headline(loss, int(stats["elements"]), forward is not None, stats, findings))
    return dataclasses.replace(outcome, report=dataclasses.replace(report, findings=tuple(findings), stats=stats,
                                                                   headline=headline))


def _dtype(dtype: Any, pred: Any, label: Any) -> np.dtype[Any]:
    """The dtype of the calls: ``dtype`` when given, else a float pred's own dtype (else a
    float label's), else float64 -- as :func:`symjac.verify` reads x's."""
    if dtype is not None:
        return float_dtype(dtype)
    for data in (pred, label):
        found = getattr(data, "dtype", None) if data is not None else None
        if isinstance(found, np.dtype) and (np.issubdtype(found, np.floating) or is_float(found)):
            return float_dtype(found)
    return float_dtype("float64")


def _check_budget(loss: Loss, pred: Any, fast: bool, fast_tried: bool = False, forward: bool = False) -> None:
    """Refuse, before any work, a pred with more entries than ``symjac.loss.MAX_ELEMENTS``
    (the exact route's budget) or, for the fast route, ``symjac.loss.MAX_FAST_ELEMENTS``.
    A ``forward`` the fast route leaves (:mod:`symjac.verifiers.loss.fast._forward`) is
    checked on the exact route, within its budget."""
    if pred is None:  # the default inputs are small
        return
    entries = int(np.prod(np.shape(pred), dtype=np.int64))
    if fast:
        budget = _loss_package.MAX_FAST_ELEMENTS
        if entries > budget:
            raise InputError(
                f"pred has {entries:,d} entries (shape {tuple(np.shape(pred))}), beyond the budget of {budget:,d} "
                f"entries of verify_loss's fast route (about 65 bytes an entry besides the inputs); verify a slice "
                "of the batch, or raise the budget with symjac.loss.MAX_FAST_ELEMENTS"
            )
        return
    budget = _loss_package.MAX_ELEMENTS
    if entries > budget:
        why = ""
        if forward:
            why = (" (with a forward=, the fast route decides a derivative of mse, sigmoid_ce or softmax_ce "
                   "whose reduced forward value it proves within its bound (and the finite-difference probes "
                   "consistent) or beyond it, up to symjac.loss.MAX_FAST_ELEMENTS; this one it did not: a forward "
                   "near its bound, a finding whose numbers it cannot print to the exact route's digits, "
                   "reduction='none' or ignored rows, a finding of the calls. Verify the derivative at this size "
                   "without forward=, and the forward on a slice)")
        elif fast_tried:
            why = (" (the fast route, which decides the derivative of mse, sigmoid_ce and softmax_ce, with their "
                   "options and no forward, at any size up to symjac.loss.MAX_FAST_ELEMENTS, did not take this one: "
                   "a finding of the calls, or a kind without a fast form)")
        raise InputError(
            f"pred has {entries:,d} entries (shape {tuple(np.shape(pred))}), beyond the budget of {budget:,d} "
            f"entries of one verify_loss of {loss.kind} (the exact evaluation holds about 2 KB of 200-bit MPFR numbers "
            f"an entry: about {entries * 2 / 1e6:.3g} GB here){why}; verify a slice of the batch, or raise the budget "
            "with symjac.loss.MAX_ELEMENTS"
        )


def _purity_calls(deriv: Guard, args_of: _ArgFactory, ex: _Expected, dt: np.dtype[Any],
                  findings: list[Finding], stats: dict[str, Any], notes: list[str],
                  deterministic: bool) -> np.ndarray | None:
    """Three derivative calls: on buffers kept to check for mutation, again on the same
    buffers (what a mutation does to the next call), and on equal fresh inputs
    (determinism: :func:`_repeat`). Returns the first call's output (None if unusable)."""
    shape = args_of.pred.shape
    bufs = args_of.fresh()
    out1 = deriv.array(*bufs, shape=shape, dtype=dt, index_name="pred")
    mutated = sorted(deriv.mutated)
    out2 = deriv.array(*bufs, shape=shape, dtype=dt, index_name="pred", again=True)
    if out1 is not None and out2 is not None and not same(out1, out2):
        if not mutated:
            _repeat(deriv, out1, out2, ex, dt, stats, notes, deterministic)
        elif (fit2 := _Misfit.of(out2, ex, dt)).bad:
            bad2 = fit2.bad
            j, err_ulp, bound_ulp = bad2[0]
            findings.append(Finding(
                "wrong_values",
                f"called again on the same buffers, {len(bad2)} of {out2.size} derivative values are wrong "
                f"(it read back the {' and '.join(mutated)} the first call overwrote); worst at "
                f"pred{_index(shape, j)}: error {err_ulp:.3g} ulp > bound {bound_ulp:.3g} ulp",
                cells=(tuple(_index(shape, j)),),
                expected=_numbers.to_mpf(ex.value.reshape(-1)[j]),
                observed=float(out2.reshape(-1)[j]),
            ))
    out3 = deriv.array(*args_of.fresh(), shape=shape, dtype=dt, index_name="pred")
    if out1 is not None and out3 is not None:
        _repeat(deriv, out3, out1, ex, dt, stats, notes, deterministic)
    return out1


def _repeat(deriv: Guard, first: np.ndarray, second: np.ndarray, ex: _Expected, dt: np.dtype[Any],
            stats: dict[str, Any], notes: list[str], deterministic: bool) -> None:
    """Two results of equal calls: equal bitwise; or both within the derived bound of the
    exact value (a note, unless ``deterministic``); else the ``nondeterministic`` finding."""
    if same(first, second):
        return
    if deterministic or _Misfit.of(first, ex, dt).bad or _Misfit.of(second, ex, dt).bad:
        deriv.compare(first, second, "pred")
        return
    differ = int(np.count_nonzero(first != second))
    gap = float(np.abs(first.astype(np.float64) - second.astype(np.float64)).max())
    stats["nondeterminism"] = {"derivative": {"elements": differ, "of": int(first.size), "max_difference": gap}}
    if not notes:
        notes.append(f"derivative gave bitwise different results for equal inputs at {differ} of {first.size} "
                     f"elements (at most {gap:.3g} apart), each within the derived bound of the exact value: a note, "
                     "not a finding (deterministic=True makes it one)")



def _headline(loss: Loss, n: int, with_forward: bool, stats: dict[str, Any], findings: list[Finding]) -> str:
    if findings:
        cats = list(dict.fromkeys(f.category for f in findings))
        return f"{loss.kind} in {stats['dtype']}: {len(findings)} finding(s) [{', '.join(cats)}]: {findings[0].message}"
    headline = (
        f"{loss.kind} in {stats['dtype']}: {n} derivative values within the derived bound "
        f"(worst {float(stats.get('max_error_ulps', 0)):.3g} ulp, bound there "
        f"{float(stats.get('bound_ulps_at_worst', 0)):.3g} ulp)"
    )
    if with_forward and "fd_checked" not in stats and str(stats.get("fd", "")).startswith("skipped: the exact loss"):
        headline += "; forward right (the exact loss overflows: inf); no finite differences"
    elif with_forward:
        headline += f"; forward within bound; FD-consistent at {stats.get('fd_checked', 0)} points"
    if stats.get("nondeterminism"):
        headline += "; derivative not bitwise reproducible, within the bound (a note)"
    return headline


