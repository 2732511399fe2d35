"""draftgate.proxy.auth: which Authorization headers carry which token, and which tokens match."""

from __future__ import annotations

from pydantic import SecretStr

from draftgate.proxy.auth import bearer_token, token_matches

KEYS = [SecretStr("first-key"), SecretStr("second-key"), SecretStr("clé-unicode")]


def test_the_bearer_scheme_is_read_in_any_case_and_other_schemes_are_not() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer abc") == bearer_token("BEARER  abc ") == "abc"
    for header in ("", "Bearer", "Bearer ", "Basic abc", "abc", "Bearerabc"):
        assert bearer_token(header) is None, header


def test_any_configured_key_matches_and_nothing_else_does() -> None:
    assert token_matches("first-key", KEYS) and token_matches("second-key", KEYS)
    assert token_matches("clé-unicode", KEYS)
    for token in (None, "", "first-ke", "first-key2", "FIRST-KEY", "second-key "):
        assert not token_matches(token, KEYS), token
    assert not token_matches("first-key", [])
