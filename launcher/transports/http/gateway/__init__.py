"""Gateway mode: each HTTP request's caller from the JWT its identity provider signed, the
provider's keys, and who is admitted and the room each party may hold."""
