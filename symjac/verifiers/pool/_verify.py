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
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from symjac._errors import InputError, known_keywords
from symjac._exact import as_array, nonfinite_codes
from symjac._progress import with_progress
from symjac.check._call import DEFAULT_TIMEOUT
from symjac.check._report import Report
from symjac.check._unsupported import returns_in
from symjac.pool._beta import Beta
from symjac.pool._geometry import Geometry
from symjac.pool._ops.unpool import MaxUnpool
from symjac.pool._spec import PoolSpec, check_pool_spec
from symjac.verifiers._impl import BEYOND_VJP, derivatives
from symjac.verifiers.pool._infer import hint
from symjac.verifiers.pool._run import run
from symjac.verifiers.unpool._verify import verify_unpool

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


#: Specs that are no window pooling, by type, and the verifier that takes them (with :func:`verify`'s arguments).
OTHER_SPECS: dict[type, Callable[..., Report]] = {MaxUnpool: verify_unpool}

def _by_spec_type(fn: Callable[..., Report]) -> Callable[..., Report]:
    """``fn``, handing a spec of a type in :data:`OTHER_SPECS` to that type's verifier instead."""
    @functools.wraps(fn)
    def verify(spec: Any, impl: Any = None, /, **kwargs: Any) -> Report:
        return OTHER_SPECS.get(type(spec), fn)(spec, impl, **kwargs)
    return verify


#: The derivatives :func:`verify` checks, in report order, with the words its report uses for them.
DERIVATIVES = {"vjp": "vjp", "jvp": "jvp", "double_backward": "double backward", "vmap": "batched rule (vmap)"}


#: Other libraries' words for :func:`verify`'s keywords, which spelling distance would not find.
KEYWORD_SYNONYMS = {"bwd": "backward", "fwd": "forward", "grad": "backward", "vjp": "backward", "shape": "input_shape"}


@known_keywords(KEYWORD_SYNONYMS)
@with_progress("verify")
@_by_spec_type
def verify(spec: PoolSpec, impl: Any = None, /, *, backward: Callable[..., Any] | None = None,
           forward: Callable[..., Any] | None = None,
           jvp: Callable[..., Any] | None = None, double_backward: Callable[..., Any] | None = None,
           vmap: Any = None, transforms: Sequence[str] | None = None,
           input_shape: tuple[int, ...] | None = None, x: Any = None, dy: Any = None, dtype: Any = None,
           tie: str | Beta = "any", seed: int = 0, one_hot_budget: int = 64,
           timeout: float | None = DEFAULT_TIMEOUT, families: Sequence[str] | None = None, isolate: bool = False,
           deterministic: bool = False, hints: bool = True, large: bool = False, progress: Any = None) -> Report:
    """Verify every derivative an implementation defines against the exact ones (docs/transforms.md).

    Args:
      spec: a pooling spec, or a :class:`symjac.MaxUnpool` (:mod:`symjac.verifiers.unpool`).
      impl: the implementation as one object: a :class:`symjac.frameworks.Impl`, an object or dict
        with ``backward``, ``forward``, ``jvp``, ``double_backward`` and/or ``vmap`` entries, or a
        ``torch.autograd.Function`` subclass (its adapter decides which derivatives the class
        defines); every derivative it defines is checked, and the report names each one it lacks
        as not checked, and why. The keyword callables given too replace its own.
      backward: ``backward(x, dy) -> dx`` on NumPy arrays in the spec's layout/dtype; None for a
        forward-only runtime (ONNX Runtime): the forward alone is checked exactly, and the report says so.
      forward: optional ``forward(x) -> y``; enables the forward check and the finite-difference oracle.
      jvp: optional ``jvp(x, t) -> J(x)·t`` (forward mode; t has x's shape, the result y's):
        recovered by colouring the inputs, diagnosed in the VJP's words, at ties a
        Clarke element (with ``backward`` given, ``stats["transforms"]`` says whether it is
        the backward's own).
      double_backward: optional ``double_backward(x, dy, v) -> (ddx, ddy)``, the gradient of
        ``⟨v, J(x)ᵀdy⟩``: ``ddy`` must be ``J(x)·v`` and ``ddx`` the exact ``∇²_x(dyᵀf)·v``
        (0 for average and max pooling; lp pooling's algebraic HVP within its derived bound).
      vmap: optional batching rule: ``vmap(in_axis, out_axis)`` -> the batched ``forward``,
        ``backward`` and/or ``jvp`` (an object or dict; a callable alone is the forward), their
        arrays with one more axis, the batch, at ``in_axis`` (results: ``out_axis``), as
        ``torch.func.vmap(f, in_dims=, out_dims=)`` builds them; or those callables with the batch
        at axis 0 only. Checked one sample at a time at batch sizes 1, 2 and 3, the batch at
        axis 0 and elsewhere. Every derivative is checked at the shapes and input families the
        VJP is, ``tie`` and ``isolate`` apply to each; ``dy`` to the VJP only.
      transforms: the derivatives to check, of ``"vjp"`` (forward and backward), ``"jvp"``,
        ``"double_backward"``, ``"vmap"``; default all the implementation defines. One it
        excludes is named as not checked.
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
        β·J_split + (1−β)·J_first, ``varying``, ``other``; None without ties; a β outside the Clarke
        set is ``tie_beta_outside_clarke``); ``"first"``, ``"last"``, ``"split"`` or
        :class:`symjac.Beta` demand that policy.
      seed: seeds the default inputs.
      one_hot_budget: at most this many one-hot calls for diagnosis.
      timeout: seconds each call of the implementation may take (None: no limit, and calls
        run in the caller's thread); a call that takes longer is a ``timeout`` finding. Calls
        run in a kept thread, a probe plan's handed over at once, each array result copied as
        its call returns (a later change is ``result_changed_after_return``); an implementation
        bound to its thread is called on the caller's thread instead (:mod:`symjac.check._invoke`).
      families: extra input families (docs/coverage.md), a dense call or a probed pass each:
        ``"all_negative"``, ``"near_ties"``, ``"orders"`` (max), ``"extreme"`` (near the dtype's
        overflow threshold) and ``"nonfinite"`` (NaN and ±inf, by each operator's convention;
        ``x`` may hold them too). Default: those that can matter for the spec; ``()`` for none.
        Ties run for max and lp pooling regardless; every derivative's check runs at the same families.
      isolate: call the implementation in a worker process (:mod:`symjac.run._isolate`): an
        abort, segfault or SIGFPE is a ``crashed`` finding naming the signal, a hung call is
        killed at ``timeout``, a call whose ``os.fork()`` child returns too is ``forked``.
      deterministic: the implementation promises bitwise reproducible results: two equal
        calls that differ bitwise within the rounding bound are a ``nondeterministic`` finding,
        not a note (``report.notes``); beyond it, a finding always.
      hints: when the report fails on values a neighbouring convention could explain
        (divisor, SAME upper/lower, ceil rule, layout), name the ones the implementation
        matches exactly (``stats["hint"]`` and the headline).
      large: with no shape given, also verify the plan's index-width shapes
        (``symjac.cover(spec, large=True)``), where 16-bit indices wrap.
      progress: None (default) silent; True a line on a terminal's stderr, a display in Jupyter; a
        callable ``progress(done, total, detail)`` per coverage-plan shape, then ``(total, total, "done")``.

    Returns:
      A :class:`Report`; ``report.ok`` is True when nothing was found. ``stats["transforms"]``
      (with more than the VJP involved) has each derivative's figures, or ``checked: False`` and
      ``why``. A dtype the implementation rejects (every call raises one exception type, and it
      runs in another float dtype, or the type is ``NotImplementedError``) is ``unsupported``
      (``report.verdict == "UNSUPPORTED"``, no finding) when nothing else was checked, else that
      derivative is not checked, and why; raising on some calls only is ``bad_output``. Each
      finding's ``family`` names the input family that exposed it.

    Raises:
      SpecError / InputError: the spec, shape, dtype or inputs are invalid (the
        implementation's own misbehaviour is never raised: it is in the report).
    """
    fns = {"backward": backward, "forward": forward, "jvp": jvp, "double_backward": double_backward, "vmap": vmap}
    explicit = {name for name in BEYOND_VJP if fns[name] is not None} | set(transforms or ())
    fns, lacking, loud = _with_object(impl, fns, selected=transforms is not None or vmap is not None)
    runs, skipped = _at_nonfinite_x(x, *_selection(fns, lacking, transforms), explicit)
    spec = check_pool_spec(spec)  # the one validation: the stages below take the spec as valid
    common = dict(input_shape=input_shape, x=x, dtype=dtype, seed=seed, one_hot_budget=one_hot_budget,
                  timeout=timeout, tie=tie, families=families, isolate=isolate)
    vjp_only = dict(dy=dy, deterministic=deterministic, large=large)
    parts = {name: _check(spec, name, fns, common, vjp_only, hints) for name in runs}
    named = impl is not None or transforms is not None or vmap is not None
    return _merge(repr(spec), parts, skipped, named, explicit | ({"vjp"} if impl is None else set()), loud)


def _at_nonfinite_x(x: Any, runs: list[str], skipped: dict[str, str],
                    explicit: set[str]) -> tuple[list[str], dict[str, str]]:
    """At an x holding NaN or ±inf, an object's own jvp, double backward and batching rule are not
    checked (no exact tangent there), and said so; one the caller named is run (and refuses the x)."""
    if x is None or nonfinite_codes(as_array(x, "x")) is None:
        return runs, skipped
    dropped = [n for n in runs if n in BEYOND_VJP and n not in explicit]
    return [n for n in runs if n not in dropped], {**skipped, **dict.fromkeys(
        dropped, "no exact model at an x holding NaN or ±inf")}


def _with_object(impl: Any, fns: dict[str, Any], selected: bool) -> tuple[dict[str, Any], Mapping[str, str], bool]:
    """The callables (the keyword ones, else the object's own), why each derivative beyond the VJP is
    absent, and whether the headline names what goes unchecked: for a framework's own object (a torch
    Function) or one defining a derivative beyond the VJP, or when the caller selected (``selected``);
    an object of backward/forward alone (a NumPy module, a native kernel) says it in
    ``stats["transforms"]`` only."""
    if impl is None:
        return fns, {name: "not given" for name in BEYOND_VJP}, selected
    own, lacking, framework_object = derivatives(impl)
    loud = selected or framework_object or any(own[n] is not None for n in BEYOND_VJP)
    return {k: v if v is not None else own[k] for k, v in fns.items()}, lacking, loud


def _check(spec: PoolSpec, name: str, fns: Mapping[str, Any], common: dict[str, Any], vjp_only: dict[str, Any],
           hints: bool) -> Report:
    """One derivative's report (``name`` of :data:`DERIVATIVES`), for a ``spec`` its entry checked."""
    if name == "vjp":
        return run(spec, backward=fns["backward"], forward=fns["forward"], hint=_hint if hints else None,
                   **vjp_only, **common)
    if name == "vmap":
        from symjac.verifiers.pool._batched import verify_batched

        return verify_batched(spec, fns["vmap"], reference={k: fns[k] for k in ("forward", "backward", "jvp")},
                              **vjp_only, **common)
    from symjac.verifiers.pool._transforms import verify_transforms

    return verify_transforms(spec, jvp=fns["jvp"] if name == "jvp" else None,
                             double_backward=fns["double_backward"] if name == "double_backward" else None,
                             backward=fns["backward"], **common)


def _selection(fns: Mapping[str, Any], lacking: Mapping[str, str],
               transforms: Sequence[str] | None) -> tuple[list[str], dict[str, str]]:
    """The derivatives to run and why each other is not checked (an :class:`InputError` when none runs)."""
    if transforms is not None:
        if isinstance(transforms, str) or not all(t in DERIVATIVES for t in transforms):
            raise InputError(f"transforms={transforms!r} is not valid: give a sequence of "
                             f"{', '.join(map(repr, DERIVATIVES))}")
    defined = {"vjp": fns["backward"] is not None or fns["forward"] is not None,
               **{name: fns[name] is not None for name in BEYOND_VJP}}
    for name in ("jvp", "double_backward"):
        if defined[name] and not callable(fns[name]):
            raise InputError(f"{name}={fns[name]!r} is not callable: give a function on NumPy arrays")
    why = {"vjp": "the implementation has no backward or forward", **lacking}
    runs, skipped = [], {}
    for name in DERIVATIVES:
        if transforms is not None and name not in transforms:
            skipped[name] = f"excluded by transforms={tuple(transforms)!r}"
        elif defined[name]:
            runs.append(name)
        else:
            skipped[name] = why[name]
    if not runs:
        if not any(defined.values()):
            raise InputError("give backward(x, dy), forward(x), jvp(x, t), double_backward(x, dy, v) and/or vmap "
                             "(a batching rule): there is nothing to verify")
        raise InputError(f"transforms={tuple(transforms or ())!r} selects nothing the implementation defines: "
                         + "; ".join(f"{name}: {text}" for name, text in skipped.items()))
    return runs, skipped


def _merge(subject: str, parts: dict[str, Report], skipped: dict[str, str], named: bool,
           explicit: set[str], loud: bool = True) -> Report:
    """One report of the derivatives' reports: findings in order; the VJP's figures at the top of
    ``stats`` as ever, each derivative's (or ``checked: False`` and ``why``) under
    ``stats["transforms"]``. A derivative the implementation object defines that turns the dtype
    down (``NotImplementedError``, or a dtype it rejects) while another runs is not checked, and
    why; one the caller asked for by name (``explicit``) makes the report ``unsupported``. The
    headline names each one not checked when ``loud`` (and always one turned down)."""
    rejected = {name: r for name, r in parts.items() if r.unsupported and not r.findings and name not in explicit}
    if len(rejected) == len(parts):
        rejected = {}
    skipped = {**skipped, **{name: str(r.unsupported) for name, r in rejected.items()}}
    parts = {name: r for name, r in parts.items() if name not in rejected}
    if list(parts) == ["vjp"] and not named and not rejected:
        return parts["vjp"]
    summary: dict[str, Any] = {}
    for name in DERIVATIVES:
        if name in parts:
            r = parts[name]
            own = r.stats["transforms"][name] if name in ("jvp", "double_backward") else \
                r.stats["vmap"] if name == "vmap" else {"ok": r.ok}
            summary[name] = {**own, "checked": True}
        else:
            summary[name] = {"checked": False, "why": skipped[name]}
    reports = list(parts.values())
    stats = {**(parts["vjp"].stats if "vjp" in parts else {}), "transforms": summary}
    # the derivatives that fail (or turn the dtype down) lead: a wrong JVP is not the tail of "backward matches"
    headline = "; ".join(r.headline for r in sorted(reports, key=lambda r: r.ok))
    unnamed = {name: text for name, text in skipped.items() if (named and loud) or name in rejected}
    if unnamed:
        headline += "; not checked: " + _not_checked(unnamed)
    return Report(subject, tuple(f for r in reports for f in r.findings), stats, headline,
                  tuple(n for r in reports for n in r.notes),
                  "; ".join(r.unsupported for r in reports if r.unsupported) or None, returns_in(reports))


def _not_checked(unnamed: dict[str, str]) -> str:
    """``jvp, double backward: <why>`` per reason (the derivatives one reason leaves out, together):
    ``the implementation object has no jvp, double_backward or vmap`` is said once."""
    by_reason: dict[str, list[str]] = {}
    for name, text in unnamed.items():
        generic = text.replace(f" no {name}", " no {}")
        by_reason.setdefault(generic, []).append(name)
    parts = []
    for why, names in by_reason.items():
        listed = [DERIVATIVES[n] for n in names]
        what = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
        why = why.format(what) if "{}" in why else why
        parts.append(f"{', '.join(listed)} ({why})")
    return "; ".join(parts)
