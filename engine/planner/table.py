"""The human table of ``worldpager plan``: every figure it prints is also in the command's JSON line.

Owns the lines of the plan (pool, formats, tiers, drive, stalls, timeline, quota), the whole device's
(``engine.planner.device``: weights and how they sit, KV, activations, context, reserve, PCIe, compute,
predicted chunk time) and ``PlanInputs``, which of the inputs were given or measured and which are assumed
(marked ``(assumed*)`` and listed under ``assumed`` in the JSON). No torch, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.planner import model as planner
from engine.planner.device import DevicePlan

GiB = 1 << 30


def _gbps(rate: float | None) -> str:
    return "uncapped" if rate is None else f"{rate / 1e9:.3f} GB/s"


def _at(model, chunks: int | None) -> str:
    """``chunk N (m:ss of video)`` or ``unbounded``."""
    if chunks is None:
        return "unbounded"
    s = planner.video_seconds(model, chunks)
    return f"chunk {chunks} ({int(s // 60)}:{s % 60:04.1f} of video)"


def table_lines(p: planner.Plan, model, budgets: planner.Budgets, drive_source: str,
                inputs: "PlanInputs | None" = None) -> list[str]:
    """The human table; every figure is also in the JSON line. Assumed inputs are marked as such."""
    mark = (lambda name: "") if inputs is None else (lambda name: inputs.mark(name, budgets))
    lines = [f"plan: {p.model}, store {p.store}, {p.format} KV, k={p.retrieve_k}, {p.chunks} chunks "
             f"({p.video_s / 60:.1f} min of video), chunk {p.chunk_s * 1e3:.0f} ms{mark('chunk_ms')}",
             _pool_line(p, budgets) + mark("host_baseline"),
             *([] if p.device is None else device_lines(p.device, mark("device_runtime"))),
             "",
             f"{'format':<8}{'bytes/chunk':>14}{'slot bytes':>14}",]
    lines += [f"{f:<8}{b:>14,}{-(-b // 4096) * 4096:>14,}" for f, b in p.bytes_by_format.items()]
    lines += ["", f"{'tier-format':<14}{'spill chunk':>12}  video before it"]
    lines += [f"{tier:<14}{n:>12}  {planner.video_seconds(model, n) / 60:6.2f} min" for tier, n in p.spill_chunk.items()]
    disk = ("none (give --spill DIR or --drive-bw GBPS)" if not p.disk_tier else
            f"read {_gbps(p.drive.read)}, write {_gbps(p.drive.write)} ({drive_source})")
    lines += ["",
              f"drive             {disk}",
              f"storage (all KV)  {p.storage_bytes / GiB:.1f} GiB ({p.chunks} x {p.slot_bytes:,} B)",
              f"disk tier holds   {p.disk_bytes / GiB:.1f} GiB"
              + (f" (chunks from {p.session_spill_chunk} on)" if p.uses_disk else "")
              + ("" if p.disk_free_bytes is None else f"; {p.disk_free_bytes / GiB:.1f} GiB free"
                 + (" - TOO SMALL" if p.disk_bytes > p.disk_free_bytes else "")),
              f"write-back need   {p.writeback_Bps / 1e9:.3f} GB/s (b / chunk time)",
              f"read need         {p.read_Bps / 1e9:.3f} GB/s ({p.disk_reads_per_chunk:g} chunk(s) per chunk "
              f"from the drive)",
              f"stalls            {_stall_text(p)}",
              f"shared drive      reads {p.read_s * 1e3:.0f} ms + write-back {p.write_s * 1e3:.0f} ms per chunk "
              f"(once reading from the drive)",
              f"on-demand stall   {p.on_demand_stall_ms:.0f} ms per chunk once reading from the drive",
              f"timeline          {_timeline_text(p)}",
              f"session stops     {_at(model, p.stop_chunk) if p.stop_chunk is not None else 'no'}",
              f"longest zero-stall session  {_at(model, p.max_zero_stall_chunks)}"]
    return lines


def device_lines(d: DevicePlan, runtime_mark: str = "") -> list[str]:
    """The whole device (``engine.planner.device``): where every GiB goes, PCIe, compute, chunk time."""
    r, gib = d.residency, (lambda b: f"{b / GiB:6.2f} GiB")
    how = "chosen by the plan" if d.chosen else "as set"
    blocks = (f"all {r.blocks} DiT blocks resident" if not r.streamed else
              f"{r.resident} of {r.blocks} DiT blocks resident, {r.streamed} streamed through 2 slots of "
              f"{d.block_bytes / GiB:.2f} GiB")
    text = {"cpu": "; the text encoder runs on the CPU", "device": "; the text encoder on the device",
            "none": ""}[d.text_encoder]
    budget = "no device budget" if d.budget is None else f"{d.total / GiB:.2f} of {d.budget / GiB:.2f} GiB"
    assumed = " (assumed*)"
    lines = ["", f"device ({how}): {d.weights_format} weights, {blocks}; KV per {d.kv_paging}",
             f"  weights      {gib(d.weight_bytes)} (blocks + slots {r.device_bytes / GiB:.2f}; the rest of the "
             f"DiT and the {d.aux_label}, bf16, {d.fixed_weight_bytes / GiB:.2f}{text})",
             f"  KV           {gib(d.kv_bytes)} (bf16, " + ("2 layers x (memory + window + current chunk); the staging in host memory)"
                                                          if d.kv_paging == "layer" else "every layer's context)"),
             f"  activations  {gib(d.activations)}{runtime_mark}",
             f"  CUDA context {gib(d.context)}{runtime_mark}",
             f"  reserve      {gib(d.reserve)}{runtime_mark} (allocator; MG2's fitted runtime less its estimates)",
             f"  total        {budget}",
             f"  host pinned  {gib(d.host_bytes)} (streamed blocks" + (", every layer's KV context, the KV staging)"
                                                                     if d.kv_paging == "layer" else ")"),
             f"  PCIe         {d.pcie_bytes_per_chunk / 1e9:.1f} GB a chunk: {d.pcie_s:.2f} s at {d.pcie_gbs:g} GB/s"
             + (assumed if "pcie_gbs" in d.assumed else "")]
    if d.compute_s is not None:
        lines += [f"  compute      {d.compute_s:.2f} s a chunk on {d.gpu}{assumed} (2 x DiT parameters x tokens x "
                  "passes / TFLOPS x efficiency)",
                  f"  chunk        {d.chunk_s_predicted:.2f} s predicted (the longer of compute and PCIe)"]
    return lines


def _pool_line(p: planner.Plan, budgets: planner.Budgets) -> str:
    if budgets.pool_slots is not None:
        return f"pool {p.pool_slots} slots of {p.slot_bytes:,} B (--pool-slots) = {p.pool_bytes / GiB:.2f} GiB"
    staging = "" if not budgets.host_staging else f" - CPU staging {budgets.host_staging / GiB:.2f}"
    return (f"host {budgets.host / GiB:.2f} GiB - baseline {budgets.host_baseline / GiB:.2f}{staging} - margin "
            f"{budgets.margin / GiB:.2f} = pool {p.pool_bytes / GiB:.2f} GiB ({p.pool_slots} slots)")


def _timeline_text(p: planner.Plan) -> str:
    if p.reads_from is None:
        return "not replayed (no drive reads in this session, or a store it does not model)"
    first = "no chunk waits" if p.first_stall_chunk is None else f"first wait at chunk {p.first_stall_chunk}"
    reads = f"reads from chunk {p.reads_from}" if p.reads_from < p.chunks else "no reads from the drive"
    return (f"{reads}: {first}; stall P50 {p.stall_p50_ms:.0f} / P99 {p.stall_p99_ms:.0f} / max "
            f"{p.stall_max_ms:.0f} ms from the first eviction (chunk {p.session_spill_chunk}) on")


def _stall_text(p: planner.Plan) -> str:
    if p.store == "sync" and p.stall_predicted:
        return "YES: sync copies the retrieved set synchronously every chunk"
    if p.store == "on-demand" and p.stall_predicted:
        return f"YES: every read from the drive is waited for (about {p.on_demand_stall_ms:.0f} ms per chunk)"
    if not p.uses_disk:
        return "none (the session never reads from the drive)"
    if not p.stall_predicted and p.prefetch_stall_ms <= 0:
        return f"none predicted (no wait at {p.threshold_Bps / 1e9:.3f} GB/s or more, even in strict turns)"
    if p.first_stall_chunk is not None:
        return (f"YES: from chunk {p.first_stall_chunk}, P50 {p.stall_p50_ms:.0f} / P99 {p.stall_p99_ms:.0f} ms "
                f"(timeline); at most {p.prefetch_stall_ms:.0f} ms if reads and write-back took strict turns")
    return (f"none in this session (timeline); reads and write-back in strict turns would wait "
            f"{p.prefetch_stall_ms:.0f} ms a chunk (one drive needs {p.threshold_Bps / 1e9:.3f} GB/s)")


@dataclass(frozen=True)
class PlanInputs:
    """Which of the plan's inputs were given or measured, and which are assumed (the paper's MG2 on an
    RTX 4090): the chunk time, the host process baseline, the device runtime beside the weights."""

    chunk_given: bool
    host_baseline_given: bool
    device_runtime_given: bool

    @classmethod
    def of(cls, cfg, opts, wall_ms, baseline_gib, baseline_from, device_baseline_gib, measured) -> "PlanInputs":
        chunk = wall_ms is not None or opts.get("chunk_ms") is not None
        host = baseline_gib is not None or baseline_from is not None or (
            measured is not None and measured.host_baseline is not None)
        return cls(chunk, host, device_baseline_gib is not None)

    def assumed(self, budgets: planner.Budgets) -> list[str]:
        names = [("chunk_ms", self.chunk_given), ("host_baseline", self.host_baseline_given),
                 ("device_runtime", self.device_runtime_given or budgets.device is None)]
        return [name for name, known in names if not known]

    def mark(self, name: str, budgets: planner.Budgets) -> str:
        return " (assumed*)" if name in self.assumed(budgets) else ""

    def footnote(self, budgets: planner.Budgets) -> list[str]:
        assumed = self.assumed(budgets)
        if not assumed:
            return []
        how = ", ".join(ASSUMED[name] for name in assumed)
        return ["", f"* assumed: the paper's MG2 on an RTX 4090, not measured here; replace with {how}",
                "  (device figures: estimates of engine/planner/device.py; GPU throughput and PCIe: spec sheets)"]


ASSUMED = {"chunk_ms": "--wall-ms or --timing-from LOG (the chunk time)",
           "host_baseline": "--baseline-from or --timing-from LOG (the process baseline)",
           "device_runtime": "--device-baseline-gib (weights + runtime)"}


def quota_lines(quota: dict | None, model) -> list[str]:
    """``--spill-max``: the disk with and without the quota, and where drops start."""
    if quota is None:
        return []
    return [f"disk, unbounded  {quota['disk_bytes_unbounded'] / GiB:.2f} GiB (blocks and index)",
            f"disk, --spill-max {quota['spill_max_bytes'] / GiB:.2f} GiB: {quota['disk_bytes_quota'] / GiB:.2f} GiB, "
            f"{quota['keep']} chunks kept; drops from {_at(model, quota['drops_from_chunk'])}"
            if quota["drops_from_chunk"] is not None else
            f"disk, --spill-max {quota['spill_max_bytes'] / GiB:.2f} GiB: {quota['disk_bytes_quota'] / GiB:.2f} GiB; "
            "nothing dropped (the session fits)"]
