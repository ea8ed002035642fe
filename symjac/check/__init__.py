"""What every verifier shares: the guarded call, rounding bounds, input generators, Report/Finding."""
