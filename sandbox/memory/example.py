"""The worked example: one 10-token response in blocks of 4 against a 16-slot contiguous reservation.

"I love teaching AI and Machine Learning at Outcome School" is 10 tokens (one per word). Paged,
it takes 3 blocks of 4 slots and wastes 2 (only the last block is partly empty); a contiguous
reservation of 16 slots wastes 6. The blocks come from a real BlockManager while another request
("Paged attention stores KV in blocks") decodes at the same time, so the physical blocks of the
two interleave and the block table is not the identity.
"""
from __future__ import annotations

from sandbox.paging import BlockManager

RESPONSE = "I love teaching AI and Machine Learning at Outcome School"
OTHER = "Paged attention stores KV in blocks"
BLOCK_SIZE = 4
NUM_BLOCKS = 8
CONTIGUOUS_RESERVED = 16


def run_seed_example() -> dict:
    """Decode both requests token by token; return the layout and the waste figures."""
    words = RESPONSE.split(" ")
    other = OTHER.split(" ")
    bm = BlockManager(NUM_BLOCKS, BLOCK_SIZE)
    bm.allocate("other", 0)
    bm.allocate("seed", 0)
    memory: dict[int, tuple[str, str]] = {}           # physical slot -> (owner, word)
    for t in range(max(len(words), len(other))):
        for owner, toks in (("other", other), ("seed", words)):
            if t < len(toks):
                slot, copy = bm.append_slot(owner)
                assert copy is None
                memory[slot] = (owner, toks[t])
    table = bm.block_table("seed")
    blocks = [[memory.get((b * BLOCK_SIZE + o), ("seed", None))[1] for o in range(BLOCK_SIZE)] for b in table]
    paged_slots = len(table) * BLOCK_SIZE
    return {
        "example": "seed",
        "response": RESPONSE,
        "tokens": words,
        "num_tokens": len(words),
        "block_size": BLOCK_SIZE,
        "paged": {
            "blocks": len(table),
            "slots": paged_slots,
            "wasted_slots": paged_slots - len(words),
            "block_table": table,
            "blocks_content": blocks,
        },
        "contiguous": {
            "reserved": CONTIGUOUS_RESERVED,
            "wasted_slots": CONTIGUOUS_RESERVED - len(words),
        },
        "physical_memory": [
            [None if memory.get(b * BLOCK_SIZE + o) is None else list(memory[b * BLOCK_SIZE + o])
             for o in range(BLOCK_SIZE)] for b in range(NUM_BLOCKS)],
    }


def _row(cells: list[str], width: int) -> tuple[str, str]:
    border = "+" + "+".join("-" * (width + 2) for _ in cells) + "+"
    return border, "|" + "|".join(f" {c:<{width}} " for c in cells) + "|"


def render_seed_example(ex: dict) -> str:
    """The picture: the paged blocks with their table, physical memory, the contiguous slab."""
    width = max(len(w) for w in ex["tokens"] + OTHER.split(" "))
    bs = ex["block_size"]
    paged, contiguous = ex["paged"], ex["contiguous"]
    out = [f'Response: "{ex["response"]}" = {ex["num_tokens"]} tokens', "",
           f"Paged, block size {bs}: {paged['blocks']} blocks = {paged['slots']} slots, "
           f"{paged['wasted_slots']} wasted (only the last block is partly empty)", ""]
    for logical, (physical, content) in enumerate(zip(paged["block_table"], paged["blocks_content"])):
        border, cells = _row([w if w is not None else "_" for w in content], width)
        label = f"logical {logical} -> physical {physical}  "
        if logical == 0:
            out.append(" " * len(label) + border)
        out += [label + cells, " " * len(label) + border]
    out += ["", "Block table (logical -> physical): "
            + ", ".join(f"{i} -> {b}" for i, b in enumerate(paged["block_table"])), "",
            "Physical memory (S = this response, o = the other request decoding at the same time):"]
    for b, slots in enumerate(ex["physical_memory"]):
        cells = ["." if s is None else f"{'S' if s[0] == 'seed' else 'o'}:{s[1]}" for s in slots]
        border, cells = _row(cells, width + 2)
        out += ([" " * 11 + border] if b == 0 else []) + [f"  block {b}: " + cells, " " * 11 + border]
    words = ex["tokens"] + ["_"] * contiguous["wasted_slots"]
    out += ["", f"Contiguous reservation of {contiguous['reserved']} slots: {contiguous['wasted_slots']} wasted", ""]
    for start in range(0, len(words), 8):
        border, cells = _row(words[start:start + 8], width)
        out += ([border] if start == 0 else []) + [cells, border]
    return "\n".join(out)
