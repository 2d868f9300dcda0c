"""Questions between a server and the client: a server's request of the client decided,
audited and relayed (:mod:`.server_requests`), made safe to show and send (:mod:`.made_safe`);
the relay asking its client, directly or in a stateless client's rounds (:mod:`.to_client`,
:mod:`.rounds`); a stateless-era server's questions answered for it (:mod:`.input_bridge`)."""
