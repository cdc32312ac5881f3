"""Does memory keep the world consistent? Quality of the arena model's memory arms against the truth
(``worldpager bench quality``): sessions that start from an observed tour and return both to observed
views and to views the model generated (``revisit_paths``), the revisit classifier (``revisits``),
scores pooled over frames with per-episode means beside them (``revisit_scores``, ``pooled``), retention
with an episode bootstrap, positions past the horizon, long-session drift, the figure and side-by-side
videos; long sessions (``long_*``) and walks scored per class of frame (``walk_*``); the image metrics
themselves, PSNR and SSIM in torch (``metrics``); rows of earlier runs read back, checked and merged
(``rows_read``, ``rows_fields``, ``rows_checks``: ``--from-rows``)."""
