"""The configuration reference, ``docs/configuration.md``, written from the settings models.

    python -m draftgate.proxy.config_reference > docs/configuration.md

A test writes it again and compares, so the page cannot drift from what the
proxy accepts: every key, with its type, default, bounds and meaning, read
from ``proxy/config.py`` and the policy models it nests.
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from draftgate.policy.structure.priors import StructurePriors
from draftgate.policy.structure.sampling import SamplingDefaults
from draftgate.proxy.config import (
    FLAT_KEYS,
    READ_AT_STARTUP,
    ApiKey,
    CandidatePool,
    Cors,
    Health,
    ModelPolicy,
    Planning,
    PoolConfig,
    ProxySettings,
    RecordTraffic,
    SharedStore,
    SpeculationConfig,
    Timeouts,
    Tls,
)

# (heading, model): each nested model once, under the path a file writes it at
SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("top level", ProxySettings),
    ("pools[]", PoolConfig),
    ("pools[].speculation", SpeculationConfig),
    ("pools[].sampling_defaults", SamplingDefaults),
    ("default_policy, models.*", ModelPolicy),
    ("structure_priors", StructurePriors),
    ("api_keys[]", ApiKey),
    ("timeouts", Timeouts),
    ("health", Health),
    ("shared_state", SharedStore),
    ("plan", Planning),
    ("plan.candidates[]", CandidatePool),
    ("tls", Tls),
    ("cors", Cors),
    ("record_traffic", RecordTraffic),
)

_INTRO = """\
# Configuration reference

Every key `draftgate serve --config FILE` reads, generated from the settings
models (`python -m draftgate.proxy.config_reference > docs/configuration.md`; a test
checks that this page matches them). Any key can also be set from the
environment, `DRAFTGATE_` and the key in capitals, nested keys joined by `__`:
`DRAFTGATE_TIMEOUTS__CLIENT_BODY=30`, `DRAFTGATE_DEFAULT_POLICY__MARGIN=0.05`.
Unknown keys stop startup, as do values out of bounds, with one line naming
the key. `draftgate serve --config FILE --check` validates without serving.
Times are in seconds. `SIGHUP` or `POST /draftgate/reload` applies a changed
file, except for the keys marked "read at startup": a reload that changes one
of those logs a warning naming it, and the reload's answer lists it under
`restart_needed`.
"""
_TABLE_HEAD = "| key | type | default | bounds | meaning |\n| --- | --- | --- | --- | --- |\n"
_FLAT = """
## Keys from before the grouping

Still accepted, for one release: each is moved into its group with a warning
in the log naming where it goes now, and a key written in its group wins over
its flat form. The same holds for their environment variables
(`DRAFTGATE_STATE` for `DRAFTGATE_SHARED_STATE__ADDRESS`).

| flat key | now |
| --- | --- |
"""


def render() -> str:
    parts = [_INTRO]
    for heading, model in SECTIONS:
        parts.append(f"\n## {heading}\n\n{_TABLE_HEAD}")
        parts.extend(_row(heading, name, field) for name, field in model.model_fields.items())
    parts.append(_FLAT)
    parts.extend(f"| `{flat}` | `{group}.{key}` |\n" for flat, (group, key) in FLAT_KEYS.items())
    return "".join(parts)


def _row(section: str, name: str, field: FieldInfo) -> str:
    startup = (name in READ_AT_STARTUP if section == "top level"
               else bool({section, f"{section}.{name}"} & set(READ_AT_STARTUP)))
    meaning = (field.description or "") + (" (read at startup)" if startup else "")
    cells = (f"`{name}`", _type_name(field.annotation), _default(field), _bounds(field), meaning)
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |\n"


def _type_name(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        named = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" or null" if type(None) in args else "")
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin in (list, tuple):
        return "list of " + _type_name(args[0])
    if origin is dict:
        return f"map of {_type_name(args[0])} to {_type_name(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object, below"
    return {str: "string", int: "integer", float: "number", bool: "boolean", Path: "path",
            SecretStr: "secret string"}.get(annotation, str(annotation))


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "below"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{json.dumps(value)}`"


def _bounds(field: FieldInfo) -> str:
    said = []
    for rule in field.metadata:
        for kind, sign in ((annotated_types.Ge, ">="), (annotated_types.Gt, ">"), (annotated_types.Le, "<="),
                           (annotated_types.Lt, "<")):
            if isinstance(rule, kind):
                said.append(f"{sign} {_number(getattr(rule, type(rule).__name__.lower()))}")
        if isinstance(rule, annotated_types.MinLen) and rule.min_length:
            said.append(f"at least {rule.min_length} long")
        if isinstance(rule, annotated_types.MaxLen):
            said.append(f"at most {rule.max_length} long")
        pattern = getattr(rule, "pattern", None)
        if pattern:
            said.append(f"matches `{pattern}`")
    return ", ".join(said)


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    print(render(), end="")
