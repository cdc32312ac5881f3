"""Files and drives: every gate between WorldPager and the file system.

Owns the input gate (``input_files``: what may be opened as an input, refused in one line;
``bounded_json``: JSON read with size and depth bounds), the output gate (``output_files``: what may be
written, atomically; ``file_lock``: one writer per output; ``durable``: fsync of files and directories;
``cleanup``: what a failed run removes), the drive's facts (``probe``: free space, file system, O_DIRECT;
``limits``: the process's file-size and descriptor limits) and ``resources`` (where the shipped presets,
trajectories, start image and weights live). May import only shared ground (``engine.errors``,
``engine.config``) and itself; no torch.
"""
