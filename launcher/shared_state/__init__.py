"""What several instances of one gateway share: approvals given for a session, the circuit
breaker's counts, each caller's requests being served, and the key that seals the state a
question asked in rounds hands out. In this process by default (:mod:`.memory`); in Redis
with ``--state redis://...`` (:mod:`.redis_store`)."""
