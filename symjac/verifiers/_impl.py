"""An implementation object as the callables a verifier calls.

:func:`symjac.verify` and :func:`symjac.verify_loss` take one object in place of
``backward=``/``forward=`` (``derivative=``/``forward=``), as the command line's
``--impl`` and the pytest fixture do (:mod:`symjac.verifiers._case`): all of them read
it here.
"""

from __future__ import annotations

import sys
from typing import Any

from symjac._errors import InputError
from symjac.frameworks import torch as torch_adapter
from symjac.frameworks._adapter import Impl
from symjac.run._load import impl_candidates


def _torch_function(obj: Any) -> bool:
    """A ``torch.autograd.Function`` subclass (torch is imported by whoever defined one)."""
    torch = sys.modules.get("torch")
    function = getattr(getattr(torch, "autograd", None), "Function", None)
    return isinstance(obj, type) and isinstance(function, type) and issubclass(obj, function)


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
    if not loss and _torch_function(holder):  # its forward/backward take ctx: call it as wrap does
        holder = torch_adapter.wrap(holder)

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
