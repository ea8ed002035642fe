"""Verify an implementation's forward/backward against the exact derivative.

``verify(spec, backward=..., forward=...)`` recovers the implementation's Jacobian
with few backward calls (one per colour of the window conflict graph:
:mod:`symjac.verifiers.pool._probe`), confirms it with a dense random exact dy,
diffs it window by window against the exact Jacobian and checks max pooling at
ties against the Clarke set (:mod:`symjac.verifiers.pool._diagnose`), runs a
second oracle (:mod:`symjac.verifiers.pool._fd`: compressed one-sided differences of
the implementation's own forward), and calls the implementation only through the
guarded-call core (:mod:`symjac.check._call`), so raised errors, bad outputs,
mutated inputs, hangs and nondeterminism are findings. All of it lands in a
:class:`~symjac.Report`; nothing the implementation does crashes symjac.

Float comparisons: an entry obtained from m rounded operations is compared with the
exact value e within ``gamma_{m+2}(u) * sum|terms|`` (Higham's bound for a sum of
m terms, plus one rounding for a weight and one for the output), where u is the
unit roundoff of the dtype; errors are reported in ULPs of the exact value.
"""


from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac.check._call import DEFAULT_TIMEOUT
from symjac.check._report import Report
from symjac.pool._beta import Beta
from symjac.pool._geometry import Geometry
from symjac.pool._spec import PoolSpec, check_pool_spec
from symjac.verifiers._impl import implementation
from symjac.verifiers.pool._infer import hint
from symjac.verifiers.pool._run import run

#: Categories a neighbouring convention can explain (a hint is sought only when every root finding is one):
#: wrong values, and bad outputs (a wrong output shape, or a backward that raises on a dy of the wrong shape).
HINTABLE = ("forward_values", "missing_windows", "partial_windows", "wrong_cells", "wrong_weights",
            "tie_not_subgradient", "not_fd_consistent", "bad_output")


def _hint(spec: PoolSpec, report: Report, forward: Callable[..., Any] | None, backward: Callable[..., Any] | None,
          g: Geometry, dt: np.dtype[Any], seed: int, isolate: bool) -> Report:
    """A failing report whose root findings a neighbouring convention might explain gets a
    hint naming the conventions the implementation matches exactly."""
    roots = [f for f in report.findings if f.consequence_of is None]
    # a wrong dtype or a NaN/Inf is no convention's doing
    if not roots or not all(f.category in HINTABLE and "returned dtype" not in f.message
                            and "non-finite" not in f.message for f in roots):
        return report
    text = hint(spec, forward, backward, g.input_shape, dt, seed, isolate=isolate)
    if text is None:
        return report
    return dataclasses.replace(report, stats={**report.stats, "hint": text}, headline=f"{report.headline}; hint: {text}")


def verify(spec: PoolSpec, impl: Any = None, /, *, backward: Callable[..., Any] | None = None,
           forward: Callable[..., Any] | None = None,
           jvp: Callable[..., Any] | None = None, double_backward: Callable[..., Any] | None = None,
           input_shape: tuple[int, ...] | None = None, x: Any = None, dy: Any = None, dtype: Any = None,
           tie: str | Beta = "any", seed: int = 0, one_hot_budget: int = 64,
           timeout: float | None = DEFAULT_TIMEOUT, families: Sequence[str] | None = None, isolate: bool = False,
           deterministic: bool = False, hints: bool = True, large: bool = False) -> Report:
    """Verify an implementation's backward (and forward) against the exact Jacobian.

    Args:
      spec: a pooling spec.
      impl: the implementation as one object instead of ``backward``/``forward``: a
        :class:`symjac.frameworks.Impl`, an object or dict with ``backward`` (and optionally
        ``forward``), or a ``torch.autograd.Function`` subclass (called through its ``apply``);
        ``backward=``/``forward=`` given too replace its own.
      backward: ``backward(x, dy) -> dx`` on NumPy arrays in the spec's layout/dtype; None for a
        forward-only runtime (ONNX Runtime): the forward alone is checked exactly, and the report says so.
      forward: optional ``forward(x) -> y``; enables the forward check and the
        finite-difference oracle. At least one of backward, forward, jvp and
        double_backward is needed.
      jvp: optional ``jvp(x, t) -> J(x)·t`` (forward mode; t has x's shape, the result y's):
        recovered by colouring the inputs, diagnosed in the VJP's words, at ties a
        Clarke element (with ``backward`` given, ``stats["transforms"]`` says whether it is
        the backward's own). See docs/transforms.md.
      double_backward: optional ``double_backward(x, dy, v) -> (ddx, ddy)``, the gradient of
        ``⟨v, J(x)ᵀdy⟩``: ``ddy`` must be ``J(x)·v`` and ``ddx`` the exact ``∇²_x(dyᵀf)·v``
        (0 for average and max pooling; lp pooling's algebraic HVP within its derived bound).
        Both run in this process (``isolate``, ``dy`` and ``families`` apply to backward and
        forward); ``tie`` applies to the JVP's rows at ties as to the backward's.
      input_shape: the full input shape; or give ``x`` (both only if they agree). With neither, every shape of
        the coverage plan :func:`symjac.cover` is verified and the report combines
        them (each finding names its shape).
      x: input values (default: small integers distinct within every window).
      dy: an upstream gradient for one more dense call, whose expected, observed and
        finite-difference gradients go in ``stats`` (the confirmation call's dy is distinct dyadic values).
      dtype: ``"float16"``, ``"bfloat16"`` (needs ``symjac[bfloat16]``), ``"float32"``
        or ``"float64"``; default: the dtype of a float ``x``, else float64.
      tie: ``"any"`` accepts any routing in the Clarke set at max-pooling ties and names the
        policy seen in ``stats["tie_policy"]`` (``first``, ``last``, ``split``, ``beta:<b>`` for
        β·J_split + (1−β)·J_first, ``varying`` when calls choose different Clarke elements,
        ``other``; None without ties; a β outside the Clarke set is ``tie_beta_outside_clarke``);
        ``"first"``, ``"last"``, ``"split"`` or :class:`symjac.Beta` demand that policy.
      seed: seeds the default inputs.
      one_hot_budget: at most this many one-hot backward calls for diagnosis.
      timeout: seconds each call of the implementation may take (None: no limit, and calls
        run in the caller's thread); a call that takes longer is a ``timeout`` finding. Calls
        run in a kept thread, a probe plan's handed over at once, each array result copied as
        its call returns (a later change is ``result_changed_after_return``); an implementation
        bound to its thread is called on the caller's thread instead (:mod:`symjac.check._invoke`).
      families: extra input families, each one dense backward call (and one forward
        call) per input: ``"all_negative"``, ``"near_ties"`` and/or ``"orders"`` (max
        pooling: ramps and slabs that decide routing whatever the seed, docs/coverage.md).
        Default: those that can matter (all-negative for max pooling whose windows touch
        padding, orders for max pooling, near-ties always); ``()`` for none. Ties run for max pooling regardless.
      isolate: call the implementation in a worker process (:mod:`symjac.run._isolate`): an
        abort, segfault or SIGFPE is a ``crashed`` finding naming the signal, a hung call is
        killed at ``timeout``, a call whose ``os.fork()`` child returns too is ``forked``.
      deterministic: the implementation promises bitwise reproducible results: two equal
        calls that differ bitwise within the rounding bound (GPU atomics) are a
        ``nondeterministic`` finding, not a note (``report.notes``); beyond it, a finding always.
      hints: when the report fails on values a neighbouring convention could explain
        (divisor, SAME upper/lower, ceil rule, layout), check those and name the ones
        the implementation matches exactly (``stats["hint"]`` and the headline).
      large: with no shape given, also verify the plan's index-width shapes
        (``symjac.cover(spec, large=True)``: past 2^16 cells along each axis and per
        plane, batch 1 and 1 channel), where 16-bit indices wrap.

    Returns:
      A :class:`Report`; ``report.ok`` is True when nothing was found. A dtype the
      implementation rejects (every call raises one exception type, and it runs in another
      float dtype, or the type is ``NotImplementedError``) is ``unsupported``
      (``report.unsupported``, ``report.verdict == "UNSUPPORTED"``, no finding); raising on some
      calls only is ``bad_output``. Each finding's ``family`` names the input family that exposed
      it (``stats["families"]`` counts them).

    Raises:
      SpecError / InputError: the spec, shape, dtype or inputs are invalid (the
        implementation's own misbehaviour is never raised: it is in the report).
    """
    if impl is not None:
        fns = implementation(impl, loss=False)
        backward, forward = backward or fns["backward"], forward or fns["forward"]
    if backward is None and forward is None and jvp is None and double_backward is None:
        raise InputError("give backward(x, dy), forward(x), jvp(x, t) and/or double_backward(x, dy, v): "
                         "there is nothing to verify")
    spec = check_pool_spec(spec)  # the one validation: the stages below take the spec as valid
    base = None
    if backward is not None or forward is not None:
        base = run(spec, backward=backward, forward=forward, input_shape=input_shape, x=x, dy=dy, dtype=dtype,
                   tie=tie, seed=seed, one_hot_budget=one_hot_budget, timeout=timeout, families=families,
                   isolate=isolate, deterministic=deterministic, hint=_hint if hints else None, large=large)
        if jvp is None and double_backward is None:
            return base
    from symjac.verifiers.pool._transforms import verify_transforms

    extra = verify_transforms(spec, jvp=jvp, double_backward=double_backward, backward=backward,
                              input_shape=input_shape, x=x, dtype=dtype, seed=seed, one_hot_budget=one_hot_budget,
                              timeout=timeout, tie=tie)
    return extra if base is None else _merge(base, extra)


def _merge(base: Report, extra: Report) -> Report:
    """The VJP's report and the transforms' as one: findings in order, the transforms' figures
    under ``stats["transforms"]`` beside ``"vjp"``."""
    stats = {**base.stats, "transforms": {"vjp": {"ok": base.ok}, **extra.stats["transforms"]}}
    return Report(base.subject, base.findings + extra.findings, stats, f"{base.headline}; {extra.headline}",
                  base.notes + extra.notes, "; ".join(r for r in (base.unsupported, extra.unsupported) if r) or None)
