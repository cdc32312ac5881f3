"""The tiered KV store: int4/int8/int2 chunks in a device / host DRAM / disk hierarchy.

Owns the chunk's quantised form (``quant``), the host pool of fixed-size slots (``host_pool``,
``allocator``, ``slots``), the O_DIRECT disk tier (``disk``, ``disk_base``), the background transfers and
write-back (``transfer``), the store that puts them together (``store``, ``manager``: which tier holds
what), the shared types (``types``), the byte budgets (``budget``, ``room``) and the spill directory's quota (``quota``). It knows
nothing of models, retrieval or the session: chunks are ids and bytes of a ``KVLayout``.
"""
