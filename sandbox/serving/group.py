"""A request inside the engine: its sequences, phase and progress (every sequence advances in lockstep).

Token counts: a group emits one token per sequence per step once decoding. ``generated`` tokens
emitted means each sequence holds prompt + generated - 1 tokens of KV (the last emitted token is
written by the next step). An admission computes ``context`` = prompt + generated tokens (a
recompute after preemption includes what was generated), minus ``cached`` ones found in the prefix
cache, and emits the next token when its last chunk is done.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from sandbox.serving.workloads import Request

WAITING, PREFILL, DECODE, SWAPPED, DONE = "waiting", "prefill", "decode", "swapped", "done"


@dataclass(eq=False)
class Group:
    req: Request
    arrival: float
    phase: str = WAITING
    seqs: list = field(default_factory=list)   # allocator sequence ids (one until the prompt is done)
    generated: int = 0            # tokens emitted by each sequence
    context: int = 0              # tokens this admission holds in KV once its prefill is done
    cached: int = 0               # of them, found in the prefix cache
    computed: int = 0             # of them, computed so far (cached ones count as computed)
    first_token: float | None = None
    finish: float | None = None
    preemptions: int = 0
    discarded: int = 0            # KV tokens the last recompute preemption threw away (recomputed on re-admission)
    resume_phase: str = WAITING   # the phase a swapped group returns to
    next_beam: int = 0            # beam search: the next sequence id suffix

    def __post_init__(self):
        # plain attributes, not properties: the engine reads them for every token
        self.width = self.req.width
        self.prompt_len = len(self.req.prompt)
        self.output_len = len(self.req.output)
        self.final_len = self.prompt_len + self.output_len - 1   # KV tokens a sequence ends with

    def known_ids(self) -> list[int]:
        """Token ids an admission computes: the prompt and every token emitted so far."""
        return self.req.prompt + self.req.output[:self.generated]

    def token_to_write(self) -> int:
        """Id of the token a decode step writes into the KV cache: the last one emitted."""
        return self.req.output[self.generated - 1]
