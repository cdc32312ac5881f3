"""The prompt's text context, cached beside the session so that the UMT5 encoder runs once per prompt.

Owns ``cached_context``: the ``[1, n, d]`` float32 context of a prompt, read from a file in the session's
folder (the log's directory) when one is there for the same prompt and the same encoder, else computed
(``compute()``: the encoder loaded, run, freed) and written there once the run's networks have loaded
(``store``). The file is ``worldpager-text-<prompt hash>-<encoder identity>.npy``: the prompt's SHA-256,
and a hash of what decides the numbers — the encoder file (its resolved path, size and modification
time), the tokenizer folder, the device kind it ran on and its dtype, the padded text length. So a
resumed or forked session, or a batch's jobs with the same prompt, never load the encoder again, and a
different prompt, encoder file or placement computes anew.

The cache never fails a run: a file that is not a regular file, cannot be read, or does not hold a
float32 ``[1, n, d]`` array is ignored (and replaced); a folder that cannot be written is skipped. The
write is atomic (a temporary file renamed over the name).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from engine.errors import InputError
from engine.files.input_files import open_input

PREFIX = "worldpager-text-"
MAX_BYTES = 64 << 20            # 512 tokens x 4096 float32 = 8 MiB; anything much larger is not ours


def encoder_identity(t5_file: Path, tokenizer_dir: Path, device: str, dtype: str, text_len: int) -> str:
    """A short hash of everything that decides the encoder's output (see the module docstring)."""
    st = os.stat(t5_file)
    facts = [str(Path(t5_file).resolve()), st.st_size, st.st_mtime_ns, str(Path(tokenizer_dir).resolve()),
             torch.device(device).type, dtype, text_len]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]


def cache_path(folder: Path, prompt: str, identity: str) -> Path:
    digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]
    return Path(folder) / f"{PREFIX}{digest}-{identity}.npy"


def read_cached(path: Path) -> torch.Tensor | None:
    """The cached context, or None (absent, not a regular file, unreadable or not the right array)."""
    if not path.exists():
        return None
    try:
        with open_input(path, "the text cache") as f:
            array = np.load(f, allow_pickle=False)
    except (InputError, OSError, ValueError, EOFError):
        return None
    if array.dtype != np.float32 or array.ndim != 3 or array.shape[0] != 1 or array.nbytes > MAX_BYTES:
        return None
    return torch.from_numpy(np.ascontiguousarray(array))


def store(path: Path, text: torch.Tensor) -> bool:
    """Write ``text`` to ``path`` atomically; False (and nothing left behind) where the folder refuses it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            np.save(f, text.detach().float().cpu().numpy())
        os.replace(tmp, path)
        return True
    except OSError:
        tmp.unlink(missing_ok=True)
        return False


def cached_context(path: Path | None, compute: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, bool]:
    """(the context, whether it came from the cache); ``path`` None: no cache, always computed."""
    found = None if path is None else read_cached(path)
    if found is not None:
        return found, True
    return compute(), False
