"""The session: the chunk loop (``loop``) and its steps — the memory's side of a chunk (``memory``),
positions past the horizon (``positions``), checks before any output is written (``preflight``), save
points (``savepoint`` the file format, ``save`` when and how they are written), ``resume``, ``fork``, and
decoding off the critical path (``decode``). Importing the package imports none of them."""
