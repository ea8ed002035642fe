"""Other libraries' argument names for a pooling spec's fields, for a "did you mean".

``Pool(kernel_size=3)`` (PyTorch's name) is a :class:`symjac.SpecError` naming symjac's
spelling, ``kernel=3``, instead of Python's bare ``TypeError``: the table below maps
PyTorch's, TensorFlow/Keras', JAX/Flax's and ONNX's names (and the value given) onto the
field and value symjac takes. The spec-file reader asks the same table about a TOML key
(``count_include_pad = true`` -> ``divisor = "include_pad"``), in TOML's spelling.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

from symjac._errors import SpecError, did_you_mean


def _layout(value: Any) -> str:
    last = isinstance(value, str) and (value.startswith("NH") or value.startswith("NW") or value.startswith("ND")
                                       or value == "channels_last")
    return "channels_last" if last else "channels_first"


def _same(value: Any) -> Any:
    return value


#: foreign name -> (whose name it is, symjac's field, the value symjac takes for the value given).
FOREIGN = {
    "kernel_size": ("PyTorch's", "kernel", _same),
    "pool_size": ("Keras'", "kernel", _same),
    "ksize": ("tf.nn's", "kernel", _same),
    "window_shape": ("Flax/tf.nn.pool's", "kernel", _same),
    "window_dimensions": ("jax.lax's", "kernel", _same),
    "kernel_shape": ("ONNX's", "kernel", _same),
    "strides": ("TensorFlow/Keras/Flax/ONNX's", "stride", _same),
    "window_strides": ("jax.lax's", "stride", _same),
    "dilations": ("ONNX's", "dilation", _same),
    "window_dilation": ("jax.lax's", "dilation", _same),
    "dilation_rate": ("tf.nn.pool's", "dilation", _same),
    "pads": ("ONNX's", "padding", lambda v: "((low, high), ...) per spatial dimension"),
    "auto_pad": ("ONNX's", "padding", lambda v: str(v).lower().replace("same_upper", "same").replace("notset", "valid")),
    "count_include_pad": ("PyTorch/ONNX's", "divisor", lambda v: "include_pad" if v else "exclude_pad"),
    "divisor_override": ("PyTorch's", "divisor", _same),
    "data_format": ("TensorFlow/Keras'", "layout", _layout),
    "norm_type": ("PyTorch's", "p", _same),
    "pooling_type": ("tf.nn.pool's", "mode", lambda v: "avg" if str(v).upper() == "AVG" else str(v).lower()),
}


_Class = TypeVar("_Class", bound=type)


def python_text(field: str, value: Any) -> str:
    return f"{field}={value!r}"


def toml_text(field: str, value: Any) -> str:
    spelled = json.dumps(value) if isinstance(value, (str, bool, int)) else repr(value)
    return f"{field} = {spelled}"


def foreign_hint(name: str, value: Any, text: Callable[[str, Any], str] = python_text,
                 fields: tuple[str, ...] | None = None) -> str | None:
    """``"kernel_size is PyTorch's name: symjac's is kernel=3"`` for a foreign argument name whose
    field is one of ``fields`` (default: any), else None."""
    if name not in FOREIGN or fields is not None and FOREIGN[name][1] not in fields:
        return None
    whose, field, convert = FOREIGN[name]
    return f"{name} is {whose} name: symjac's is {text(field, convert(value))}"


def accept_only_fields(cls: _Class) -> _Class:
    """Make a dataclass's constructor refuse an unknown keyword with a :class:`SpecError` naming
    symjac's spelling (another library's name) or the nearest field (a typo)."""
    init = vars(cls)["__init__"]
    fields = tuple(f.name for f in dataclasses.fields(cls))

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        for name in kwargs:
            if name not in fields:
                hint = foreign_hint(name, kwargs[name], fields=fields)
                text = f"; {hint}" if hint else did_you_mean(name, fields)
                raise SpecError(f"{cls.__name__}() has no argument {name!r}{text}; its arguments are "
                                f"{', '.join(fields)}")
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls
