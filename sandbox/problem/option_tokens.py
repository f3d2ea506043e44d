"""The sweep's --options words, read through the option table: "window=1024,softcap=30,alibi,kscale=0.5".

Each row of the table lists its tokens (option_schema.Token): `name` or `name=VALUE`. OptionTokens holds
what a command line gave, in table order; it turns into DecodeProblem keywords (problem_keywords) and
into AttentionOptions (attention) through the same rows' build().
"""
from __future__ import annotations

import dataclasses

from .option_schema import Context
from .options import OPTIONS, PROBLEM_KEYWORDS, AttentionOptions
from ..errors import RefusedRequest

TOKENS = {token.name: token for row in OPTIONS for token in row.tokens}


@dataclasses.dataclass(frozen=True)
class OptionTokens:
    """The --options words of a shape: ((token name, parsed value), ...) in table order; () is none."""

    items: tuple = ()

    def __bool__(self) -> bool:
        return bool(self.items)

    def get(self, name: str, default=None):
        return dict(self.items).get(name, default)

    @property
    def text(self) -> str:
        """Canonical "window=1024,softcap=30,alibi,kscale=0.5,vscale=2"; "" when none is set."""
        return ",".join(TOKENS[name].text(value) for name, value in self.items)

    def problem_keywords(self, context: Context) -> dict:
        """DecodeProblem.random / shared keywords of these words (context: num_heads, the cache's format)."""
        keywords: dict = {}
        for name, value in self.items:
            keywords.update(TOKENS[name].keywords(value, context))
        return keywords

    def attention(self, context: Context) -> AttentionOptions:
        """The AttentionOptions of these words for a problem of `context` (validated)."""
        keywords = dict(PROBLEM_KEYWORDS, **self.problem_keywords(context))
        values: dict = {}
        for option in OPTIONS:
            values.update(option.build(keywords, context, None))
        return AttentionOptions(**values).validate(context)


NO_OPTIONS = OptionTokens()


def known_tokens() -> str:
    """"window=N, softcap=X, alibi, kscale=X, vscale=X": every token, for messages and --help."""
    return ", ".join(name if token.takes is None else f"{name}={token.takes}" for name, token in TOKENS.items())


def parse_option_tokens(text: str, what: str = "--options") -> OptionTokens:
    """"window=1024,softcap=30,alibi" -> OptionTokens; ValueError (one line) naming the bad item."""
    given: dict = {}
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name, value = name.strip().lower(), value.strip()
        token = TOKENS.get(name)
        if token is None:
            raise RefusedRequest(f"{what} {text!r}: unknown option {name!r} (known: {known_tokens()})")
        if name in given:
            raise RefusedRequest(f"{what} {text!r}: {name} given twice")
        if token.takes is not None and not (sep and value):
            raise RefusedRequest(f"{what} {text!r}: {name} needs a value ({name}={token.takes})")
        try:
            given[name] = token.parse(value) if (sep or token.takes is not None) else True
        except ValueError as exc:
            raise RefusedRequest(f"{what} {text!r}: {exc}") from None
    return OptionTokens(tuple((name, given[name]) for name in TOKENS if name in given))
