"""Approvals: a human asked about an escalated request (:mod:`.approval`), and what approving
gives a call beyond its server's standing sandbox (:mod:`.grants`)."""
