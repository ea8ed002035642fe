"""Which derivative of a framework op a conformance cell checks: ``conform --transforms``.

A framework implements each derivative as separate code (issue 23): reverse mode (the VJP),
forward mode, second order and batching rules. One conformance cell checks one of them,
each through :func:`symjac.verify` on the adapter's :class:`~symjac.frameworks.Impl`:

========  ============================================================================
``vjp``   ``forward`` and ``backward`` (the framework's reverse mode; the default)
``jvp``   ``forward`` and ``jvp`` (forward mode: J·t)
``hvp``   ``double_backward`` (the derivative of the VJP in x and in dy, i.e. second order)
``vmap``  the batching rule's forward, VJP and JVP, one sample at a time, at batch sizes
          1, 2 and 3 and the batch at axis 0 and elsewhere
          (:mod:`symjac.verifiers.pool._batched`, :class:`symjac.verifiers._vmap.PerSample`)
========  ============================================================================

An adapter without a transform (ONNX Runtime has no autodiff; a user adapter's ``Impl``
without ``jvp``; a ``torch.autograd.Function`` without a ``jvp`` staticmethod: the ``Impl``'s
``missing`` says why) makes the cell ``unsupported``, as does a framework that says it cannot
(``NotImplementedError``: no forward-AD formula, no batching rule, a dtype it lacks).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

from symjac._errors import InputError
from symjac.check._report import Report

#: The transforms, in table order.
TRANSFORMS = ("vjp", "jvp", "hvp", "vmap")
#: The Impl fields each transform needs.
NEEDS = {"vjp": ("backward",), "jvp": ("jvp",), "hvp": ("double_backward",), "vmap": ("vmap",)}


def check_transforms(transforms: Sequence[str]) -> tuple[str, ...]:
    """The transforms in table order; an :class:`InputError` naming an unknown one."""
    for t in transforms:
        if t not in TRANSFORMS:
            raise InputError(f"transform {t!r} is not valid: give a subset of {', '.join(TRANSFORMS)}")
    if not transforms:
        raise InputError(f"give at least one transform of {', '.join(TRANSFORMS)}")
    return tuple(t for t in TRANSFORMS if t in transforms)


def missing(impl: Any, transform: str) -> str | None:
    """Why ``impl`` cannot be checked under ``transform`` (the adapter gives no such callable), or None.

    The ``vjp`` of a forward-only runtime is not missing: its cell checks the forward (as ``conform`` always has)."""
    if transform == "vjp":
        return None
    for name in NEEDS[transform]:
        if getattr(impl, name, None) is None:
            why = (getattr(impl, "missing", None) or {}).get(name)
            return f"{why} ({transform} transform)" if why else \
                f"the adapter gives no {name} for {getattr(impl, 'op', 'this op')} ({transform} transform)"
    return None


def known_defect(adapter: Any, config: Any, transform: str) -> Any:
    """The adapter's documented defect of ``config`` under ``transform`` (an adapter's
    ``known_defect(config)`` that takes no transform documents the VJP's): a
    :class:`~symjac.frameworks.KnownDefect`, a string (any category), or None."""
    known = getattr(adapter, "known_defect", None)
    if not callable(known):
        return None
    try:
        takes = "transform" in inspect.signature(known).parameters
    except (TypeError, ValueError):
        takes = False
    return known(config, transform) if takes else (known(config) if transform == "vjp" else None)


def preflight(impl: Any, transform: str, x: np.ndarray, dy: np.ndarray) -> None:
    """Call the transform's callables once, so that a framework's ``NotImplementedError`` (no
    forward-AD formula, no batching rule, a dtype it lacks) raises here; anything else is left to verify."""
    if transform == "jvp":
        impl.jvp(x.copy(), x.copy())
    elif transform == "hvp":
        impl.double_backward(x.copy(), dy.copy(), x.copy())
    elif transform == "vmap":
        from symjac.verifiers._vmap import PerSample

        sample = PerSample(impl.vmap, _reference(impl))
        for role, args in (("forward", (x,)), ("backward", (x, dy)), ("jvp", (x, x))):
            fn = sample.per_sample(role)
            if fn is not None:
                fn(*(a.copy() for a in args))


def _reference(impl: Any) -> dict[str, Any]:
    """The per-sample op's own callables, which a batched result is compared with where its slots differ."""
    return {role: getattr(impl, role, None) for role in ("forward", "backward", "jvp")}


def verify_transform(spec: Any, impl: Any, transform: str, dtype: np.dtype[Any], seed: int = 0, *,
                     x: np.ndarray | None = None, input_shape: tuple[int, ...] | None = None) -> Report:
    """:func:`symjac.verify` of ``transform`` of ``impl`` at ``x`` (or at ``input_shape``'s default inputs)."""
    from symjac.verifiers.pool._verify import verify

    common: dict[str, Any] = {"x": x, "input_shape": input_shape, "dtype": dtype, "seed": seed}
    if transform == "jvp":
        return verify(spec, forward=impl.forward, jvp=impl.jvp, **common)
    if transform == "hvp":
        return verify(spec, double_backward=impl.double_backward, **common)
    if transform == "vmap":
        from symjac.pool._spec import check_pool_spec
        from symjac.verifiers.pool._batched import verify_batched

        return verify_batched(check_pool_spec(spec), impl.vmap, reference=_reference(impl), **common)
    return verify(spec, forward=impl.forward, backward=impl.backward, **common)

