"""Model facts: what the rest of the engine knows about a model without running it. Torch-free.

Owns the shapes a session, the store and the planner read — ``layout`` (``KVLayout``: one chunk's stored
KV; ``ModelShape``, ``VideoGrid``), ``kv_format`` (``ChunkFormat``: a stored chunk's bytes in each
format) — and LingBot-World-Fast's configurations (``lingbot_config``: the official constructor config
and loop settings; ``lingbot_models``: the named configurations and their shapes), as ``engine.config``
holds MG2's. May import only shared ground (``engine.errors``, ``engine.config``) and itself; never torch,
a model family, the store or the session.
"""
