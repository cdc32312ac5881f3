"""``worldpager inspect``: a model's shape facts, read from its configuration (no weights)."""
from __future__ import annotations

import click

from worldpager_cli.json_output import emit_json, json_line, json_result

from engine.config import LINGBOT_MODELS, MODEL_CONFIGS, SessionConfig
from engine.errors import ConfigError
from engine.settings.overlay import resolve_session_config


@click.command()
@click.option("--model", "model", type=click.Choice(sorted(MODEL_CONFIGS) + list(LINGBOT_MODELS)),
              help="Model configuration. Default: the preset's model, else mg2-universal.")
@click.option("--preset", help="A preset (presets/NAME.yaml or a YAML file), as generate takes it: its model.")
@json_result
def inspect(model: str | None, preset: str | None) -> None:
    """Print a model's shape facts (no weights are read); the last line is JSON."""
    from engine.model.registry import model_header_facts

    described = sorted(MODEL_CONFIGS) + list(LINGBOT_MODELS)
    if model is None and preset is not None:
        model = resolve_session_config(preset, {}).model
        if model not in described:
            raise ConfigError(f"preset {preset!r} is for the {model} model; inspect describes "
                              f"{', '.join(described)}")
    facts = model_header_facts(SessionConfig(model=model or "mg2-universal"))
    width = max(len(k) for k in facts)
    for key, value in facts.items():
        click.echo(f"{key:<{width}}  {value:,}" if isinstance(value, int) else f"{key:<{width}}  {value}")
    emit_json(json_line(facts))
