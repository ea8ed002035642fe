"""Keras on any of its backends: the backend's own autodiff behind a Keras layer or ``keras.ops`` call.

Keras layers and ``keras.ops`` take the same arguments on every backend, so
:mod:`symjac.frameworks.keras` maps them onto specs once; only the differentiation differs:
``tf.GradientTape`` on TensorFlow, ``jax.vjp`` on JAX (:func:`symjac.frameworks.jax.wrap`),
``torch.autograd`` on PyTorch (:func:`symjac.frameworks.torch.wrap`). The backend is Keras's
own (``KERAS_BACKEND``, read when Keras is first imported).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from symjac.frameworks import jax as jax_adapter
from symjac.frameworks import torch as torch_adapter
from symjac.frameworks._adapter import Impl, Unsupported, require
from symjac.frameworks.keras._tape import TAPE, tape

FRAMEWORK = "keras"
BACKENDS = ("tensorflow", "jax", "torch")


def import_keras() -> Any:
    """Keras, on whichever backend it runs (one of :data:`BACKENDS`)."""
    keras = require("keras")
    if keras.backend.backend() not in BACKENDS:
        raise Unsupported(f"Keras runs on the {keras.backend.backend()!r} backend; symjac.frameworks.keras "
                          f"differentiates Keras on {', '.join(BACKENDS)} (set KERAS_BACKEND before importing keras)")
    return keras


def dtype_name(t: Any) -> str:
    """A backend tensor's dtype name: ``"float32"`` for TF, JAX and torch (``torch.float32``) alike."""
    dtype = t.dtype
    return str(getattr(dtype, "name", None) or str(dtype).removeprefix("torch."))


#: What a reproducer does after ``f`` (a function of one tensor) is built, per backend.
_GRADIENT = {
    "tensorflow": "import tensorflow as tf\n",
    "jax": "import jax\nimport jax.numpy as jnp\n",
    "torch": "import torch\n",
}
_AFTER = {
    "tensorflow": TAPE.format(call="f(xt)"),
    "jax": ("y, pullback = jax.vjp(f, jnp.asarray(x))\n(dx,) = pullback(jnp.asarray(dy))\n"
            "print('y =', y); print('dx =', dx)\n"),
    "torch": ("xt = torch.tensor(x, requires_grad=True)\ny = f(xt)\n(dx,) = torch.autograd.grad(y, xt, torch.tensor(dy))\n"
              "print('y =', y.detach().numpy()); print('dx =', dx.numpy())\n"),
}


def backend_impl(call: Callable[[Any], Any], name: str, kwargs: dict[str, Any], build: str) -> Impl:
    """``call`` (a backend tensor -> tensor) as an :class:`Impl` differentiated by Keras's backend;
    ``build`` is the reproducer's line defining ``f``."""
    backend = import_keras().backend.backend()
    reproducer = _GRADIENT[backend] + "import keras\n" + build + _AFTER[backend]
    if backend == "tensorflow":
        return tape(call, name, kwargs, reproducer, FRAMEWORK)
    # JAX: eager (a layer built per dtype inside a jit trace would be rebuilt at every trace)
    impl = jax_adapter.wrap(call, name=name, jit=False) if backend == "jax" else torch_adapter.wrap(call, name=name)
    return Impl(impl.forward, impl.backward, FRAMEWORK, name, kwargs, reproducer)


def wrap(fn: Any, *, name: str | None = None, **kwargs: Any) -> Impl:
    """Turn a Keras layer, model or function of one tensor into an :class:`Impl` on Keras's backend.

    Args:
      fn: called as ``fn(x, **kwargs)`` on a backend tensor of ``x``'s dtype; build a layer with
        ``dtype=`` the dtype you verify in (a layer casts inputs to its dtype policy).
      name: the op name in reports.
      **kwargs: further arguments of every call.
    """
    what = str(name or getattr(fn, "name", None) or getattr(fn, "__name__", None) or type(fn).__name__)
    build = f"# fn = ...  # your {what}\nf = lambda t: fn(t{''.join(f', {k}={v!r}' for k, v in kwargs.items())})\n"
    return backend_impl(lambda t: fn(t, **kwargs), what, dict(kwargs), build)
