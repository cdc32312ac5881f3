"""The planner behind ``worldpager plan``: the steady-state model of a session's memory and drive
(``model``), the chunk-by-chunk timeline of write-back contention on a shared drive (``timeline``) and the
short drive probe that measures what the model assumes (``probe``). Torch-free."""
