"""The per-card table of the docs: does a model fit a named GPU, how, and how long a chunk takes.

Owns ``card_rows`` and ``card_table`` (Markdown): for each card of ``engine.planner.gpus.GPUS`` in
``CARDS`` and each model in ``MODELS``, the whole-device plan (``engine.planner.device``) with the card's
memory as the budget and the plan's own choice of weight format and KV paging — what ``worldpager plan
--model M --device cuda --device-mem G --gpu CARD`` prints. ``python3 -m engine.planner.cards`` prints the
table that docs/lingbot.md and docs/first_mg2_run.md carry (a unit test keeps them equal). No torch.
"""
from __future__ import annotations

from engine.config import MODEL_CONFIGS
from engine.errors import ConfigError
from engine.facts.lingbot_models import lingbot_config
from engine.planner.block_shapes import model_weights
from engine.planner.device import DeviceInputs, device_plan, least_device_bytes
from engine.planner.gpus import EFFICIENCY, GPUS
from engine.planner.model import bytes_per_chunk

GiB = 1 << 30
CARDS = ("rtx4090", "rtx4080", "rtx5090", "a100-80g")
# (model, k, sink) as the packaged presets run them
MODELS = (("mg2-universal", 3, False), ("lingbot-fast", 3, True))
HEADER = ("| card | model | fits? | weights | streamed blocks | KV paging | device GiB | s/chunk (compute) | "
          "PCIe s/chunk |")


def _shape(name: str):
    return MODEL_CONFIGS[name].shape() if name in MODEL_CONFIGS else lingbot_config(name).shape()


def card_rows() -> list[str]:
    rows = []
    for card_name in CARDS:
        card = GPUS[card_name]
        for name, k, sink in MODELS:
            shape, w = _shape(name), model_weights(name)
            inputs = DeviceInputs(retrieve_k=k, sink=sink, budget=int(card.memory_gib * GiB), gpu=card,
                                  stored_chunk_bytes=bytes_per_chunk(shape)["int4"])
            try:
                d = device_plan(shape, w, inputs)
            except ConfigError:
                need, how = least_device_bytes(shape, w, inputs)
                rows.append(f"| {card.label} | {name} | no: needs {need / GiB:.1f} GiB ({how}) | | | | | | |")
                continue
            r = d.residency
            rows.append(f"| {card.label} | {name} | yes | {d.weights_format} | {r.streamed} of {r.blocks} | "
                        f"{d.kv_paging} | {d.total / GiB:.1f} of {card.memory_gib:g} | {d.chunk_s_predicted:.2f} "
                        f"({d.compute_s:.2f}) | {d.pcie_s:.2f} |")
    return rows


def card_table() -> str:
    rule = "|" + "|".join("---" for _ in range(HEADER.count("|") - 1)) + "|"
    note = (f"Assumed: spec-sheet bf16 TFLOPS, one efficiency ({EFFICIENCY}) calibrated to MG2's 1.2 s/chunk on an "
            "RTX 4090, PCIe 25 GB/s, and the planner's activation, CUDA-context and reserve estimates; int4 KV, "
            "k = 3 (LingBot: with the sink), the text encoder on the CPU.")
    return "\n".join([HEADER, rule, *card_rows(), "", note])


if __name__ == "__main__":
    print(card_table())
