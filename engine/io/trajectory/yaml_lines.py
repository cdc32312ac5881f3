"""YAML with line numbers: a SafeLoader whose mappings and lists remember the line they (and each key)
start on, and refuses duplicate keys; plus the checked readers of a mapping (only allowed keys) and of
a non-empty list.

Owns what lets every YAML error name its line; the trajectory keys themselves are read by
``yaml_file`` (keyframes, start) and ``yaml_segments`` (segments).
"""
from __future__ import annotations

from typing import Any

import yaml

from engine.io.trajectory.fields import _Context, _show


class _Map(dict):
    """A YAML mapping that remembers its line and the line of each key (1-based)."""

    line: int = 0
    key_lines: dict

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class _Seq(list):
    line: int = 0


class _LineLoader(yaml.SafeLoader):
    """SafeLoader whose mappings and sequences carry line numbers, and which rejects duplicate keys."""


def _construct_map(loader: _LineLoader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    result = _Map()
    result.line, result.key_lines = node.start_mark.line + 1, {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float)) or isinstance(key, bool):
            raise yaml.constructor.ConstructorError(None, None, f"key {_show(key)} is not a name",
                                                    key_node.start_mark)
        if key in result:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


def _construct_seq(loader: _LineLoader, node: yaml.SequenceNode) -> _Seq:
    result = _Seq(loader.construct_sequence(node, deep=True))
    result.line = node.start_mark.line + 1
    return result


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_seq)


def _parse_yaml(ctx: _Context, text: str) -> Any:
    try:
        return yaml.load(text, Loader=_LineLoader)   # noqa: S506 — a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ctx.error(f"invalid YAML ({problem})", mark.line + 1 if mark else None) from None
    except (ValueError, OverflowError) as exc:   # a value the YAML resolver matched, e.g. 2001-13-45
        raise ctx.error(f"invalid YAML value ({exc})") from None
    except RecursionError:
        raise ctx.error("invalid YAML (nested too deeply)") from None


def _mapping(ctx: _Context, value: Any, line: int, field: str, allowed: tuple[str, ...]) -> _Map:
    if not isinstance(value, _Map):
        raise ctx.error(f"expected a mapping, got {_show(value)}", line, field)
    for key in value:
        if key not in allowed:
            raise ctx.error(f"unknown key {key!r} (allowed: {', '.join(allowed)})", value.line_of(key), field)
    return value


def _sequence(ctx: _Context, value: Any, line: int, field: str) -> _Seq:
    if not isinstance(value, _Seq) or not value:
        raise ctx.error(f"expected a non-empty list, got {_show(value)}", line, field)
    return value
