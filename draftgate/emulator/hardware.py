"""The GPUs and models the emulator knows by name, as data (``catalogue.yaml``).

A GPU is its datasheet (memory, HBM bandwidth, dense BF16 FLOPs, NVLink); a model
is its shape (parameters, layers, heads, width, vocabulary). The figures are
facts, named with their sources in docs/emulator.md; how well a serving engine
uses them is an assumption and lives in ``profile.Efficiency``. A profile file
extends the catalogue with entries of its own under the same keys, so an
operator's GPU or model is one YAML entry away.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

CATALOGUE = Path(__file__).with_name("catalogue.yaml")


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Gpu(Frozen):
    """One GPU, from its datasheet, named as the catalogue names it."""

    name: str
    memory_bytes: float = Field(gt=0)
    hbm_bytes_per_second: float = Field(gt=0)
    bf16_flops: float = Field(gt=0, description="dense, without structured sparsity")
    link_bytes_per_second: float = Field(gt=0, description="NVLink, one direction, one GPU")


class ModelShape(Frozen):
    """What a pass of a model moves and computes. BF16 weights: two bytes a parameter."""

    name: str
    params: float = Field(gt=0)
    layers: int = Field(ge=1)
    q_heads: int = Field(ge=1)
    kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    hidden: int = Field(ge=1)
    vocab: int = Field(ge=1)
    drafters: dict[str, str] = Field(default_factory=dict, description="speculation family -> drafter's name")

    @property
    def weight_bytes(self) -> float:
        return 2.0 * self.params

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V, each ``kv_heads * head_dim`` BF16 values, in every layer."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * 2


class UnknownName(ValueError):
    """A GPU or model the catalogue does not hold."""


class Catalogue:
    """GPUs and models by name: the committed catalogue, and whatever a profile file adds."""

    def __init__(self, gpus: dict[str, Gpu], models: dict[str, ModelShape]) -> None:
        self.gpus = gpus
        self.models = models

    @classmethod
    def load(cls, extra: dict[str, Any] | None = None) -> Catalogue:
        """The committed catalogue, extended (or overridden, name by name) by ``extra``'s
        ``gpus`` and ``models``."""
        raw = yaml.safe_load(CATALOGUE.read_text())
        gpus = dict(raw["gpus"])
        models = dict(raw["models"])
        for key, into in (("gpus", gpus), ("models", models)):
            added = (extra or {}).get(key) or {}
            if not isinstance(added, dict):
                raise ValueError(f"{key} must map names to entries")
            into.update(added)
        try:
            return cls({name: Gpu.model_validate({"name": name, **_entry(e)}) for name, e in gpus.items()},
                       {name: ModelShape.model_validate({"name": name, **_entry(e)}) for name, e in models.items()})
        except ValidationError as exc:
            error = exc.errors()[0]
            raise ValueError(f"catalogue entry {'.'.join(str(p) for p in error['loc'])}: {error['msg']}") from None

    def gpu(self, name: str) -> Gpu:
        found = self.gpus.get(name)
        if found is None:
            raise UnknownName(f"unknown GPU {name!r}; known: {', '.join(sorted(self.gpus))} (a profile file adds more)")
        return found

    def model(self, name: str) -> ModelShape:
        found = self.models.get(name)
        if found is None:
            targets = sorted(n for n, m in self.models.items() if m.drafters)
            raise UnknownName(f"unknown model {name!r}; known targets: {', '.join(targets)} (a profile file adds more)")
        return found


def _entry(entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise ValueError(f"a catalogue entry must be a mapping, not {entry!r}")
    return {k: v for k, v in entry.items() if k != "name"}


DEFAULT = Catalogue.load()
