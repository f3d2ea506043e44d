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
a table entry, then 3 vectors, then a fourth used at once give 3 and 5 / 3.

cp.async (LDGSTS) writes no register. Its copies join an open group that LDGDEPBAR commits
(cp.async.commit_group); `DEPBAR.LE SBn, k` (cp.async.wait_group k) waits until at most k committed groups
are pending, retiring the oldest; a bare DEPBAR waits for every copy. A pipelined loop that commits one group
per stage and waits with `.LE SB0, 3` keeps 4 groups in flight across each wait: that wait's batch is every
copy pending when it starts (4 groups), and it counts as retired / pending of a wait (1/4), since the latency
it waits overlaps the three younger groups' (Little's law: 4 stages of g copies give 4g per latency). A loop
is read in its steady state: the groups pending at its back edge are those its previous iterations left,
found by running the body until they repeat (at most MAX_WARMUP passes; a loop whose groups keep growing is
read from none pending, its copies waited at the back edge like registers).

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
_DEPBAR_LE = re.compile(r"SB\d+")
MAX_WARMUP = 8  # passes over a loop body to find the cp.async groups pending at its back edge


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
    waits: float             # latencies waited (a cp.async wait that leaves groups pending counts a fraction)
    chain: int               # the longest dependent chain of loads (1: none depends on another)
    load_bytes: int          # bytes one lane requests per iteration (from the access widths)
    loops: tuple             # (first, last) SASS address of each hot loop; () when read whole

    def describe(self) -> str:
        where = (", ".join(f"{a:#06x}-{b:#06x}" for a, b in self.loops) if self.loops else "the whole function")
        return (f"{self.loads_in_flight} global loads back to back before a use, {self.per_wait:.2f} per wait "
                f"({self.loads} loads, {self.waits:g} waits per iteration of {where}; dependent chain {self.chain})")


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


def depbar_limit(ins: Instruction) -> int | None:
    """The k of `DEPBAR.LE SBn, k` (cp.async groups left pending), 0 for a bare DEPBAR, None if not a DEPBAR."""
    if ins.opcode != "DEPBAR":
        return None
    if ".LE" in ins.modifiers and len(ins.operands) >= 2 and _DEPBAR_LE.fullmatch(ins.operands[0]):
        return int(ins.operands[1], 0)
    return 0


def scan(body: list[Instruction], groups: tuple = (), steady: bool = False) -> dict:
    """Loads, waits, largest batch, longest chain and bytes per lane over one pass of `body` (see the module).

    groups: copies per cp.async group committed and pending when the pass starts (oldest first); steady: they
    are the loop's steady state, so copies still pending at the back edge are the next iteration's, not a wait.
    The result's `groups` are those pending at the end (an open group is committed by a bare DEPBAR's wait)."""
    pending: set = set()
    depth: dict = {}
    groups, open_group = list(groups), 0
    loads = batch = max_batch = chain = load_bytes = 0
    waits = 0.0
    for ins in body:
        dests, sources = _dests_and_sources(ins)
        if pending & (set(sources) | set(dests)):
            waits += 1
            max_batch = max(max_batch, batch)
            batch = 0
            pending.clear()
        if ins.opcode == "LDGDEPBAR":
            groups.append(open_group)
            open_group = 0
        keep = depbar_limit(ins)
        if keep is not None:
            if keep == 0 and open_group:   # a bare DEPBAR (wait_all) commits and waits the open group too
                groups.append(open_group)
                open_group = 0
            in_flight = sum(groups)
            retired = sum(groups[:max(0, len(groups) - keep)])
            del groups[:max(0, len(groups) - keep)]
            if retired:
                waits += retired / in_flight
                max_batch = max(max_batch, in_flight)
        level = max((depth.get(r, 0) for r in sources), default=0)
        if _is_load(ins):
            loads += 1
            load_bytes += access_bits(ins.modifiers) // 8
            chain = max(chain, level + 1)
            if ins.opcode == "LDGSTS":
                open_group += 1
            else:
                batch += 1
                pending.update(dests)
            for r in dests if ins.opcode != "LDGSTS" else ():
                depth[r] = level + 1
        else:
            for r in dests:
                depth[r] = level
    left = batch + (0 if steady else sum(groups) + open_group)
    if left:   # the back edge (or the kernel's end) waits for what is still pending
        waits += 1
        max_batch = max(max_batch, left)
    return dict(loads=loads, waits=waits, max_batch=max_batch, chain=chain, load_bytes=load_bytes,
                groups=tuple(groups) + ((open_group,) if open_group else ()))


def steady_groups(body: list[Instruction]) -> tuple | None:
    """The cp.async groups pending at a loop's back edge once its iterations repeat (None: they keep growing)."""
    groups: tuple = ()
    for _ in range(MAX_WARMUP):
        after = scan(body, groups, steady=True)["groups"]
        if after == groups:
            return groups
        groups = after
    return None


def read(sass: str) -> LoadsInFlight:
    """The loads in flight of one function's SASS (see the module docstring)."""
    instructions, labels = parse(sass)
    bodies = []
    for first, last in loops(instructions, labels):
        body = [i for i in instructions if first <= i.address <= last]
        if any(_is_load(i) for i in body):
            groups = steady_groups(body)
            bodies.append(((first, last), scan(body, groups or (), steady=groups is not None)))
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
