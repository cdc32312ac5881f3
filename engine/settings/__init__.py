"""How a session is set: the option table, preset overlays and size units (``engine.config`` holds the
dataclasses themselves, as shared ground).

Owns ``options`` (every option declared once: ``generate``, ``plan``, batch job lines and presets read the
same table), ``overlay`` (defaults < preset < flags, strict keys, the resolved config written beside the
output) and ``sizes`` (one rule for byte sizes: ``24G``, ``24GiB``, ``512M``, plain numbers). May import
shared ground, ``engine.facts``, ``engine.files`` and the store's quota rule (``engine.memory.quota``); never a
model or the session.
"""
