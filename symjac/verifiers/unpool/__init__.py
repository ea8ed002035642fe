"""Max unpooling's verifier: the forward, backward, jvp and double backward against the exact ones."""
