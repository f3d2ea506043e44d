"""Memory-level parallelism read from a kernel's SASS: how many global loads a warp keeps in flight.

    read(sass) -> LoadsInFlight      one function's SASS, as nvdisasm -c prints it (sandbox.analysis.sass)
    .loads_in_flight                 the most independent global loads a warp issues before it uses one
    .per_wait                        the hot loops' global loads per wait: what the model's Little's law uses

A warp issues loads until an instruction needs a register one of them writes; there it waits a memory
latency, and every load issued before that wait arrives together. So in the hot loop, per iteration:

  loads      global loads issued (LDG, LDGSTS, generic LD)
  waits      times an instruction reads (or overwrites) a register a pending load writes, plus one at the back
             edge if loads are still pending there (the next iteration's first use waits for them)
  batches    the loads issued between two waits (`max_batch`: the largest)
  chain      the longest chain of loads whose address depends on an earlier load of the iteration
             (block table entry -> K/V address -> K/V: 2); each link is one more wait

loads_in_flight = max_batch (the count the issue of a kernel's design states: "3 K vectors back to back");
per_wait = loads / waits, what a warp really has outstanding per latency it waits: 4 independent loads then
their use give 4 and 4; a chain of 3 dependent loads gives 1 and 1 (each link waits for the previous one);
a table entry, then 3 vectors, then a fourth used at once give 3 and 5 / 3. cp.async (LDGSTS) writes no
register: its wait is the DEPBAR that waits for the copies.

The hot loops are the innermost loops (a backward branch's range holding no other) that issue global loads,
keeping those that move at least half the bytes per iteration of the busiest one (a query-load prologue
loop of 2-byte loads is not the K/V loop of 16-byte ones); their loads and waits are summed. A function
without such a loop is read whole. A static reading: it assumes every instruction of the loop body runs
(predicated-off branches included) and that loads, not arithmetic, set the pace.
"""
from __future__ import annotations

import dataclasses
import re

from .sass import access_bits

LOADS = ("LDG", "LDGSTS", "LD")
_LINE = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(?:(@!?U?P[T0-9]+)\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)\s*(.*?)\s*;")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
_REG = re.compile(r"\b(U?R(?:\d+)|U?P[0-6])(?:\.(64|128))?\b")
_ASYNC = "async-copies"  # the pending cp.async group DEPBAR waits for


@dataclasses.dataclass(frozen=True)
class Instruction:
    address: int
    opcode: str
    modifiers: str
    operands: list
    guard: str | None
    target: str | None = None   # a branch's label


@dataclasses.dataclass(frozen=True)
class LoadsInFlight:
    """One function's reading (see the module docstring)."""

    loads_in_flight: int     # the most loads issued back to back before a use (1 when nothing is loaded)
    per_wait: float          # loads / waits over the hot loops (1.0 when nothing is loaded)
    loads: int               # global loads per iteration of the hot loops
    waits: int
    chain: int               # the longest dependent chain of loads (1: none depends on another)
    load_bytes: int          # bytes one lane requests per iteration (from the access widths)
    loops: tuple             # (first, last) SASS address of each hot loop; () when read whole

    def describe(self) -> str:
        where = (", ".join(f"{a:#06x}-{b:#06x}" for a, b in self.loops) if self.loops else "the whole function")
        return (f"{self.loads_in_flight} global loads back to back before a use, {self.per_wait:.2f} per wait "
                f"({self.loads} loads, {self.waits} waits per iteration of {where}; dependent chain {self.chain})")


def parse(sass: str) -> tuple[list[Instruction], dict]:
    """(instructions in address order, {label: address of the instruction after it})."""
    instructions, labels, pending_labels = [], {}, []
    for line in sass.splitlines():
        if m := _LABEL.match(line):
            pending_labels.append(m.group(1))
            continue
        m = _LINE.match(line)
        if not m:
            continue
        address, guard, opcode, modifiers, rest = m.groups()
        address = int(address, 16)
        for label in pending_labels:
            labels[label] = address
        pending_labels = []
        target = _TARGET.search(rest)
        operands = [o.strip() for o in _split_operands(rest)] if rest else []
        instructions.append(Instruction(address, opcode, modifiers, operands, guard,
                                        target.group(1) if target else None))
    return instructions, labels


def _split_operands(text: str) -> list[str]:
    """Operands at the top level (commas inside [] belong to an address)."""
    out, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(current)
            current = ""
        else:
            current += ch
    return out + [current]


def _registers(operand: str) -> list[str]:
    """Registers an operand names, a .64 pair or .128 quad expanded (RZ, PT and URZ are constants)."""
    out = []
    for name, width in _REG.findall(operand):
        base = re.match(r"(U?[RP])(\d+)", name)
        prefix, number = base.group(1), int(base.group(2))
        count = {"64": 2, "128": 4}.get(width, 1) if prefix.endswith("R") else 1
        out += [f"{prefix}{number + i}" for i in range(count)]
    return out


def _dests_and_sources(ins: Instruction) -> tuple[list[str], list[str]]:
    stores = ins.opcode.startswith("ST") or ins.opcode in ("RED", "REDG", "BAR", "BRA", "EXIT", "DEPBAR", "LDGSTS")
    guard = _registers(ins.guard.lstrip("@!")) if ins.guard else []
    if stores or not ins.operands:
        return [], guard + [r for o in ins.operands for r in _registers(o)]
    dest, *rest = ins.operands
    dests = _registers(dest)
    if ins.opcode in LOADS and dests and dests[0].startswith("R"):
        first = int(dests[0][1:])
        dests = [f"R{first + i}" for i in range(max(1, access_bits(ins.modifiers) // 32))]
    elif ".WIDE" in ins.modifiers and dests and dests[0].startswith("R"):
        dests = dests + [f"R{int(dests[0][1:]) + 1}"]
    # A predicate right after the destination is written too (ISETP P0, P1, ...; IADD3 R4, P1, ...: the carry).
    if rest and re.fullmatch(r"U?P[0-6]", rest[0]):
        dests.append(rest[0])
        rest = rest[1:]
    sources = guard + [r for o in rest for r in _registers(o)]
    return dests, sources


def loops(instructions: list[Instruction], labels: dict) -> list[tuple[int, int]]:
    """Innermost loops as (first, last) addresses: backward branches whose range holds no other loop."""
    found = []
    for ins in instructions:
        if ins.opcode == "BRA" and ins.target in labels and labels[ins.target] <= ins.address:
            found.append((labels[ins.target], ins.address))
    return [(a, b) for a, b in found if not any((c, d) != (a, b) and a <= c and d <= b for c, d in found)]


def _is_load(ins: Instruction) -> bool:
    return ins.opcode in LOADS


def scan(body: list[Instruction]) -> dict:
    """Loads, waits, largest batch, longest chain and bytes per lane over one pass of `body` (see the module)."""
    pending: set = set()
    depth: dict = {}
    loads = waits = batch = max_batch = chain = load_bytes = 0
    for ins in body:
        dests, sources = _dests_and_sources(ins)
        waits_here = pending & (set(sources) | set(dests))
        if ins.opcode == "DEPBAR" and _ASYNC in pending:
            waits_here.add(_ASYNC)
        if waits_here:
            waits += 1
            max_batch = max(max_batch, batch)
            batch = 0
            pending.clear()
        level = max((depth.get(r, 0) for r in sources), default=0)
        if _is_load(ins):
            loads += 1
            batch += 1
            load_bytes += access_bits(ins.modifiers) // 8
            chain = max(chain, level + 1)
            written = [_ASYNC] if ins.opcode == "LDGSTS" else dests
            pending.update(written)
            for r in written:
                depth[r] = level + 1
        else:
            for r in dests:
                depth[r] = level
    if batch:
        waits += 1
        max_batch = max(max_batch, batch)
    return dict(loads=loads, waits=waits, max_batch=max_batch, chain=chain, load_bytes=load_bytes)


def read(sass: str) -> LoadsInFlight:
    """The loads in flight of one function's SASS (see the module docstring)."""
    instructions, labels = parse(sass)
    bodies = []
    for first, last in loops(instructions, labels):
        body = [i for i in instructions if first <= i.address <= last]
        if any(_is_load(i) for i in body):
            bodies.append(((first, last), scan(body)))
    if bodies:
        busiest = max(s["load_bytes"] for _, s in bodies)
        bodies = [(span, s) for span, s in bodies if 2 * s["load_bytes"] >= busiest]
    else:
        whole = scan(instructions)
        bodies = [((), whole)] if whole["loads"] else []
    if not bodies:
        return LoadsInFlight(1, 1.0, 0, 0, 0, 0, ())
    total = {k: sum(s[k] for _, s in bodies) for k in ("loads", "waits", "load_bytes")}
    return LoadsInFlight(loads_in_flight=max(s["max_batch"] for _, s in bodies),
                         per_wait=total["loads"] / total["waits"], loads=total["loads"], waits=total["waits"], chain=max(s["chain"] for _, s in bodies),
                         load_bytes=total["load_bytes"], loops=tuple(span for span, _ in bodies if span))
