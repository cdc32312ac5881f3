"""LingBot-World-Fast: a causal, KV-cached Wan2.1-14B i2v DiT driven by camera poses (or actions) and a
text prompt, denoised chunk by chunk with four distilled (DMD) steps.

Its configuration is shared ground, torch-free, as MG2's is in ``engine.config``: ``engine.facts.lingbot_config``
(the official constructor config and the loop settings) and ``engine.facts.lingbot_models`` (the named
configurations and the shapes a session and the planner see). Modules: ``camera`` (poses to the
per-pixel control tensor), ``schedule`` (the sigma table and its two look-ups), ``cache`` (the rolling
self-attention KV cache with a sink, and the cross-attention cache), ``dit`` (``WanModelFast``),
``loop`` (the chunk loop of the official ``generate``) and ``weights`` (strict loading). In sessions:
``family`` (the registry entry), ``pipeline`` (the
``WorldModel``) and ``context`` (the DiT's caches as views of the session's attention context). From the
official release folder: ``checkpoint`` (its files and checks), ``text`` (the prompt's UMT5 encoder),
``text_cache`` (its output cached beside the session), ``release_session`` (a session from the folder) and ``download`` (what the hub download fetches).
"""
