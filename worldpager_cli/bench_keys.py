"""``worldpager bench keys``: int4 retention of keys stored before the rotation against after it.

Owns the command's flags and its table (one row per source × placement × convention) and last line of
JSON; the measurement is ``engine.bench.keys``. Sources: ``run`` (the keys and queries of a session of
``--model``, an MG2 or LingBot configuration) and ``synthetic`` (keys of ``--synthetic-shape``'s
chunk shape with per-channel means, scales and outlier channels, rotated by that configuration's RoPE).
``--frames`` adds whole sessions of ``--model`` and their PSNR against the kv16 session.
"""
from __future__ import annotations

import click

from worldpager_cli.json_output import json_result

from engine.config import LINGBOT_MODELS, MODEL_CONFIGS
from worldpager_cli.bench_output import echo_json, echo_table, num
from engine.bench.machine import machine

PLACES = ("native", "re-placed")
CONVENTIONS = ("post-rope", "pre-rope")


@click.command("keys")
@click.option("--model", default="micro", show_default=True,
              type=click.Choice([*sorted(MODEL_CONFIGS), *LINGBOT_MODELS]),
              help="MG2 or LingBot configuration whose session's keys are measured (tiny, micro and "
                   "lingbot-tiny have seeded weights; the others need theirs).")
@click.option("--chunks", type=click.IntRange(min=2), default=8, show_default=True,
              help="Chunks of that session; every one but the last is memory, the last one queries it.")
@click.option("--bits", type=click.Choice(["2", "4", "8"]), default="4", show_default=True,
              help="Storage bits per KV value.")
@click.option("--synthetic-shape", type=click.Choice(sorted(MODEL_CONFIGS)),
              help="Also measure synthetic keys with outlier channels in this configuration's chunk shape.")
@click.option("--frames", "frame_chunks", type=click.IntRange(min=0), default=0, show_default=True,
              help="Also run whole sessions of --model this many chunks long (kv16, and int4 both ways) and "
                   "report frame PSNR against kv16 (0: none).")
@click.option("--positions", type=click.Choice(["extend", "rerotate"]), default="rerotate", show_default=True,
              help="Position mode of the --frames sessions.")
@json_result
def bench_keys(model: str, chunks: int, bits: str, synthetic_shape: str | None, frame_chunks: int,
               positions: str) -> None:
    """int4 error of memory keys stored pre-rope and post-rope, staged natively and re-placed."""
    from engine.bench.keys import capture_keys, frame_psnr, key_retention, synthetic_keys

    click.echo(f"bench keys: {model} session of {chunks} chunks (CPU), int{bits} storage; "
               "errors against full precision, pooled over memory chunks, layers and heads")
    sources = [(f"run {model}", capture_keys(model, chunks))]
    if synthetic_shape is not None:
        sources.append((f"synthetic {synthetic_shape}", synthetic_keys(synthetic_shape)))
    rows, results = [], []
    for label, captured in sources:
        for place in PLACES:
            for keys in CONVENTIONS:
                r = key_retention(captured, int(bits), keys, place)
                results.append({"source": label, **r})
                rows.append((label, place, keys, num(r["key_rel"]), num(r["logit_rel"]), num(r["logit_max"]),
                             num(r["out_rel"])))
    echo_table(("keys of", "staged", "stored", "key rel", "logit rel", "logit max", "out rel"), rows)
    frames = None
    if frame_chunks:
        frames = frame_psnr(model, frame_chunks, positions, int(bits))
        click.echo(f"frames: {model}, {frame_chunks} chunks, --positions {positions}, int{bits} against kv16: "
                   f"PSNR post-rope {num(frames['post-rope'])} dB, pre-rope {num(frames['pre-rope'])} dB")
    echo_json("keys", {"rows": results, "frames": frames}, machine("cpu"),
              {"model": model, "chunks": chunks, "bits": int(bits), "synthetic_shape": synthetic_shape,
               "frame_chunks": frame_chunks, "positions": positions})
