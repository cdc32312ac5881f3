"""Batch rendering: many ``generate`` jobs, the model loaded once per worker, a manifest that makes a
re-run skip what is done, resume what was interrupted and retry what failed.

``jobs`` reads a job list (or a glob of trajectories) into checked jobs; ``plan`` turns them into
session configs for a set of workers (spill directories, host memory shares); ``manifest`` is the
bookkeeping in the output directory; ``worker`` runs one job in a process that keeps its model;
``driver`` hands jobs to a backend and records what comes back; ``local`` (worker processes on one
machine) and ``ray_backend`` (actors on a Ray cluster) are the backends.
"""
