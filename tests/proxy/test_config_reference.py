"""docs/configuration.md is the settings models, written out: it must say what the proxy accepts."""

from __future__ import annotations

import typing
from pathlib import Path

from pydantic import BaseModel

from draftgate.proxy.config import READ_AT_STARTUP, ProxySettings
from draftgate.proxy.config_reference import SECTIONS, render

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_committed_reference_is_the_one_the_models_write() -> None:
    assert DOC.read_text() == render(), "regenerate: python -m draftgate.proxy.config_reference > docs/configuration.md"


def test_every_key_is_explained_and_every_nested_model_has_its_section() -> None:
    documented = {model for _, model in SECTIONS}
    for _, model in SECTIONS:
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"
            for inner in _models_in(field.annotation):
                assert inner in documented, f"{model.__name__}.{name} nests {inner.__name__}, which has no section"


def test_keys_read_at_startup_are_keys_and_marked_so() -> None:
    """A key read at startup is a setting (``group.key`` in a group) and is marked so in its
    section; a whole group read at startup is marked on the top level."""
    text = render()
    sections = {heading: section for heading, section in
                (part.split("\n", 1) for part in text.split("\n## ")[1:])}
    for key in READ_AT_STARTUP:
        group, _, name = key.rpartition(".")
        model = ProxySettings.model_fields[group].annotation if group else ProxySettings
        assert name in model.model_fields, key
        row = next(line for line in sections[group or "top level"].splitlines() if line.startswith(f"| `{name}` |"))
        assert row.endswith("(read at startup) |"), key
    assert "(read at startup)" not in next(line for line in text.splitlines() if line.startswith("| `margin` |"))


def _models_in(annotation: object) -> set[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {annotation}
    return set().union(*(_models_in(a) for a in typing.get_args(annotation))) if typing.get_args(annotation) else set()
