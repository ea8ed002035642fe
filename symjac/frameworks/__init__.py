"""Framework adapters: framework code as NumPy ``forward``/``backward`` with its exact spec.

One module per framework, imported on demand (each imports its framework only when used)::

    import symjac.frameworks.torch as sjt
    spec, impl = sjt.max_pool2d(kernel_size=3, stride=2, padding=1, ceil_mode=True)
    symjac.verify(spec, forward=impl.forward, backward=impl.backward, input_shape=(1, 1, 7, 7))

Modules: :mod:`symjac.frameworks.torch`, :mod:`symjac.frameworks.jax` (``jax.lax`` and
``flax.linen``), :mod:`symjac.frameworks.tensorflow` (``tf.nn``, Keras layers and
``keras.ops``), :mod:`symjac.frameworks.onnxruntime` (forward only). The protocol they share
(:class:`Impl`, :class:`Config`, :class:`Unsupported`, :class:`KnownDefect`, :class:`FrameworkMissing`; for losses
:class:`LossConfig` and :class:`symjac.LossImpl`) is small
enough to write an adapter for another framework in a few lines: see ``docs/frameworks.md``.
"""

from __future__ import annotations

from symjac.frameworks._adapter import Config, FrameworkMissing, Impl, KnownDefect, Unsupported
from symjac.frameworks._loss_grid import LossConfig

FRAMEWORKS = ("torch", "jax", "tensorflow", "onnxruntime")

__all__ = ["FRAMEWORKS", "Config", "FrameworkMissing", "Impl", "KnownDefect", "LossConfig", "Unsupported"]
