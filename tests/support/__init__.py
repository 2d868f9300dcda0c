"""What the test modules share, one module a subject: where things are (``paths``), skip
marks (``marks``), the isolated user (``home``), running the ``ironcurtain`` command
(``cli``), sessions through the ``mcp`` SDK's client (``sdk``) and in raw JSON lines
(``client``, also used by the benchmarks in ``scripts/``), the probe and faulty test servers
(``probe``, ``faulty``), audit logs (``audit``), the Seatbelt profile reader (``seatbelt``)
and a fake server connection for the relay core (``downstream``).

Fixtures stay in ``tests/conftest.py``; a helper one test module alone uses stays in it."""
