"""Sparse overlays of frozen config dataclasses: presets (YAML) and flags.

Owns the merge rule (defaults < preset < flags), the strictness (an unknown key or a value of the wrong
type is a ``ConfigError`` naming the dotted key, and the preset file when the value came from one), the
preset search path, and the JSON form of a resolved config that is written beside every output. A
preset that is not UTF-8 text, not YAML, or holds a value YAML cannot build (a date like 2001-13-45,
nesting too deep) is a one-line ``ConfigError`` naming the file; a preset path that is not a regular file
(a FIFO, a directory, a file under /proc) or larger than ``MAX_PRESET_BYTES`` is an ``InputError``
(``engine.files.input_files``), refused before it is opened. A size key (``memory.host_mem_gib``,
``memory.device_mem_gib``: ``SIZE_KEYS``) takes a number in its unit or a size by the flags' one rule
(``engine.settings.sizes``): ``host_mem_gib: 24G`` is 24 GiB, ``512M`` half a GiB.
"""
from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from pathlib import Path
from typing import Any, Mapping

import yaml

from engine.config import SessionConfig
from engine.errors import ConfigError, OutputError
from engine.files.input_files import check_input_file, read_input_bytes, shown
from engine.files.output_files import open_output, write_failure
from engine.files.resources import data_dirs
from engine.settings.sizes import EXAMPLES, GiB, size_in

# Presets ship in the package (engine/presets in a wheel) and live in the checkout's top-level presets/.
PRESET_DIRS = data_dirs("presets")
MAX_PRESET_BYTES = 1 << 20   # a preset is a sparse overlay of a few dozen keys
SIZE_KEYS = {"memory.host_mem_gib": GiB, "memory.device_mem_gib": GiB}   # the key's unit; text is a size


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
            changes[key] = _coerce(_size(value, path), hints[key], path)
    return dataclasses.replace(obj, **changes)


def _size(value: Any, path: str) -> Any:
    """A size key's text as a number of its unit (``SIZE_KEYS``); any other value as it is."""
    if path not in SIZE_KEYS or not isinstance(value, str):
        return value
    try:
        return size_in(value, path, SIZE_KEYS[path])
    except ConfigError:
        raise ConfigError(f"config key {path!r} has the wrong type: {_show(value)} is not a size (e.g. {EXAMPLES}; "
                          f"a plain number is GiB)") from None


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
        raise ConfigError(f"config key {path!r} has the wrong type: {_show(value)}")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key {path!r} must be a list, got {_show(value)}")
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
            try:
                return float(value)
            except OverflowError:
                pass   # an integer beyond the float range: the error below
    elif hint is str:
        if isinstance(value, str):
            return value
    elif hint is Path:
        if isinstance(value, (str, Path)):
            return _path(value, path)
    else:
        return value
    raise ConfigError(f"config key {path!r} must be {getattr(hint, '__name__', hint)}, got {_show(value)}")


def _path(value: str | Path, key: str) -> Path:
    if "\0" in str(value):
        raise ConfigError(f"config key {key!r} must be a path, got {_show(str(value))} (a NUL character)")
    try:
        return Path(value).expanduser()
    except RuntimeError:   # ~user of a user this system does not know
        raise ConfigError(f"config key {key!r}: cannot expand {_show(str(value))} (no such home directory)") from None


def _show(value: Any) -> str:
    """A value for a one-line message: its repr, shortened."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def user_config_path() -> Path | None:
    """The user's config file: ``$WORLDPAGER_CONFIG`` (empty: none), else
    ``$XDG_CONFIG_HOME/worldpager/config.yaml`` (``~/.config/...``) when it exists."""
    env = os.environ.get("WORLDPAGER_CONFIG")
    if env is not None:
        return Path(env).expanduser() if env.strip() else None
    home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    path = Path(home) / "worldpager" / "config.yaml"
    return path if path.is_file() else None


def with_user_config(base: Mapping[str, Any] | None = None) -> dict:
    """A new session's base overlay: the user's config file (a preset's format), under the command's
    ``base``. Precedence of a new session: flags > WORLDPAGER_* variables > preset > this file >
    defaults. A file that is named but missing, or does not parse, is one line naming it."""
    path = user_config_path()
    user = {} if path is None else load_preset(path)
    if path is not None:
        try:
            replace_strict(SessionConfig(), user)
        except ConfigError as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
    return merged_overlays(user, base or {})


def merged_overlays(low: Mapping[str, Any], high: Mapping[str, Any]) -> dict:
    """``high`` over ``low``, nested mappings merged key by key."""
    out = dict(low)
    for key, value in high.items():
        out[key] = merged_overlays(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) \
            else value
    return out


def preset_names() -> list[str]:
    names = {p.stem for d in PRESET_DIRS if d.is_dir() for p in d.glob("*.yaml")}
    return sorted(names)


def preset_path(name_or_path: str | Path) -> Path:
    """The file of a preset given by name (``presets/NAME.yaml``) or by file path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        found = [d / f"{name_or_path}.yaml" for d in PRESET_DIRS if (d / f"{name_or_path}.yaml").is_file()]
        if not found:
            raise ConfigError(f"unknown preset {str(name_or_path)!r} (choose from {', '.join(preset_names())})")
        path = found[0]
    if not os.path.lexists(path):
        raise ConfigError(f"preset file not found: {shown(path)}")
    check_input_file(path, "preset", fix="name a preset or a YAML file")   # a FIFO: refused, not waited on
    return path


def load_preset(name_or_path: str | Path) -> dict:
    """The overlay mapping of a preset given by name (``presets/NAME.yaml``) or by file path."""
    path = preset_path(name_or_path)
    data = read_input_bytes(path, "preset", MAX_PRESET_BYTES, fix="name a preset or a YAML file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot parse preset {path}: not UTF-8 text (byte {exc.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise ConfigError(f"cannot parse preset {path}{where}: {problem}") from None
    except (ValueError, OverflowError) as exc:   # a value the YAML resolver matched, e.g. 2001-13-45
        raise ConfigError(f"cannot parse preset {path}: invalid value ({exc})") from None
    except RecursionError:
        raise ConfigError(f"cannot parse preset {path}: nested too deeply") from None
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
    if preset is None:
        return replace_strict(cfg, flags).validate()
    path = preset_path(preset)
    try:
        with_preset = replace_strict(cfg, load_preset(path))
    except ConfigError as exc:
        raise ConfigError(_in_preset(path, exc)) from None
    try:
        return replace_strict(with_preset, flags).validate()
    except ConfigError as exc:
        replace_strict(cfg, flags).validate()   # raises if the flags alone are at fault
        raise ConfigError(_in_preset(path, exc)) from None


def _in_preset(path: Path, exc: ConfigError) -> str:
    """The message of an error in a preset's values, naming the file (once)."""
    return str(exc) if str(path) in str(exc) else f"preset {path}: {exc}"


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
    """The resolved config as JSON at ``path``: a regular file, locked while it is written
    (``engine.files.output_files.open_output``: not a FIFO or device, nor a file another run writes)."""
    made = not path.exists()
    try:
        with open(open_output(path, "the resolved config"), "w", encoding="utf-8") as f:
            f.write(json.dumps(config_to_json(cfg), indent=2) + "\n")
    except OSError as exc:
        if made:   # a full drive: no empty or half config left behind
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass   # the write's error is the one to report
        raise OutputError(f"cannot write the resolved config {path}: {write_failure(exc)}") from None
