"""The one way a config group becomes a typed, checked dataclass.

    data = build(DataConfig, config.data, "data.")

A key the dataclass lacks is refused, every field must be given but an `optional` one, each
value must have its field's type (ints are taken as floats, lists as tuples), nested groups
are dataclasses of their own, and a class's `rules()` ((field, holds, what it must be), ...)
are checked last, in order: the one way a config dataclass says what its values must be. A float is
finite (nan and inf are refused by type: no rule needs to name them). Every
error names the key (`prefix + field`) and what is wrong: `config key K=V: what`, or a rule's
own wording where its text names the key itself (`one_of`'s `config key K: V is not one of ...`).

A field's default is its key's value in a new config (`config.schema.default_config()`); a
config given must still name every key (a missing one is refused), except the keys of
`optional(default)` fields: keys newer than some saved runs, whose config.json takes the default.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Mapping

Rule = tuple[str, bool, str]  # (field, holds, what it must be); see `refusal` for the error's wording
_OPTIONAL = "optional"  # the field metadata key `optional` sets


def optional(default: Any) -> Any:
    """A field's `default` that also stands in for its key where a config leaves the key out."""
    return dataclasses.field(default=default, metadata={_OPTIONAL: True})


def is_optional(field: dataclasses.Field) -> bool:
    """Whether a config may leave out `field`'s key (see `optional`)."""
    return bool(field.metadata.get(_OPTIONAL))


def build(cls: type, values: Any, prefix: str, given: Mapping[str, Any] | None = None,
          prefixes: Mapping[str, str] | None = None) -> Any:
    """`cls(**values, **given)` checked; `given` values are not type-checked (set by code, not by users).

    A key is named `prefix + key`, or `prefixes[key] + key` where given (per-task overrides).
    """
    if isinstance(values, cls):
        return values
    if not hasattr(values, "items"):
        raise ValueError(f"config key {prefix[:-1]}: expected a group of settings, got {values!r}")
    given, prefixes = dict(given or {}), dict(prefixes or {})
    name = lambda key: prefixes.get(key, prefix) + key  # noqa: E731
    hints, fields = typing.get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls)}
    values = dict(values.items())
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"unknown config key(s) {', '.join(map(name, unknown))}; known: {sorted(fields)}")
    missing = sorted(k for k, f in fields.items() if k not in values and k not in given and not is_optional(f))
    if missing:
        raise ValueError(f"missing config key(s) {', '.join(map(name, missing))} (configs/base.py and "
                         "configs/eval.py have them all: every key at its field's default)")
    built = cls(**{k: typed(hints[k], v, name(k)) for k, v in values.items()}, **given)
    for field, holds, rule in getattr(built, "rules", lambda: [])():
        if not holds:
            raise ValueError(refusal(rule, name(field), getattr(built, field), prefixes.get(field, prefix)))
    return built


def refusal(rule: str, key: str, value: Any, prefix: str) -> str:
    """The error of a broken rule: `config key <key>=<value!r>: <rule>`, or, where the rule's text names
    `{key}` itself, that text with {key}, {value} and {prefix} (the group's, for its other keys) filled in."""
    if "{key}" in rule:
        return rule.format(key=key, value=value, prefix=prefix)
    return f"config key {key}={value!r}: {rule}"


def at_least(settings: Any, **lowest: float) -> list[Rule]:
    """Rules "must be >= low" for each field=low."""
    return [(key, getattr(settings, key) >= low, f"must be >= {low}") for key, low in lowest.items()]


def one_of(settings: Any, field: str, allowed: tuple[str, ...], shown: str = "") -> Rule:
    """Rule "config key K: 'v' is not one of <allowed>" (`shown`, or the tuple)."""
    return (field, getattr(settings, field) in allowed,
            "config key {key}: {value!r} is not one of " + (shown or str(allowed)).replace("{", "{{").replace("}", "}}"))


def typed(tp: Any, value: Any, key: str) -> Any:
    """`value` as type `tp` (the field's annotation); ValueError naming `key` when it is not one."""
    if dataclasses.is_dataclass(tp):
        return build(tp, value, key + ".")
    converted = _convert(tp, value, key)
    if converted is _NOT and isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"config key {key}={value!r}: must be a finite number")
    if converted is _NOT:
        raise ValueError(f"config key {key}: {value!r} is not of type {_name(tp)}")
    return converted


_NOT = object()


def _convert(tp: Any, value: Any, key: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        for option in args:
            converted = _convert(option, value, key)
            if converted is not _NOT:
                return converted
        return _NOT
    if tp is type(None):
        return None if value is None else _NOT
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return _NOT
        kinds = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args)
        if len(kinds) != len(value):
            return _NOT
        items = [_convert(kind, item, key) for kind, item in zip(kinds, value)]
        return _NOT if any(item is _NOT for item in items) else tuple(items)
    if tp is Any or origin in (Mapping, dict) or tp in (Mapping, dict):
        return value
    if tp is bool:
        return value if isinstance(value, bool) else _NOT
    if tp is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _NOT
    if tp is float:  # nan and inf are never a setting: a rule's `>` or `<` would let them through
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return _NOT
        try:
            number = float(value)
        except OverflowError:  # an int past float's range
            return _NOT
        return number if math.isfinite(number) else _NOT
    if tp is str:
        return value if isinstance(value, str) else _NOT
    return _NOT


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def defaults(cls: type, prefix: str = "") -> dict[str, Any]:
    """{"a.b": default} of every `optional` field of `cls` (and of its nested groups): the values a
    config that leaves those keys out takes."""
    found: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[field.name]):
            found.update(defaults(hints[field.name], f"{prefix}{field.name}."))
        elif is_optional(field):
            found[prefix + field.name] = field.default
    return found
