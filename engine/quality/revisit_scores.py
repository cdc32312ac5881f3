"""One session's revisit frames scored by class: the per-episode sums a ``bench quality`` row carries.

Owns what is scored. For each of ``engine.quality.revisits.CLASSES`` (observed returns, those at the
start pose and those elsewhere, generated returns, every revisit, every generated frame) a row holds
the frame count and the sums of the frames' PSNR against the rendered truth, of their SSIM (revisit
classes only: SSIM is float64 and tens of ms a frame on a CPU, so the class of all generated frames has
PSNR only) and, for generated returns, of their PSNR against the frame the same session generated at
the first visit of that pose (the paper's self-consistency). Sums, not means: pooled over frames they
add up across episodes (``engine.quality.pooled``), and a mean per episode is one division away.
"""
from __future__ import annotations

import numpy as np
import torch

from engine.quality.metrics import psnr, ssim
from engine.quality.revisits import Revisits
from engine.quality.session_run import Trace

SSIM_CLASSES = ("observed", "start", "observed_away", "generated", "revisit")


def _ssim(frames: torch.Tensor, truth: torch.Tensor) -> np.ndarray:
    return torch.cat([ssim(frames[i:i + 64], truth[i:i + 64]) for i in range(0, len(frames), 64)]).numpy() \
        if len(frames) else np.zeros(0)


def class_sums(trace: Trace, rv: Revisits) -> dict:
    """Per class: ``frames`` and the sums ``psnr``, ``ssim`` (revisit classes), ``psnr_first`` (generated)."""
    assert trace.frames is not None and len(trace.psnr) == len(rv.revisit), (len(trace.psnr), len(rv.revisit))
    revisit = np.flatnonzero(rv.revisit)
    idx = torch.from_numpy(revisit)
    scores = np.zeros(len(rv.revisit))
    scores[revisit] = _ssim(trace.frames[idx], trace.truth[idx])
    out = {}
    for name, mask in rv.masks().items():
        entry = {"frames": int(mask.sum()), "psnr": float(trace.psnr[mask].sum())}
        if name in SSIM_CLASSES:
            entry["ssim"] = float(scores[mask].sum())
        out[name] = entry
    generated = np.flatnonzero(rv.generated)
    first = torch.from_numpy(rv.first[generated])
    out["generated"]["psnr_first"] = float(psnr(trace.frames[torch.from_numpy(generated)], trace.frames[first]).sum())
    return out
