"""The tests, in three folders:

``unit/``
    In process: no bwrap and no server process (a test may run the ``ironcurtain`` command,
    which checks whether bwrap could sandbox, but needs no working bwrap).
``sandbox/``
    End to end: the real bwrap, real servers, real clients. Every test there is marked
    ``sandbox``.
``attacks/``
    What an agent, a hostile server or a hostile project directory cannot do, each attack
    beside its control (the same attack where the protection is off, or the legitimate use
    next to it). The tests that start bwrap or servers are marked ``sandbox``; the others
    run in process.

``pytest -m "not sandbox"`` runs every in-process test (``unit/`` and the in-process attacks);
``support/`` holds what the modules share, ``servers/`` the test servers, ``data/`` the
fixtures on disk."""
