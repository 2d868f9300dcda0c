"""What the test modules share, one module a subject: where things are (``paths``), the
``sandbox`` mark and ``needs_bwrap`` (``marks``), the isolated user (``home``), programs that
stand in for real ones (``fakes``), running the ``ironcurtain`` command (``cli``), sessions
through the ``mcp`` SDK's client (``sdk``), in raw JSON lines (``client``, also used by the
benchmarks in ``scripts/``) and over ``--http`` (``http``), the probe and faulty test servers
(``probe``, ``faulty``), audit logs (``audit``), a loopback web server (``web``), the
Seatbelt profile reader (``seatbelt``), a fake server connection for the relay core
(``downstream``), and the autorun attacks as data with the user's lefthook and git
(``autorun_attacks``, ``lefthook``).

Fixtures stay in ``tests/conftest.py``; a helper one test module alone uses stays in it; no
test module imports another."""
