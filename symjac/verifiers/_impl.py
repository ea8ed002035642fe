"""An implementation object as the callables a verifier calls.

:func:`symjac.verify` and :func:`symjac.verify_loss` take one object in place of
``backward=``/``forward=`` (``derivative=``/``forward=``), as the command line's
``--impl`` and the pytest fixture do (:mod:`symjac.io._case`): all of them read
it here.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

import numpy as np

from symjac._errors import InputError
from symjac.run._load import impl_candidates

if TYPE_CHECKING:
    from symjac.loss._spec import Loss


@dataclasses.dataclass(frozen=True)
class Impl:
    """An implementation under test, NumPy in / NumPy out.

    Attributes:
      forward: ``forward(x) -> y``.
      backward: ``backward(x, dy) -> dx`` through the framework's autodiff; ``None`` for a
        forward-only runtime (ONNX Runtime).
      framework: ``"torch"``, ``"jax"``, ``"tensorflow"``, ``"keras"``, ``"onnxruntime"`` or a user's name.
      op: the op's name (``"max_pool2d"``, ``"AveragePool"``, ...).
      kwargs: the framework-side arguments, as the user passed them.
      reproducer: a self-contained Python snippet that calls the framework op directly on NumPy
        arrays ``x`` (and ``dy``, for its autodiff) defined before it: for an upstream bug report.
      jvp: ``jvp(x, t) -> J(x)·t`` through the framework's forward mode (``None``: it has none).
      double_backward: ``double_backward(x, dy, v) -> (ddx, ddy)``, the gradient of ``<v, J(x)^T dy>``
        with respect to ``x`` and ``dy`` through the framework's own second-order autodiff.
      vmap: the framework's batched (vmapped) forward, backward and jvp as an :class:`Impl` whose
        arrays carry one more leading axis, the vmapped one (``None``: no batching transform);
        :func:`symjac.frameworks.conform._vmap.per_sample` turns it back into a per-sample ``Impl``.
    """

    forward: Callable[[np.ndarray], np.ndarray]
    backward: Callable[[np.ndarray, np.ndarray], np.ndarray] | None
    framework: str
    op: str
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    reproducer: str = ""
    jvp: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    double_backward: Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
    vmap: Impl | None = None


@dataclasses.dataclass(frozen=True)
class LossImpl:
    """One sibling implementation for :func:`check_loss_family`.

    Attributes:
      loss: a :class:`Loss` or a kind name (its scale is replaced by the family's S).
      derivative: as for :func:`verify_loss`.
      forward: optional, as for :func:`verify_loss`.
      pred, label, upstream: inputs (default :func:`symjac.losses.default_inputs`).
      hvp: optional ``hvp(pred, label, v) -> H·v`` (``hvp(pred, label, v, upstream)`` for
        ``reduction="none"``), ``H = S·∂²L/∂pred²``, as for :func:`verify_loss`; the framework
        loss adapters fill it with their second-order autodiff.
      reproducer: a self-contained Python snippet calling the framework's loss on NumPy arrays
        ``pred``, ``label``, ``upstream`` (None unless ``reduction="none"``) and ``v`` defined before
        it, that sets ``derivative`` (unscaled) and ``hvp``: ``conform``'s reproducer scripts.
    """

    loss: Loss | str
    derivative: Callable[..., Any]
    forward: Callable[..., Any] | None = None
    pred: Any = None
    label: Any = None
    upstream: Any = None
    hvp: Callable[..., Any] | None = None
    reproducer: str = ""


#: The entry-point group through which a framework adapter converts its framework's own objects
#: (a ``torch.autograd.Function`` subclass) into an :class:`Impl`: one entry per framework, named by
#: the framework's top-level module, pointing at ``adapt(obj) -> Impl | None`` (pyproject.toml). The
#: verifiers sit below the adapters in the stack, so they reach an adapter only through this table,
#: as pytest reaches its plugins; a user's adapter package can register its framework the same way.
OBJECT_ADAPTERS = "symjac.object_adapters"


@functools.cache
def _adapter_for(framework: str) -> Callable[[Any], Impl | None] | None:
    found = entry_points(group=OBJECT_ADAPTERS, name=framework)
    return next((ep.load() for ep in found), None)


def _adapted(holder: Any) -> Impl | None:
    """``holder`` converted by the adapter of the framework that defined its type (a
    ``torch.autograd.Function`` subclass's type is torch's ``FunctionMeta``), if one takes it;
    a framework's objects exist only once it is imported, so no framework is imported here."""
    framework = type(holder).__module__.partition(".")[0]
    if framework not in sys.modules or isinstance(holder, (Impl, LossImpl, dict)):
        return None
    adapt = _adapter_for(framework)
    return adapt(holder) if adapt is not None else None


def implementation(holder: Any, *, loss: bool, what: str = "") -> dict[str, Any]:
    """The ``backward``/``forward`` (``loss``: ``derivative``/``forward``) callables of an
    implementation object: a :class:`symjac.frameworks.Impl` (or :class:`symjac.LossImpl`), an
    object or dict with those entries, or a ``torch.autograd.Function`` subclass (pooling; called
    through its ``apply``, as :func:`symjac.frameworks.torch.wrap` calls it). ``forward`` is None
    when the object has none; so is ``backward`` for a forward-only runtime's ``Impl`` (ONNX Runtime).

    Raises:
      InputError: the object has neither callable; the message lists the implementations
        found in a module.
    """
    needed = "derivative" if loss else "backward"
    adapted = None if loss else _adapted(holder)  # a torch Function's forward/backward take ctx: its adapter calls it
    holder = adapted if adapted is not None else holder

    def get(name: str) -> Any:
        fn = holder.get(name) if isinstance(holder, dict) else getattr(holder, name, None)
        return fn if callable(fn) else None

    fns = {needed: get(needed), "forward": get("forward")}
    forward_only = not loss and isinstance(holder, Impl) and holder.backward is None and fns["forward"] is not None
    if fns[needed] is None and not forward_only:
        found = impl_candidates(holder, (needed,))
        hint = (f"; candidates: {', '.join(found)}" if found else
                f" (it needs {needed}{'(pred, label)' if loss else '(x, dy)'} and optionally forward)")
        where = f"has no callable {needed!r} {what}" if what else f"{_short(holder)} has no callable {needed!r}"
        raise InputError(f"the implementation {where}{hint}")
    return fns


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 60 else text[:57] + "..."
