"""verify_loss's fast route: ``_filter`` (the float64 filter with proven bounds), ``_verdict`` (the
filter over every block, the exact route where it leaves entries), ``_forward`` / ``_forward_fail``
(the forward decided in float64) and ``_probes`` (the enclosure and finite-difference probes)."""
