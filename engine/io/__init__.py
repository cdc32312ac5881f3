"""Inputs and outputs in their formats: trajectories, actions, images and video.

Owns the trajectory readers (``trajectory/``: one module per format and the tracker), camera poses to
MG2's actions and back (``poses``, ``actions``), the start image (``image``), the MP4 writer through PyAV
and its segments (``video``, ``mp4_segments``, ``video_clip``), labels and ``.npy`` files. Format only: it
decides nothing about memory or models.
"""
