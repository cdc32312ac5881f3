"""The arena: our own small world model of MG2's family and the procedural world it is trained on.

* ``world`` / ``render`` — procedural arenas from a seed and the exact renderer (the truth for any pose);
* ``episodes`` / ``data`` — revisit-rich camera paths and the training samples built from them;
* ``config`` / ``model`` / ``weights`` — the network (a causal DiT over pixel patches with camera-ray
  features and a copy head), its shape, its packaged fp16 weights;
* ``reproject`` / ``warp`` — at inference, the pixels of context frames seen from the same place, turned
  to a generated frame's view (re-projection from memory);
* ``train`` — the training recipe (``worldpager train arena``);
* ``pipeline`` / ``family`` — the model behind the ``WorldModel`` interface, as the session runs it;
* ``evaluate`` — memory vs window-only on held-out arenas (``worldpager bench arena``).
"""
