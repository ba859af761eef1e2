"""Memoised OmegaConf interpolation parsing, for many compositions in one process.

OmegaConf parses every `${...}` string with its ANTLR grammar each time it resolves it; verl's
tree holds about a hundred of them, the same strings in every composition. The parse tree
depends on the string alone and OmegaConf's resolver only reads it, so one tree per string is
shared. Installed by the batch paths (launch scripts), not at import."""

from __future__ import annotations

from functools import lru_cache

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    import omegaconf.base as base

    original = base.parse

    @lru_cache(maxsize=4096)
    def parse(value: str, parser_rule: str = "configValue", lexer_mode: str = "DEFAULT_MODE"):
        return original(value, parser_rule, lexer_mode)

    parse.__wrapped__ = original
    base.parse = parse
    _installed = True
