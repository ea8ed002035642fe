"""Loss verification: ``_verify`` (the public ``verify_loss``) with ``_inputs``, ``_values`` (the
derivative and scale findings), ``_fd`` (the forward and finite differences), ``_hvp``; ``_family``
(``check_loss_family``); ``fast/``, the float64 route with proven bounds."""
