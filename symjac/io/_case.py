"""Verify a spec-file case (pooling or loss) against an implementation object.

The one place the command line (``symjac verify``, ``graph --impl``) and the pytest
fixture ``symjac_case`` turn an implementation object and a case into a call of
:func:`symjac.verify` or :func:`symjac.verify_loss`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symjac.check._call import DEFAULT_TIMEOUT
from symjac.pool._ops.unpool import MaxUnpool
from symjac.verifiers._impl import implementation


def case_holder(impl: Any, case: Any) -> Any:
    """The implementation object for ``case``: ``impl``'s attribute named after the case (a family of
    implementations, as seed 003's losses), else ``impl`` itself."""
    return getattr(impl, case.name, impl) if case.name.isidentifier() else impl


def case_callables(impl: Any, case: Any) -> dict[str, Any]:
    """The ``backward``/``forward`` (pooling) or ``derivative``/``forward`` (loss) of
    ``impl`` for ``case``.

    ``impl`` is an object or dict with those entries, or one holding an attribute
    named after the case (a family of implementations, as seed 003's losses); a
    ``torch.autograd.Function`` subclass is called through its ``apply``, as
    :func:`symjac.frameworks.torch.wrap` calls it.

    Raises:
      InputError: the needed callable is missing; the message lists the
        implementations found in a module.
    """
    return implementation(case_holder(impl, case), loss=case.is_loss,
                          what=f"for the {'loss' if case.is_loss else 'pooling'} case {case.name!r}")


def verify_case(case: Any, impl: Any, dtype: str, timeout: float | None = DEFAULT_TIMEOUT,
                deterministic: bool = False, large: bool = False) -> Any:
    """The :class:`symjac.Report` of ``impl`` on ``case`` at the case's inputs, in ``dtype``
    (a pooling case without ``[input]``: at every shape of its coverage plan, with
    ``large`` its index-width shapes too), each call of the implementation limited to
    ``timeout`` seconds (None: no limit); ``deterministic`` as :func:`symjac.verify`'s
    (a bitwise difference between equal calls is a finding). Every derivative the object
    defines is checked, as :func:`symjac.verify` and :func:`symjac.verify_loss` check an object
    (a ``jvp``, a double backward, a batching rule, a loss's ``hvp``)."""
    from symjac.io._specfile import pool_input

    case_callables(impl, case)  # the needed callable is there, or the error names the case
    holder = case_holder(impl, case)
    if case.is_loss:
        from symjac.verifiers.loss._verify import verify_loss

        inputs = {k: np.array(case.inputs[k], dtype=np.float64) if k in case.inputs else None
                  for k in ("pred", "label", "upstream")}
        return verify_loss(case.operator, holder,
                           pred=inputs["pred"], label=inputs["label"], upstream=inputs["upstream"], dtype=dtype,
                           timeout=timeout, deterministic=deterministic)
    from symjac.verifiers.pool._verify import verify

    seed = int(case.inputs.get("seed", 0))
    if "x" not in case.inputs and "shape" not in case.inputs:  # no [input]: the coverage plan
        return verify(case.operator, holder, dtype=dtype, seed=seed, timeout=timeout, tie=case.tie or "any",
                      deterministic=deterministic, large=large)
    if isinstance(case.operator, MaxUnpool):  # a scatter: its values as written, or their shape
        given = case.inputs.get("x")
        return verify(case.operator, holder, x=None if given is None else np.array(given, dtype=np.float64),
                      input_shape=None if given is not None else case.inputs["shape"], dtype=dtype, seed=seed,
                      timeout=timeout)
    _, x, dy = pool_input(case)
    explicit = "x" in case.inputs
    return verify(case.operator, holder, x=x.astype(np.float64) if explicit else None,
                  input_shape=None if explicit else x.shape,
                  dy=dy.astype(np.float64) if "dy" in case.inputs else None, dtype=dtype,
                  seed=seed, timeout=timeout, tie=case.tie or "any", deterministic=deterministic)
