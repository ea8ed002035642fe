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

    For a :class:`symjac.MaxUnpool` every callable takes the indices after x: ``forward(x, indices)``,
    ``backward(x, indices, dy)``, ``jvp(x, indices, t)``, ``double_backward(x, indices, dy, v)``.

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
      vmap: the framework's batching rule (``None``: none): ``vmap(in_axis, out_axis)`` returns an
        :class:`Impl` (or an object or dict) of the batched ``forward``, ``backward`` and ``jvp``, whose
        array arguments carry one more axis, the batch, at position ``in_axis`` and whose results carry
        it at ``out_axis``, as ``torch.func.vmap(f, in_dims=in_axis, out_dims=out_axis)`` and
        ``jax.vmap(f, in_axes=in_axis, out_axes=out_axis)`` build them; or those batched callables
        themselves, with the batch at axis 0 only (``tf.vectorized_map``, which takes no axes).
        :class:`symjac.verifiers._vmap.PerSample` runs it one sample at a time (docs/transforms.md).
      missing: why a derivative is absent (``"jvp"``, ``"double_backward"``, ``"vmap"`` -> a reason:
        ``"Avg2 defines no jvp staticmethod"``): :func:`symjac.verify` names it "not checked" with it.
      mode: how the framework runs these callables: ``"eager"`` (op by op), or the name of its
        compiled mode (``"tf.function"``, ``"jax.jit"``, ``"torch.compile"``: each callable one
        traced program per shape and dtype).
      modes: the same op in the framework's other modes, by name (a TensorFlow ``Impl`` made
        eagerly has ``modes["tf.function"]``, a ``jax.jit`` one ``modes["eager"]``): each an
        ``Impl`` whose every callable runs in that mode; ``symjac conform`` checks both.
    """

    forward: Callable[[np.ndarray], np.ndarray]
    backward: Callable[[np.ndarray, np.ndarray], np.ndarray] | None
    framework: str
    op: str
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    reproducer: str = ""
    jvp: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    double_backward: Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
    vmap: Callable[[int, int], Any] | Impl | None = None
    missing: Mapping[str, str] = dataclasses.field(default_factory=dict)
    mode: str = "eager"
    modes: Mapping[str, Impl] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class LossImpl:
    """One sibling implementation for :func:`check_loss_family`.

    Attributes:
      loss: a :class:`Loss` or a kind name (its scale is replaced by the family's S).
      derivative: as for :func:`verify_loss`; None for a forward-only runtime (ONNX Runtime): then
        :func:`verify_loss` checks the forward alone and reports the derivative not checked.
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
    derivative: Callable[..., Any] | None
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
    when the object has none; so is ``backward`` (``derivative``) for a forward-only runtime's ``Impl``
    (``LossImpl``: ONNX Runtime).

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
    forward_only = fns["forward"] is not None and (isinstance(holder, LossImpl) and holder.derivative is None if loss
                                                   else isinstance(holder, Impl) and holder.backward is None)
    if fns[needed] is None and not forward_only:
        found = impl_candidates(holder, (needed,))
        hint = (f"; candidates: {', '.join(found)}" if found else
                f" (it needs {needed}{'(pred, label)' if loss else '(x, dy)'} and optionally forward)")
        where = f"has no callable {needed!r} {what}" if what else f"{_short(holder)} has no callable {needed!r}"
        raise InputError(f"the implementation {where}{hint}")
    return fns


#: What :func:`derivatives` reads beyond ``backward``/``forward``: the other derivatives' callables.
BEYOND_VJP = ("jvp", "double_backward", "vmap")


def derivatives(holder: Any) -> tuple[dict[str, Any], dict[str, str], bool]:
    """Every derivative a pooling implementation object defines, and why each other one is absent.

    Returns ``(fns, missing)``: ``fns`` maps ``backward``, ``forward``, ``jvp``, ``double_backward``
    and ``vmap`` to the object's own (None where it has none; ``vmap`` is its batching rule, see
    :class:`Impl`), read from a :class:`symjac.frameworks.Impl`, an object or dict with those entries,
    or a framework's own object through its adapter (a ``torch.autograd.Function`` subclass: the
    adapter decides which derivatives the class defines); ``missing`` maps each of ``jvp``,
    ``double_backward`` and ``vmap`` it lacks to why (an :class:`Impl`'s own ``missing`` reason);
    the flag says whether a framework's adapter converted the object (a ``torch.autograd.Function``).

    Raises:
      InputError: the object has none of them (as :func:`implementation`).
    """
    adapted = _adapted(holder)
    holder = adapted if adapted is not None else holder

    def get(name: str) -> Any:
        fn = holder.get(name) if isinstance(holder, dict) else getattr(holder, name, None)
        return fn if callable(fn) or (name == "vmap" and fn is not None) else None

    fns = {name: get(name) for name in ("backward", "forward", *BEYOND_VJP)}
    if not any(fns.values()):
        implementation(holder, loss=False)  # raises, naming what is missing
    own = dict(holder.missing) if isinstance(holder, Impl) else {}
    what = f"the {holder.framework} adapter gives no {{}} for {holder.op}" if isinstance(holder, Impl) else \
        "the implementation object has no {}"
    missing = {name: own.get(name) or what.format(name) for name in BEYOND_VJP if fns[name] is None}
    return fns, missing, adapted is not None


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 60 else text[:57] + "..."
