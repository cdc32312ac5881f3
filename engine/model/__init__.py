"""The world models and what a session may know of them.

Owns the interface a session drives (``interface``: ``WorldModel``; ``kv_context``: the attention context
it reads and writes; ``registry``: the factory, which imports no family — families register themselves;
``state_tensors``: the convention by which a model's running state goes into a save point) and the
families behind it: MG2 (``mg2``, ``attention``, ``action``, ``rope``, ``vae``, ``clip``, ``scheduler``,
``load``, ``hub``) and LingBot-World-Fast (``lingbot/``), with ``parity/``, the runner of the official
code's fixtures. The session may import only the interface, the context, the registry and
``state_tensors`` (tests/unit/test_dependencies.py); a model imports nothing of the store, retrieval or
the session.
"""
