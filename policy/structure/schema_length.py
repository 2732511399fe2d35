"""Expected length of the JSON a model writes for a schema, without generating it.

A tool call's cost to speculate depends on how many tokens it spans, and the
schema says most of that: the keys it must write, enum values it picks from,
the shapes of the values. Walking it is bounded (depth, node budget, cycle
guard on ``$ref``) because the schema comes from the client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from draftgate.policy.structure.priors import StructurePriors

_FORMAT_CHARS = {
    "date": 10, "date-time": 25, "time": 8, "email": 20, "uri": 35, "url": 35,
    "uuid": 36, "ipv4": 13, "ipv6": 25, "hostname": 16,
}
# A leaf whose keys are all among these is sized by its type alone: the common
# case in tool schemas, and a walk that needs to look no further.
_PLAIN_KEYS = frozenset({"type", "description", "title", "default", "examples", "example"})
# Keys that decide a node's size before its "type" does.
_SHAPING_KEYS = frozenset({"$ref", "const", "enum", "anyOf", "oneOf", "allOf"})
# the schema of a tool that declares no parameters: read, never written
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
_TYPE_ALIASES = {"dict": "object", "float": "number", "int": "integer", "bool": "boolean",
                 "str": "string", "list": "array", "tuple": "array"}


@dataclass(slots=True)
class SchemaWalk:
    """Carries the limits and what was ignored through one walk."""

    priors: StructurePriors
    root: Any
    nodes: int = 0
    notes: set[str] = field(default_factory=set)
    resolving: set[str] = field(default_factory=set)
    leaf: dict[Any, float] = field(default_factory=dict)
    max_nodes: int = field(init=False, default=0)
    optional_share: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.leaf = _leaf_sizes(self.priors)
        # read once per walk, not once per property
        self.max_nodes = self.priors.max_schema_nodes
        self.optional_share = self.priors.optional_property_share

    def reset(self, root: Any) -> None:
        """Reuse this walk for another root (one walk serves all tools of a request)."""
        self.root = root
        self.nodes = 0
        self.resolving.clear()

    def chars(self, schema: Any, depth: int = 0) -> float:
        """Expected characters of an instance of ``schema`` (compact JSON)."""
        if type(schema) is dict and schema.keys() <= _PLAIN_KEYS and type(kind := schema.get("type")) is str:
            size = self.leaf.get(kind)
            if size is not None:
                self.nodes += 1
                return size
        self.nodes += 1
        if self.nodes > self.max_nodes:
            self.notes.add(f"schema larger than {self.max_nodes} nodes: rest estimated from priors")
            return self.priors.string_value_chars
        if depth > self.priors.max_schema_depth:
            self.notes.add(f"schema nested deeper than {self.priors.max_schema_depth}: rest estimated from priors")
            return self.priors.string_value_chars
        if schema is True or schema == {}:
            return self.priors.string_value_chars
        if not isinstance(schema, dict):
            self.notes.add("a schema node that is not an object was ignored")
            return self.priors.string_value_chars
        if schema.keys().isdisjoint(_SHAPING_KEYS) and schema.get("type") == "object":
            return self._object(schema, depth)  # the usual tool parameters: straight to the properties
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self._ref(ref, depth)
        if "const" in schema:
            return float(len(_compact(schema["const"])))
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            enum = enum[:256]
            if all(type(v) is str for v in enum):
                return sum(map(len, enum)) / len(enum) + 2.0  # quoted
            return sum(len(_compact(v)) for v in enum) / len(enum)
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                return sum(self.chars(o, depth + 1) for o in options[:16]) / min(len(options), 16)
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and all_of:
            # Conjoined object schemas write the union of their keys; subtract the
            # extra braces each part would otherwise count.
            parts = [self.chars(o, depth + 1) for o in all_of[:16]]
            return max(2.0, sum(parts) - 2.0 * (len(parts) - 1))
        return self._typed(schema, depth)

    def _typed(self, schema: dict[str, Any], depth: int) -> float:
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if isinstance(k, str) and k != "null"]
            kind = kinds[0] if kinds else "null"
        if not isinstance(kind, str):
            kind = "object" if "properties" in schema else ("array" if "items" in schema else "string")
        kind = _TYPE_ALIASES.get(kind, kind)
        p = self.priors
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, depth)
        if kind == "string":
            fmt = schema.get("format")
            if isinstance(fmt, str) and fmt in _FORMAT_CHARS:
                return _FORMAT_CHARS[fmt] + 2.0
            chars = p.string_value_chars
            max_len = _number(schema.get("maxLength"))
            min_len = _number(schema.get("minLength"))
            if max_len is not None:
                chars = min(chars, max_len)
            if min_len is not None:
                chars = max(chars, min_len)
            return chars + 2.0  # quotes
        if kind in ("integer", "number"):
            return p.number_value_chars
        if kind == "boolean":
            return 4.5
        if kind == "null":
            return 4.0
        self.notes.add(f"unknown schema type {kind[:40]!r} estimated as a string")
        return p.string_value_chars

    def _object(self, schema: dict[str, Any], depth: int) -> float:
        props = schema.get("properties")
        required = schema.get("required")
        if not isinstance(required, list):
            required = ()
        elif len(required) > 16:  # a short list is searched faster than a set is built
            required = {r for r in required[:4096] if type(r) is str}
        total = 2.0  # braces
        keys = 0.0
        if isinstance(props, dict) and props:
            optional = self.optional_share
            leaf = self.leaf
            items = props.items() if len(props) <= self.max_nodes else list(props.items())[: self.max_nodes]
            for name, sub in items:
                share = 1.0 if name in required else optional
                if share <= 0:
                    continue
                # plain leaves inline: most properties are {"type": ..., "description": ...}
                if (type(sub) is dict and sub.keys() <= _PLAIN_KEYS and type(kind := sub.get("type")) is str
                        and (value := leaf.get(kind))):
                    self.nodes += 1
                else:
                    value = self.chars(sub, depth + 1)
                total += share * (len(str(name)) + 3.0 + value)  # "key": value
                keys += share
        elif props is not None and not isinstance(props, dict):
            self.notes.add("'properties' that is not an object was ignored")
        else:
            extra = schema.get("additionalProperties", True)
            if extra is not False:
                n = self.priors.open_object_keys
                total += n * (8.0 + 3.0 + self.chars(extra if isinstance(extra, dict) else True, depth + 1))
                keys += n
        return total + max(0.0, keys - 1.0)  # commas

    def _array(self, schema: dict[str, Any], depth: int) -> float:
        items = schema.get("items", True)
        prefix = schema.get("prefixItems")
        lo, hi = _number(schema.get("minItems")), _number(schema.get("maxItems"))
        count = self.priors.array_items
        if lo is not None:
            count = max(count, lo)
        if hi is not None:
            count = min(count, hi)
        if isinstance(prefix, list) and prefix:
            return 2.0 + sum(self.chars(x, depth + 1) + 1.0 for x in prefix[:64])
        if isinstance(items, list):  # draft-04 tuple form
            return 2.0 + sum(self.chars(x, depth + 1) + 1.0 for x in items[:64])
        return 2.0 + count * (self.chars(items, depth + 1) + 1.0)

    def _ref(self, ref: str, depth: int) -> float:
        if ref in self.resolving:
            self.notes.add("recursive $ref: one level expanded, the rest from priors")
            return self.priors.string_value_chars
        target = _resolve(self.root, ref)
        if target is None:
            self.notes.add(f"dangling $ref {ref[:60]!r} estimated from priors")
            return self.priors.string_value_chars
        self.resolving.add(ref)
        try:
            return self.chars(target, depth + 1)
        finally:
            self.resolving.discard(ref)


def _leaf_sizes(priors: StructurePriors) -> dict[Any, float]:
    """Characters of a value of each scalar type (a string with its quotes), by type name and alias."""
    string = priors.string_value_chars + 2.0
    number = priors.number_value_chars
    return {"string": string, "str": string, "integer": number, "int": number, "number": number,
            "float": number, "boolean": 4.5, "bool": 4.5, "null": 4.0}


def expected_json_chars(schema: Any, priors: StructurePriors) -> tuple[float, set[str]]:
    """Expected compact-JSON characters for ``schema``, and what was ignored."""
    walk = SchemaWalk(priors, schema)
    return walk.chars(schema), walk.notes


def _resolve(root: Any, ref: str) -> Any:
    if not ref.startswith("#"):
        return None
    node = root
    for part in ref[1:].split("/"):
        if part == "":
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _number(value: Any) -> float | None:
    """A non-negative bound from the schema, capped: clients can write 1e308."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    # capped before the conversion: float() of an integer past float range raises
    return float(min(value, 10_000)) if value >= 0 else None


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    return "x" * 16  # structured consts are rare; a fixed guess keeps this bounded
