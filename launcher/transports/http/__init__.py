"""``run --http``: the streamable HTTP endpoint (its socket, bounds and bearer token), its
sessions of the handshake era and requests of the stateless era, and gateway mode
(:mod:`.gateway`)."""
