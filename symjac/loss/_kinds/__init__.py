"""The loss kinds: one definition each (:class:`symjac.loss._kind.LossKind`), registered on import.

Importing this package fills :data:`symjac.loss._kind.REGISTRY`, in the order of the
imports below (the order :data:`symjac.loss._spec.KINDS` lists). A new kind is one
module here plus its import below (CONTRIBUTING.md, "Add a loss kind").
"""

from __future__ import annotations

from symjac.loss._kind import REGISTRY, LossKind
from symjac.loss._kinds import regression, sigmoid_ce, bce, softmax_ce, kld, constant_derivative  # noqa: F401
from symjac.loss._kinds import nll, poisson_nll, gaussian_nll  # noqa: F401
from symjac.loss._kinds import hinge_embedding, soft_margin, multilabel_soft_margin, multi_margin  # noqa: F401
from symjac.loss._kinds import margin_ranking, cosine_embedding, triplet_margin  # noqa: F401
from symjac.loss._kinds import ctc  # noqa: F401

__all__ = ["REGISTRY", "LossKind"]
