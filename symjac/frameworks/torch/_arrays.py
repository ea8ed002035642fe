"""NumPy arrays to CPU tensors and back, bfloat16 through ml_dtypes (:mod:`symjac.frameworks.torch`
re-exports these; its pools and its losses use them)."""

from __future__ import annotations

from typing import Any

import numpy as np

from symjac.frameworks._adapter import Unsupported, require


def _torch() -> Any:
    return require("torch")


def to_torch(a: Any) -> Any:
    """A NumPy array as a fresh CPU tensor of the same dtype (bfloat16 through ml_dtypes)."""
    torch = _torch()
    a = np.array(a, copy=True, order="C")
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def to_numpy(t: Any) -> np.ndarray:
    """A tensor (or the first of a tuple, e.g. ``return_indices=True``) as a NumPy array."""
    torch = _torch()
    if isinstance(t, (tuple, list)):
        t = t[0]
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        out: np.ndarray = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return out
    return np.array(t.numpy(), copy=True)


def ints(value: Any, rank: int, field: str, who: str) -> tuple[int, ...]:
    """A torch size argument (an int, or ``rank`` ints) as ``rank`` ints; another length is
    :class:`Unsupported`, naming ``field`` and ``who`` takes it (``"torch's max_unpool2d takes"``)."""
    if isinstance(value, (tuple, list)):
        if len(value) != rank:
            raise Unsupported(f"{field}={value!r}: {who} an int or {rank} ints")
        return tuple(int(v) for v in value)
    return (int(value),) * rank
