"""Sparse overlays of frozen config dataclasses: presets (YAML) and flags.

Owns the merge rule (defaults < preset < flags), the strictness (an unknown key or a value of the wrong
type is a ``ConfigError`` naming the dotted key), the preset search path, and the JSON form of a
resolved config that is written beside every output.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, Mapping

import yaml

from engine.config import SessionConfig
from engine.errors import ConfigError, OutputError

# Presets live in the repository's top-level presets/ (found from the package in an editable install).
PRESET_DIRS = (Path(__file__).resolve().parents[1] / "presets",)


def replace_strict(obj: Any, overlay: Mapping[str, Any], where: str = "") -> Any:
    """``obj`` with ``overlay`` applied recursively; unknown keys and wrong types raise ConfigError."""
    if not isinstance(overlay, Mapping):
        raise ConfigError(f"{where or 'config'} must be a mapping, got {type(overlay).__name__}")
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    changes: dict[str, Any] = {}
    for key, value in overlay.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in names:
            raise ConfigError(f"unknown config key {path!r}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            changes[key] = replace_strict(current, value, path)
        else:
            changes[key] = _coerce(value, hints[key], path)
    return dataclasses.replace(obj, **changes)


def _coerce(value: Any, hint: Any, path: str) -> Any:
    """``value`` as the annotated type (lists -> tuples, str -> Path, int -> float) or ConfigError."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, path)
            except ConfigError:
                continue
        raise ConfigError(f"config key {path!r} has the wrong type: {value!r}")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key {path!r} must be a list, got {value!r}")
        item = typing.get_args(hint)[0] if typing.get_args(hint) else Any
        return tuple(v if item is Any else _coerce(v, item, f"{path}[{i}]") for i, v in enumerate(value))
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif hint is Path:
        if isinstance(value, (str, Path)):
            return Path(value).expanduser()
    else:
        return value
    raise ConfigError(f"config key {path!r} must be {getattr(hint, '__name__', hint)}, got {value!r}")


def preset_names() -> list[str]:
    names = {p.stem for d in PRESET_DIRS if d.is_dir() for p in d.glob("*.yaml")}
    return sorted(names)


def load_preset(name_or_path: str | Path) -> dict:
    """The overlay mapping of a preset given by name (``presets/NAME.yaml``) or by file path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        found = [d / f"{name_or_path}.yaml" for d in PRESET_DIRS if (d / f"{name_or_path}.yaml").is_file()]
        if not found:
            raise ConfigError(f"unknown preset {str(name_or_path)!r} (choose from {', '.join(preset_names())})")
        path = found[0]
    if not path.is_file():
        raise ConfigError(f"preset file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"cannot parse preset {path}{where}: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"preset {path} must be a mapping of config keys")
    return data


def resolve_session_config(preset: str | Path | None, flags: Mapping[str, Any],
                           base: Mapping[str, Any] | None = None) -> SessionConfig:
    """Defaults < base < preset < flags (flags given as a nested mapping of only what the user set; a
    command's ``base`` changes its defaults, e.g. ``plan`` plans MG2 unless told otherwise)."""
    cfg = replace_strict(SessionConfig(), base or {})
    if preset is not None:
        cfg = replace_strict(cfg, load_preset(preset))
    return replace_strict(cfg, flags).validate()


def config_to_json(cfg: Any) -> dict:
    """A JSON-serialisable dict of a (nested) config dataclass."""
    def convert(value):
        if dataclasses.is_dataclass(value):
            return {f.name: convert(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, (tuple, list)):
            return [convert(v) for v in value]
        if isinstance(value, Path):
            return str(value)
        return value
    return convert(cfg)


def write_resolved_config(cfg: SessionConfig, path: Path) -> None:
    try:
        path.write_text(json.dumps(config_to_json(cfg), indent=2) + "\n")
    except OSError as exc:
        raise OutputError(f"cannot write the resolved config {path}: {exc.strerror or exc}") from None
