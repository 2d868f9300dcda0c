"""The gate: the one decision every request that reaches a server gets (:mod:`.decide`), and
what it consults: the tool pins, the circuit breaker, each caller's places."""
