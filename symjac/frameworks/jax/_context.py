"""JAX's precision and device for the calls symjac makes (shared by the pool and the loss adapters).

float64 inputs run inside ``jax.enable_x64(True)``, for these calls only: the process-wide
``jax_enable_x64`` flag is left as it was.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from symjac.frameworks._adapter import require


def _jax() -> Any:
    return require("jax")


def precision(dtype: Any) -> contextlib.AbstractContextManager[Any]:
    """64-bit JAX for this block only when ``dtype`` is 64-bit; the global flag is untouched."""
    if np.dtype(dtype).itemsize < 8:
        return contextlib.nullcontext()
    jax = _jax()
    context: contextlib.AbstractContextManager[Any]
    if hasattr(jax, "enable_x64"):
        context = jax.enable_x64(True)
    else:
        context = require("jax.experimental").enable_x64()  # older JAX
    return context


def cpu() -> contextlib.AbstractContextManager[Any]:
    jax = _jax()
    context: contextlib.AbstractContextManager[Any] = jax.default_device(jax.devices("cpu")[0])
    return context
