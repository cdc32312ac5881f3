"""The whole device, planned: what a session keeps on the GPU, what it streams over PCIe, how long a chunk takes.

Contract. ``device_plan(model, weights, inputs)`` -> a frozen ``DevicePlan`` (no torch, no I/O). The
device holds (bytes; GiB = 2**30):

  weights      per DiT block its bytes in the weight format (``block_shapes``: the quantised linears at
               one byte a value + fp32 scales, the rest bf16); ``weight_plan.resident_blocks`` picks the
               leading blocks that stay, the rest stream through 2 slots of the largest block. Always
               resident, bf16: the DiT outside its blocks, the VAE (MG2: and CLIP), and LingBot's UMT5
               text encoder only when ``text_on_device`` (by default it runs once per prompt on the CPU).
  KV           ``chunk``: the bf16 context of every layer (window, current chunk, k retrieved, sink chunks;
               the store's staging slots beside it are not counted: MG2's fitted reserve covers them);
               ``layer``: one layer's context and the next one's, prefetched
               (``engine.planner.kv_paging.paged_kv_device_bytes``), nothing else: the store's bf16 staging
               (``staging_chunks``: the k slots of the set, the hedges', the device cache;
               ``engine.planner.session_kv``) is in host memory (retrieved chunks are dequantised into
               pinned host banks, one layer at a time through the device, then copied into the host context).
  activations  the larger of the DiT's peak, tokens x (6 x dim + 2 x ffn_dim) x 2 B (the residual, its
               normed copy, q, k, v, the attention output, and the feed-forward's hidden before and after
               its GELU), plus heads x tokens x context x 2 B of attention scores unless the attention is
               flash (assumed on a GPU: the scores are never stored) — and the VAE's decode of one latent
               frame, 4 video frames x height x width x the VAE's base width x 4 live tensors x 2 B.
  context      the CUDA context and cuBLAS workspace: 0.5 GiB (assumed).
  reserve      the allocator's reserve and what the items above miss: MG2's fitted device runtime
               (7.6 GiB on a 24 GiB RTX 4090, ``engine.planner.model``) less MG2's activations and context,
               the same figure for every model (assumed), so that MG2's plan is the calibrated one. Context
               and reserve together take at most ``RESERVE_SHARE`` of the budget (``runtime_reserve``: every
               listed card keeps the calibrated figure; a small budget, a small model's, keeps that share).

The blocks' budget (``block_budget``) is the budget less all of the above but the blocks: the one rule
that the session's weight pager (``engine.model.weight_place``) applies too, with the same inputs.

Host side (``host_bytes``, counted with the process baseline when the pool is sized): a pinned copy of the
streamed blocks, and with per-layer KV the bf16 context of every layer and the staging.

PCIe per chunk: streamed block bytes x passes (each pass walks every block) + KV: per layer, passes x
the context beyond the current chunk + the current chunk written back once; per chunk, the k retrieved
chunks in and the stored one out, in the KV format. ``pcie_s`` at ``pcie_gbs`` (default 25 GB/s, PCIe
4.0 x16 effective, assumed); the copies overlap the compute, so a chunk takes the longer of the two.
``compute_s`` from ``engine.planner.gpus`` for a named card.

Choice, where the session does not set it: bf16 with every block resident if it fits, else int8, else
int8 with blocks streamed; for each, KV per chunk, else per layer. Nothing fits: one ``ConfigError`` line
with the least the model needs and the smallest card of ``GPUS`` that holds it.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.config import MODEL_CONFIGS
from engine.errors import ConfigError
from engine.facts.layout import ModelShape
from engine.planner.block_shapes import COMPUTE_BYTES, ModelWeights, model_weights
from engine.planner.gpus import GPU, GPUS, compute_s
from engine.planner.kv_paging import paged_kv_device_bytes
from engine.planner.weight_plan import Residency, resident_blocks

GiB = 1 << 30
DEVICE_RUNTIME_GIB = 7.6        # MG2's fitted device runtime beside its bf16 weights (engine.planner.model)
CONTEXT_BYTES = GiB // 2        # CUDA context + cuBLAS workspace (assumed)
LIVE_TENSORS = 6                # the DiT's live [tokens, dim] tensors at its peak (see the docstring)
VAE_FRAMES, VAE_LIVE = 4, 4     # video frames one latent frame decodes to; live tensors of the decoder
PCIE_GBS = 25.0                 # PCIe 4.0 x16, effective (assumed)
AUTO_FORMATS = ("bf16", "int8")
PAGINGS = ("chunk", "layer")


def context_chunks(model: ModelShape, retrieve_k: int, sink: bool) -> int:
    """Chunks of the attention context: the local window, the current chunk, k retrieved, the sink."""
    return model.layout.window_chunks + 1 + retrieve_k + (1 if sink else 0)


def device_buffer_bytes(model: ModelShape, retrieve_k: int, sink: bool) -> int:
    """B: the bf16 KV of every layer's context (window, current chunk, k slots, sink), per-chunk paging."""
    return context_chunks(model, retrieve_k, sink) * model.kv_bytes_per_chunk(2.0)


def activation_bytes(model: ModelShape, w: ModelWeights, context_tokens: int = 0, flash: bool = True) -> int:
    """The larger of the DiT's peak activations and the VAE's decode workspace (module docstring)."""
    tokens = model.layout.tokens_per_chunk
    dit = tokens * (LIVE_TENSORS * w.dim + 2 * w.ffn_dim) * COMPUTE_BYTES
    if not flash:
        dit += model.layout.heads * tokens * context_tokens * COMPUTE_BYTES
    height, width = w.frame
    return max(dit, VAE_FRAMES * height * width * w.vae_dim * VAE_LIVE * COMPUTE_BYTES)


def _mg2_reserve() -> int:
    shape = MODEL_CONFIGS["mg2-universal"].shape()
    w = model_weights(shape.name)
    return int(DEVICE_RUNTIME_GIB * GiB) - activation_bytes(shape, w, 0) - CONTEXT_BYTES


RESERVE_BYTES = _mg2_reserve()
RESERVE_SHARE = 0.45            # of the budget, at most, for the context and the reserve (16 GiB: all of them)


def runtime_reserve(budget: int | None) -> int:
    """The CUDA context and the allocator's reserve beside the activations (module docstring)."""
    full = CONTEXT_BYTES + RESERVE_BYTES
    return full if budget is None else min(full, int(budget * RESERVE_SHARE))


def least_budget(need: int) -> int:
    """The least budget whose ``runtime_reserve`` leaves ``need`` bytes for everything else."""
    full = CONTEXT_BYTES + RESERVE_BYTES
    if (need + full) * RESERVE_SHARE >= full:
        return need + full
    return -(-need * 100 // round((1 - RESERVE_SHARE) * 100))


def block_budget(budget: int, kv_bytes: int, fixed_weight_bytes: int, activations: int, reserve: int) -> int:
    """What the DiT's blocks may use of a device ``budget``: the rest once the KV on the device, the
    weights that never stream, the activations and the reserve (context included) are set aside. The
    plan's rule and the session's weight pager's (``engine.model.weight_place.weight_budget``)."""
    return budget - kv_bytes - fixed_weight_bytes - activations - reserve


@dataclass(frozen=True)
class DeviceInputs:
    retrieve_k: int = 3
    sink: bool = False
    weights: str | None = None          # None: the plan chooses
    kv_paging: str | None = None        # None: the plan chooses
    budget: int | None = None           # device bytes; None: unbounded
    stored_chunk_bytes: int = 0         # one stored chunk in the KV format (per-chunk PCIe traffic)
    text_on_device: bool = False
    gpu: GPU | None = None
    pcie_gbs: float = PCIE_GBS
    runtime_bytes: int | None = None    # activations + context + reserve, given (--device-baseline-gib)
    staging_chunks: int | None = None   # the store's staging (slots, hedges', device cache); None: k slots
    flash: bool = True                  # the attention never stores its scores (a GPU's flash kernels; assumed)


@dataclass(frozen=True)
class DevicePlan:
    model: str
    weights_format: str
    kv_paging: str
    chosen: bool                        # the plan chose (the session did not set weights / kv_paging)
    residency: Residency
    block_bytes: int                    # one block in the weight format (the largest)
    fixed_weight_bytes: int             # the DiT outside its blocks, the VAE (+ CLIP), the text encoder
    aux_label: str
    text_encoder: str                   # "cpu", "device" or "none"
    kv_bytes: int
    activations: int
    context: int
    reserve: int
    budget: int | None
    host_bytes: int
    pcie_bytes_per_chunk: int
    pcie_gbs: float
    compute_s: float | None
    gpu: str | None
    assumed: tuple[str, ...]

    @property
    def weight_bytes(self) -> int:
        return self.residency.device_bytes + self.fixed_weight_bytes

    @property
    def total(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.activations + self.context + self.reserve

    @property
    def pcie_s(self) -> float:
        return self.pcie_bytes_per_chunk / (self.pcie_gbs * 1e9)

    @property
    def chunk_s_predicted(self) -> float | None:
        return None if self.compute_s is None else max(self.compute_s, self.pcie_s)

    def summary(self) -> dict:
        r = self.residency
        return {"weights_format": self.weights_format, "resident_blocks": r.resident, "streamed_blocks": r.streamed,
                "weight_bytes": self.weight_bytes, "block_bytes": self.block_bytes,
                "stream_buffer_bytes": r.buffer_bytes, "kv_paging": self.kv_paging, "kv_bytes": self.kv_bytes,
                "activations": self.activations, "context": self.context, "reserve": self.reserve,
                "total": self.total, "budget": self.budget, "chosen": self.chosen, "text_encoder": self.text_encoder,
                "host_bytes": self.host_bytes, "pcie_bytes_per_chunk": self.pcie_bytes_per_chunk,
                "pcie_gbs": self.pcie_gbs, "pcie_s": round(self.pcie_s, 3),
                "compute_s": None if self.compute_s is None else round(self.compute_s, 3),
                "chunk_s_predicted": None if self.chunk_s_predicted is None else round(self.chunk_s_predicted, 3),
                "gpu": self.gpu, "assumed": list(self.assumed)}


def _candidates(inputs: DeviceInputs) -> list[tuple[str, str, bool]]:
    """(format, paging, streaming) in the order the plan prefers them."""
    formats = AUTO_FORMATS if inputs.weights is None else (inputs.weights,)
    pagings = PAGINGS if inputs.kv_paging is None else (inputs.kv_paging,)
    out = [(f, p, False) for f in formats for p in pagings]
    stream = ("int8",) if inputs.weights is None else formats
    return out + [(f, p, True) for f in stream for p in pagings]


def staging_bytes(model: ModelShape, inputs: DeviceInputs) -> int:
    """The store's bf16 staging, which layer paging keeps in host memory (the host side's count)."""
    chunks = inputs.retrieve_k if inputs.staging_chunks is None else inputs.staging_chunks
    return chunks * model.kv_bytes_per_chunk(2.0)


def _kv(model: ModelShape, inputs: DeviceInputs, paging: str) -> int:
    if paging == "layer":   # the two layer pages only: the staging is in host memory
        return paged_kv_device_bytes(model.layout, inputs.retrieve_k + (1 if inputs.sink else 0))
    return device_buffer_bytes(model, inputs.retrieve_k, inputs.sink)   # the staging: in MG2's fitted reserve


def _runtime(model: ModelShape, w: ModelWeights, inputs: DeviceInputs) -> tuple[int, int, int]:
    """(activations, context, reserve); a given runtime replaces all three (as activations)."""
    if inputs.runtime_bytes is not None:
        return inputs.runtime_bytes, 0, 0
    layout = model.layout
    memory = (inputs.retrieve_k + (1 if inputs.sink else 0)) * layout.tokens_per_chunk
    context = memory + layout.window_tokens + layout.tokens_per_chunk
    reserve = runtime_reserve(inputs.budget)
    cuda = min(CONTEXT_BYTES, reserve)
    return activation_bytes(model, w, context, inputs.flash), cuda, reserve - cuda


def _pcie(model: ModelShape, w: ModelWeights, inputs: DeviceInputs, paging: str, streamed: int) -> int:
    layout = model.layout
    weights = streamed * w.passes
    if paging == "layer":
        per_token = layout.layers * layout.channels * 2 * 2          # K and V of every layer, bf16
        memory = (inputs.retrieve_k + (1 if inputs.sink else 0)) * layout.tokens_per_chunk
        staged = inputs.retrieve_k * (inputs.stored_chunk_bytes + model.kv_bytes_per_chunk(2.0))   # in, then out
        return (weights + w.passes * (memory + layout.window_tokens) * per_token + layout.tokens_per_chunk * per_token
                + staged)
    return weights + (inputs.retrieve_k + 1) * inputs.stored_chunk_bytes


def _fixed_weights(w: ModelWeights, inputs: DeviceInputs) -> tuple[int, str]:
    text = "none" if not w.text_encoder_params else "device" if inputs.text_on_device else "cpu"
    params = w.dit_other_params + w.aux_params + (w.text_encoder_params if text == "device" else 0)
    return params * COMPUTE_BYTES, text


def _assumed(inputs: DeviceInputs) -> tuple[str, ...]:
    names = [] if inputs.runtime_bytes is not None else ["activations", "context", "reserve"]
    names += ["flash_attention"] if inputs.runtime_bytes is None and inputs.flash else []
    names += ["pcie_gbs"] if inputs.pcie_gbs == PCIE_GBS else []
    names += ["gpu_tflops", "efficiency"] if inputs.gpu is not None else []
    return tuple(names)


def _plan_one(model: ModelShape, w: ModelWeights, inputs: DeviceInputs, fmt: str, paging: str,
              stream: bool) -> DevicePlan | None:
    blocks = w.block_bytes(fmt)
    fixed, text = _fixed_weights(w, inputs)
    kv = _kv(model, inputs, paging)
    act, ctx, reserve = _runtime(model, w, inputs)
    if inputs.budget is None:
        residency = Residency(len(blocks), len(blocks), sum(blocks), 0)
    else:
        room = block_budget(inputs.budget, kv, fixed, act, ctx + reserve)
        if room < 0:
            return None                 # not even the parts that never stream fit
        try:
            residency = resident_blocks(blocks, room)
        except ConfigError:
            return None
    if residency.streamed and not stream:
        return None
    streamed = sum(blocks[residency.resident:])
    host = streamed + (device_buffer_bytes(model, inputs.retrieve_k, inputs.sink) + staging_bytes(model, inputs)
                       if paging == "layer" else 0)
    card = inputs.gpu
    compute = None if card is None else compute_s(w.dit_params, model.layout.tokens_per_chunk, w.passes, card)
    chosen = inputs.weights is None or inputs.kv_paging is None
    return DevicePlan(model.name, fmt, paging, chosen, residency, max(blocks, default=0), fixed, w.aux_label, text,
                      kv, act, ctx, reserve, inputs.budget, host, _pcie(model, w, inputs, paging, streamed),
                      inputs.pcie_gbs, compute, None if card is None else card.name, _assumed(inputs))


def device_plan(model: ModelShape, w: ModelWeights, inputs: DeviceInputs) -> DevicePlan:
    """The first choice (module docstring's order) that fits the budget; a ConfigError line otherwise."""
    for fmt, paging, stream in _candidates(inputs):
        found = _plan_one(model, w, inputs, fmt, paging, stream)
        if found is not None:
            return found
    raise ConfigError(_refusal(model, w, inputs))


def least_device_bytes(model: ModelShape, w: ModelWeights, inputs: DeviceInputs) -> tuple[int, str]:
    """The least device memory any allowed choice needs (every block streamed where that is less)."""
    best = None
    for fmt, paging, stream in _candidates(inputs):
        blocks = w.block_bytes(fmt)
        act, ctx, reserve = _runtime(model, w, inputs)
        rest = _fixed_weights(w, inputs)[0] + _kv(model, inputs, paging) + act
        weights = min(sum(blocks), 2 * max(blocks, default=0)) if stream else sum(blocks)
        need = rest + weights + ctx + reserve if inputs.runtime_bytes is not None else least_budget(rest + weights)
        how = f"{fmt} weights{', every block streamed' if stream and weights < sum(blocks) else ''}, KV per {paging}"
        if best is None or need < best[0]:
            best = (need, how)
    return best


def _refusal(model: ModelShape, w: ModelWeights, inputs: DeviceInputs) -> str:
    need, how = least_device_bytes(model, w, inputs)
    cards = [g for g in sorted(GPUS.values(), key=lambda g: g.memory_gib) if g.memory_gib * GiB >= need]
    given = [f"--weights {inputs.weights}"] * (inputs.weights is not None) + \
        [f"--kv-paging {inputs.kv_paging}"] * (inputs.kv_paging is not None)
    within = " and ".join(given) if given else "any weight format and KV paging"
    card = f"; the smallest listed GPU that holds it: {cards[0].label}" if cards else "; no listed GPU holds it"
    return (f"{model.name} does not fit the {inputs.budget / GiB:.1f} GiB device budget (--device-mem) with {within}: "
            f"the least it needs is {need / GiB:.1f} GiB ({how}){card}")
