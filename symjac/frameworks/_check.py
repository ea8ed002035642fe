"""One call that checks a framework function with the framework's own arguments.

``symjac.frameworks.torch.check(fn, kernel_size=3, stride=2, padding=1)`` is the
``gradcheck(fn, inputs)`` of symjac: the arguments are mapped onto a spec by the adapter's
ready-made op of that name (``max_pool2d``: the mapping documented in the adapter's
docstring, not a copy of it), ``fn`` becomes an :class:`~symjac.frameworks.Impl` through the
adapter's ``wrap`` (its backward is the framework's autodiff), and :func:`symjac.verify`
runs at every shape of the coverage plan (or at ``input_shape``). The JAX and TensorFlow
adapters have the same ``check``; each is this module's :func:`check` with its module.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

from symjac._errors import SpecError
from symjac.check._call import DEFAULT_TIMEOUT


def ops(module: ModuleType) -> dict[str, Callable[..., Any]]:
    """The adapter's ready-made ops: its public functions that return ``(spec, impl)``."""
    found: dict[str, Callable[..., Any]] = {}
    for name, value in vars(module).items():
        returns = str(getattr(value, "__annotations__", {}).get("return", ""))
        if (not name.startswith("_") and name != "make" and inspect.isfunction(value) and returns.startswith("tuple[")
                and "Impl" in returns):
            found[name] = value
    return found


#: The names an adapter module defines for ``check``, ``verify`` and ``conform`` beside its ops
#: (docs/frameworks.md), where it defines them.
PROTOCOL = ("wrap", "adapt", "check", "configurations", "make", "limitation", "known_defect", "loss_configurations",
            "make_loss", "known_loss_defect", "loss_impl", "COMPILED_MODE", "COMPILED_BY_DEFAULT")


def public_names(module: ModuleType, *extra: str) -> list[str]:
    """An adapter module's ``__all__`` (and ``dir()``): its ops, the :data:`PROTOCOL` names it
    defines and ``extra`` (its own documented helpers); not what it imports for itself."""
    return sorted({*ops(module), *(n for n in PROTOCOL if hasattr(module, n)), *extra})


def _snake(name: str) -> str:
    """``MaxPool2d`` -> ``max_pool2d``, ``AdaptiveAvgPool1d`` -> ``adaptive_avg_pool1d``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z][a-z])", "_", name).lower()


def _names(fn: Any) -> list[str]:
    """The names ``fn`` goes by: a ``functools.partial``'s function's, a class's, an instance's class's."""
    target = getattr(fn, "func", fn)
    names = [getattr(target, "__name__", None), getattr(type(target), "__name__", None)]
    return [n for n in names if isinstance(n, str) and n not in ("function", "partial", "type", "builtin_function_or_method")]


def op_of(module: ModuleType, fn: Any, op: str | None) -> str:
    """The ready-made op ``fn`` is checked as: ``op``, else the one ``fn``'s name names (the longest
    op name in it: ``max_pool2d``, ``MaxPool2d``, ``my_avg_pool1d``, ``MaxPooling2D``)."""
    available = ops(module)
    if op is not None:
        if op not in available:
            near = difflib.get_close_matches(str(op), available, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise SpecError(f"op={op!r} is not one of {module.__name__}'s ops{hint}: give one of {', '.join(available)}")
        return op
    names = {n for name in _names(fn) for n in (name, _snake(name))}
    found = sorted((o for o in available if any(o in n or o.lower() in n for n in names)), key=len)
    if not found:
        raise SpecError(f"which op does {_names(fn)[0] if _names(fn) else fn!r} compute? Its name names none of "
                        f"{module.__name__}'s ops: give op=, one of {', '.join(available)}")
    return found[-1]


def _takes(fn: Any, arguments: dict[str, Any], op: str) -> bool:
    """Whether ``fn`` is called with the arguments: its signature names every one (or takes
    ``**kwargs``), or it is the framework's op of that name (a builtin without a signature)."""
    if inspect.isclass(fn) or not arguments:  # a torch.autograd.Function: its apply takes x alone
        return False
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return op in _names(fn)
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return True
    return all(name in parameters for name in arguments)


def _spec_of(module: ModuleType, op: str, arguments: dict[str, Any]) -> Any:
    """The spec the adapter's op maps ``arguments`` onto; an argument the op does not take is a
    :class:`SpecError` naming the op's arguments."""
    build = ops(module)[op]
    parameters = inspect.signature(build).parameters
    for name in arguments:
        if name not in parameters:
            near = difflib.get_close_matches(name, parameters, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise SpecError(f"{op} has no argument {name!r}{hint}: it takes {', '.join(parameters)} "
                            f"(the framework's own names)")
    try:
        spec, _ = build(**arguments)
    except TypeError as exc:  # a required argument missing
        raise SpecError(f"{op}: {exc}; it takes {', '.join(parameters)}") from None
    return spec


def _as_object(module: ModuleType, fn: Any) -> Any:
    """The framework object a bound classmethod stands for: ``Fn.apply`` of a ``torch.autograd.Function``
    subclass is checked (called, named) as ``Fn``, the class the adapter's ``adapt`` takes; any other
    ``fn`` itself. (``Fn.apply``'s signature is ``(*args, **kwargs)``, yet its arguments go to
    ``Fn.forward``, which takes x alone.)"""
    owner = getattr(fn, "__self__", None)
    adapt = getattr(module, "adapt", None)
    return owner if inspect.isclass(owner) and adapt is not None and adapt(owner) is not None else fn


def _is_layer(fn: Any) -> bool:
    """An instance of a callable class (an ``nn.Module``, a Keras layer), not a function or a class."""
    return not (inspect.isclass(fn) or inspect.isroutine(fn) or hasattr(fn, "func"))


def _from_layer(fn: Any, op: str, module: ModuleType, arguments: dict[str, Any]) -> dict[str, Any]:
    """The op's arguments an ``nn.Module`` or Keras layer instance holds as attributes (``MaxPool2d(3, 2, 1)``
    has ``kernel_size``, ``stride``, ``padding``), where not given."""
    parameters = inspect.signature(ops(module)[op]).parameters
    held = {name: getattr(fn, name) for name in parameters if name not in arguments and hasattr(fn, name)}
    return {**held, **arguments}


def check(module: ModuleType, fn: Any, op: str | None, arguments: dict[str, Any], *, input_shape: Any = None,
          dtype: Any = None, tie: Any = "any", seed: int = 0, timeout: float | None = DEFAULT_TIMEOUT,
          isolate: bool = False, progress: Any = None) -> Any:
    """Verify ``fn`` as the adapter ``module``'s op ``op`` with the framework's ``arguments``.

    ``fn`` is wrapped by ``module.wrap``: called as ``fn(x, **arguments)`` when its signature
    takes the arguments (the framework's op itself, a function written after it), else as
    ``fn(x)`` (an ``nn.Module`` or Keras layer, a ``torch.autograd.Function`` or its ``apply``, a
    function with the arguments built in). A layer instance's own attributes fill arguments not given.

    Returns:
      The :class:`symjac.Report`.

    Raises:
      SpecError: no op named or inferable, an argument the op does not take, or a value it refuses.
      FrameworkMissing: the framework is not installed.
    """
    from symjac.verifiers.pool._verify import verify  # deferred: importing an adapter stays light

    fn = _as_object(module, fn)
    op = op_of(module, fn, op)
    if _is_layer(fn):  # its arguments are its own: called as fn(x)
        spec, impl = _spec_of(module, op, _from_layer(fn, op, module, arguments)), module.wrap(fn)
    else:
        spec = _spec_of(module, op, arguments)
        impl = module.wrap(fn, **arguments) if _takes(fn, arguments, op) else module.wrap(fn)
    return verify(spec, impl, input_shape=input_shape, dtype=dtype, tie=tie, seed=seed, timeout=timeout,
                  isolate=isolate, progress=progress)


def _run(framework: str, fn: Any, op: str | None, arguments: dict[str, Any], options: dict[str, Any]) -> Any:
    # the adapter module by name: it re-exports its check from here, so it is loaded already
    return check(importlib.import_module(f"symjac.frameworks.{framework}"), fn, op, arguments, **options)


_OPTIONS = """
    Args:
      fn: the function under test (see below for how it is called).
      op: the adapter's op ``fn`` computes (default: the one ``fn``'s name names).
      input_shape: one full input shape in the framework's layout (default: every shape of the
        coverage plan, :func:`symjac.cover`).
      dtype, tie, seed, timeout, isolate, progress: as for :func:`symjac.verify`.
      **arguments: the op's arguments, in the framework's own names.

    ``fn`` is called as ``fn(x, **arguments)`` when its signature takes the arguments (the
    framework's op itself, a function written after it), else as ``fn(x)`` (a module or layer, a
    custom-gradient function, a ``torch.autograd.Function`` or its ``apply``, a function with the
    arguments built in); a module or layer instance's
    own attributes (``kernel_size``, ``pool_size``, ...) fill the arguments not given.

    Returns:
      The :class:`symjac.Report` (``report.ok``: nothing found).

    Raises:
      SpecError: no op named or inferable from ``fn``'s name, an argument the op does not take
        (named, with the op's arguments), or a value the framework's documentation refuses.
      FrameworkMissing: the framework is not installed.
"""


def _checker(framework: str, doc: str) -> Callable[..., Any]:
    """The adapter module's ``check``: one signature for every framework, its own summary in ``doc``."""
    def framework_check(fn: Any, op: str | None = None, /, *, input_shape: Any = None, dtype: Any = None,
                        tie: Any = "any", seed: int = 0, timeout: float | None = DEFAULT_TIMEOUT,
                        isolate: bool = False, progress: Any = None, **arguments: Any) -> Any:
        return _run(framework, fn, op, arguments, dict(input_shape=input_shape, dtype=dtype, tie=tie, seed=seed,
                                                       timeout=timeout, isolate=isolate, progress=progress))

    framework_check.__name__ = framework_check.__qualname__ = f"{framework}_check"
    framework_check.__doc__ = doc + _OPTIONS
    return framework_check


torch_check = _checker("torch", """Verify a torch function with PyTorch's own pooling arguments, as ``gradcheck(fn, inputs)``.

    ``check(fn, kernel_size=3, stride=2, padding=1)``: the arguments map onto a spec as
    :mod:`symjac.frameworks.torch`'s op of that name maps them (``max_pool2d``, ``avg_pool1d``,
    ``adaptive_max_pool2d``, ...), ``fn`` is wrapped by :func:`symjac.frameworks.torch.wrap`
    (its backward is ``torch.autograd``'s) and :func:`symjac.verify` runs.
""")
jax_check = _checker("jax", """Verify a JAX function with Flax's or ``jax.lax``'s own pooling arguments.

    ``check(fn, "max_pool", window_shape=(3, 3), strides=(2, 2), padding="SAME")``: the arguments
    map onto a spec as :mod:`symjac.frameworks.jax`'s op of that name maps them (``max_pool``,
    ``avg_pool``, ``reduce_window_max``, ``reduce_window_sum``), ``fn`` is wrapped by
    :func:`symjac.frameworks.jax.wrap` (its backward is ``jax.vjp``'s) and :func:`symjac.verify` runs.
""")
tensorflow_check = _checker("tensorflow", """Verify a TensorFlow function with TensorFlow's or Keras' own pooling arguments.

    ``check(fn, "max_pool2d", ksize=3, strides=2, padding="SAME")``: the arguments map onto a spec
    as :mod:`symjac.frameworks.tensorflow`'s op of that name maps them (``tf.nn``'s ``max_pool2d``,
    ``avg_pool1d``, ``pool``; Keras' ``MaxPooling2D``, ...), ``fn`` is wrapped by
    :func:`symjac.frameworks.tensorflow.wrap` (its backward is ``tf.GradientTape``'s) and
    :func:`symjac.verify` runs.
""")
keras_check = _checker("keras", """Verify a Keras layer or function with Keras' own pooling arguments, on any Keras backend.

    ``check(keras.layers.MaxPooling2D(3, 2, dtype="float64"))``: the layer's own ``pool_size``,
    ``strides``, ``padding``, ``data_format`` map onto a spec as :mod:`symjac.frameworks.keras`'s op of
    that name maps them, the layer is wrapped by :func:`symjac.frameworks.keras.wrap` (its backward is
    the backend's autodiff) and :func:`symjac.verify` runs.
""")

