"""Pose-keyed retrieval memory policy (numpy only, no torch).

``select``: which past chunks a chunk attends to, scored by camera-frustum overlap (``FovOverlapPolicy``
behind the ``RetrievalPolicy`` protocol), plus the chunk geometry (``ChunkGrid``) and the per-chunk pose
summary (``ChunkPose``) that key the memory. ``predict``: the pose a future chunk will have, extrapolated
from the poses known so far, so its retrieval set can be staged before it is computed. ``hit_rate``:
replays a trajectory and measures how often the predicted set equals the one the real pose selects.
"""
