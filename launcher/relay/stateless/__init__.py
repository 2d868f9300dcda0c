"""The stateless era of MCP as the relay speaks it to its client: the era's forms
(:mod:`.era`) and a stateless client's notification streams (:mod:`.listens`)."""
