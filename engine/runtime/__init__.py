"""The running process: its log, clocks, threads and optional modules.

Owns ``telemetry`` (the session log: schema, writer, reader), ``pause_clock`` (wall time that leaves out
the time a session stood paused), ``cpu_threads`` (torch's intra-op threads on a CPU) and
``dependencies`` (the third-party modules a command imports only when it runs, and the one line when one
is missing). May import shared ground, ``engine.facts`` and ``engine.files``; never a model, the store,
retrieval or the session.
"""
