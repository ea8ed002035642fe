"""The verifiers: ``pool/`` (``verify``: the VJP by probes, the forward, finite differences, the JVP and
second order), ``loss/`` (``verify_loss``, ``check_loss_family``, and ``loss/fast/``, the fast route),
and ``_impl`` (an implementation object as the callables they call)."""
