"""The execution mode of a conformance cell: ``conform --modes eager,compiled``.

A framework with a compiled mode runs an op's derivatives as separate code there: TensorFlow
traces a ``tf.function`` into a graph and differentiates the graph (its forward accumulator
transposes the graph's gradient), ``jax.jit`` hands XLA one program, ``torch.compile`` hands
Inductor a traced one. Users ship that mode (Keras's ``fit`` runs ``tf.function``), and a
derivative that is right eagerly may be wrong there (TF 2.21: the forward-mode JVP of two stacked
max pools is zero in a ``tf.function``). So each cell is one (configuration, dtype, transform,
mode): ``eager``, or ``compiled``, the adapter's compiled mode (:data:`COMPILED_MODE` of the
adapter module, ``Impl.modes``' key: ``"tf.function"``, ``"jax.jit"``, ``"torch.compile"``). The
table names a compiled column ``transform@mode`` (``jvp@tf.function/float32``); a result records
its ``transform`` and the ``mode`` its callables ran in.

An adapter's :class:`~symjac.frameworks.Impl` runs in ``impl.mode`` and holds the same op in its
other modes in ``impl.modes``; a cell takes the one of its mode (:func:`in_mode`). A transform
with no eager form (TensorFlow's ``tf.vectorized_map`` always traces a graph: the eager ``Impl``'s
``vmap`` runs in ``tf.function``) is checked in the compiled column only, when both run; the
eager cell says so (``skipped``).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from symjac._errors import InputError

#: The modes, in table order.
MODES = ("eager", "compiled")
#: The eager mode's name (``Impl.mode``).
EAGER = "eager"


def check_modes(modes: Sequence[str]) -> tuple[str, ...]:
    """The modes in table order; an :class:`InputError` naming an unknown one."""
    for m in modes:
        if m not in MODES:
            raise InputError(f"mode {m!r} is not valid: give a subset of {', '.join(MODES)}")
    if not modes:
        raise InputError(f"give at least one mode of {', '.join(MODES)}")
    return tuple(m for m in MODES if m in modes)


def compiled_name(adapter: Any) -> str:
    """The adapter's compiled mode (its ``COMPILED_MODE``), or ``"compiled"`` for an adapter that names none."""
    name = getattr(adapter, "COMPILED_MODE", None)
    return name if isinstance(name, str) and name else "compiled"


def default_modes(adapter: Any) -> tuple[str, ...]:
    """``eager`` and, where the adapter has a compiled mode it checks by default (``COMPILED_MODE``;
    ``COMPILED_BY_DEFAULT`` not False: torch.compile takes seconds per shape, so torch's is opt-in),
    ``compiled``."""
    if getattr(adapter, "COMPILED_MODE", None) and getattr(adapter, "COMPILED_BY_DEFAULT", True):
        return MODES
    return (EAGER,)


def in_mode(impl: Any, compiled: bool) -> Any:
    """The :class:`~symjac.frameworks.Impl` of ``impl``'s op in the requested mode (itself or one of its
    ``modes``), or None when the adapter gives none."""
    for candidate in (impl, *getattr(impl, "modes", {}).values()):
        if (getattr(candidate, "mode", EAGER) != EAGER) == compiled:
            return candidate
    return None


def ran_in(impl: Any, transform: str) -> str:
    """The mode ``transform``'s callables of ``impl`` run in (the batched transform's own ``mode``)."""
    batched = getattr(impl, "vmap", None) if transform == "vmap" else None
    return str(getattr(batched if batched is not None else impl, "mode", EAGER))


def known_defect(adapter: Any, config: Any, transform: str, mode: str) -> Any:
    """The adapter's documented defect of ``config`` under ``transform`` in ``mode`` (its name:
    ``"eager"``, ``"tf.function"``, ...). An adapter's ``known_defect`` that takes no ``mode``
    documents every mode alike."""
    from symjac.frameworks.conform._transforms import known_defect as transform_defect

    known = getattr(adapter, "known_defect", None)
    if not callable(known):
        return None
    try:
        takes = "mode" in inspect.signature(known).parameters
    except (TypeError, ValueError):
        takes = False
    return known(config, transform, mode=mode) if takes else transform_defect(adapter, config, transform)
