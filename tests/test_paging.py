"""BlockManager: exact examples, every error path, and a stateful model checked against a simulated cache."""
from __future__ import annotations

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sandbox.paging import BlockManager, OutOfBlocks


# ---- exact examples ---------------------------------------------------------------------------
def test_allocate_by_count_returns_slots_of_its_table():
    m = BlockManager(8, 4)
    slots = m.allocate("a", 6)
    table = m.block_table("a")
    assert len(table) == 2 and m.num_free_blocks == 6
    assert slots == [table[t // 4] * 4 + t % 4 for t in range(6)]
    assert m.num_tokens("a") == 6


def test_allocate_zero_tokens_then_append_takes_a_block():
    m = BlockManager(2, 4)
    assert m.allocate("a", 0) == [] and m.block_table("a") == []
    slot, copy = m.append_slot("a")
    assert copy is None and slot == m.block_table("a")[0] * 4


def test_append_fills_the_last_block_then_takes_a_new_one():
    m = BlockManager(4, 2)
    m.allocate("a", 1)
    b0 = m.block_table("a")[0]
    assert m.append_slot("a") == (b0 * 2 + 1, None)
    slot, copy = m.append_slot("a")
    b1 = m.block_table("a")[1]
    assert b1 != b0 and (slot, copy) == (b1 * 2, None) and m.num_tokens("a") == 3


def test_copy_on_write_after_fork():
    m = BlockManager(8, 4)
    m.allocate("parent", 6)                 # blocks [p0 full, p1 half]
    p0, p1 = m.block_table("parent")
    m.fork("parent", "child")
    assert m.block_table("child") == [p0, p1]
    assert m.ref_count(p0) == m.ref_count(p1) == 2
    free_before = m.num_free_blocks

    slot, copy = m.append_slot("child")     # the shared half block must be copied first
    c1 = m.block_table("child")[1]
    assert copy == (p1, c1) and c1 not in (p0, p1)
    assert slot == c1 * 4 + 2
    assert m.block_table("parent") == [p0, p1]
    assert m.ref_count(p1) == 1 and m.ref_count(c1) == 1 and m.ref_count(p0) == 2
    assert m.num_free_blocks == free_before - 1

    assert m.append_slot("parent") == (p1 * 4 + 2, None)   # now private again: no copy
    m.free("parent")
    assert m.block_table("child") == [p0, c1] and m.ref_count(p0) == 1


def test_fork_of_full_last_block_needs_no_copy():
    m = BlockManager(8, 4)
    m.allocate("a", 4)
    m.fork("a", "b")
    (shared,) = m.block_table("a")
    slot, copy = m.append_slot("b")
    assert copy is None and m.block_table("b")[0] == shared and slot == m.block_table("b")[1] * 4
    assert m.ref_count(shared) == 2


def test_prefix_sharing_of_full_blocks_only():
    m = BlockManager(16, 4)
    ids = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]        # two full blocks + a partial one
    m.allocate("a", ids)
    a = m.block_table("a")
    slots = m.allocate("b", ids)
    b = m.block_table("b")
    assert b[:2] == a[:2] and b[2] != a[2]      # the partial block stays private
    assert slots[:8] == [-1] * 8 and slots[8:] == [b[2] * 4, b[2] * 4 + 1]
    assert m.num_shared_hits == 2 and m.ref_count(a[0]) == 2 and m.ref_count(a[2]) == 1

    m.allocate("c", [1, 2, 3, 4, 5, 6, 7, 0])   # first block matches, second differs
    c = m.block_table("c")
    assert c[0] == a[0] and c[1] not in (a[1],) and m.num_shared_hits == 3

    m.allocate("d", [9, 9, 9, 9, 5, 6, 7, 8])   # same second block, other prefix: the chain differs
    assert not set(m.block_table("d")) & set(a)

    m.allocate("e", [1, 2, 3])                  # partial: never shared
    assert m.block_table("e")[0] not in a

    import numpy as np
    m.allocate("f", np.array(ids[:8], dtype=np.int32))    # any integer sequence works
    assert m.block_table("f") == a[:2]


def test_allocate_by_count_never_shares():
    m = BlockManager(8, 2)
    m.allocate("a", [1, 2, 3, 4])
    m.allocate("b", 4)
    assert not set(m.block_table("a")) & set(m.block_table("b"))
    assert m.num_shared_hits == 0


def test_append_filled_block_is_not_found_by_hash_and_shared_block_is_never_written():
    m = BlockManager(8, 2)
    m.allocate("a", [5, 6, 7])                  # [5 6] registered, [7 _] private
    m.allocate("b", [5, 6])
    a0, a1 = m.block_table("a")
    assert m.block_table("b") == [a0]
    slot, copy = m.append_slot("b")             # b's last block is full and shared: new block
    assert copy is None and slot // 2 not in (a0, a1)
    m.append_slot("a")                          # fills a1 by appending: content unknown to the index
    m.allocate("c", [5, 6, 7, 8])
    c = m.block_table("c")
    assert c[0] == a0 and c[1] != a1


def test_hash_collisions_never_alias_different_prefixes(monkeypatch):
    import sandbox.paging.block_manager as bm
    monkeypatch.setattr(bm, "hash", lambda key: 7, raising=False)   # every block collides
    m = BlockManager(8, 2)
    m.allocate("a", [1, 2, 3, 4])
    m.allocate("b", [3, 4, 1, 2])
    m.allocate("c", [1, 2, 1, 2])
    a, b, c = (m.block_table(s) for s in "abc")
    assert not set(a) & set(b) and c[0] == a[0] and c[1] not in a
    assert m.num_shared_hits == 1


def test_index_forgets_freed_blocks():
    m = BlockManager(4, 2)
    m.allocate("a", [1, 2])
    m.free("a")
    assert m.num_free_blocks == 4 and m._index == {} and m._key == {}
    m.allocate("b", [1, 2])
    assert m.num_shared_hits == 0


def test_blocks_needed_and_can_allocate_count_prefix_hits():
    m = BlockManager(3, 2)
    m.allocate("a", [1, 2, 3, 4])
    assert m.num_free_blocks == 1
    assert m.blocks_needed([1, 2, 3, 4, 5]) == 1 and m.can_allocate([1, 2, 3, 4, 5])
    assert m.blocks_needed(5) == 3 and not m.can_allocate(5)
    m.allocate("b", [1, 2, 3, 4, 5])
    assert m.num_free_blocks == 0


def test_fork_then_free_parent_keeps_child_and_nothing_leaks():
    m = BlockManager(6, 3)
    m.allocate("p", [1, 2, 3, 4])
    m.fork("p", "c1")
    m.fork("c1", "c2")
    for s in ("c1", "c2", "p"):
        m.append_slot(s)
    m.free("p")
    m.free("c1")
    assert len(m.block_table("c2")) == 2
    m.free("c2")
    assert m.num_free_blocks == 6 and len(m) == 0 and m._index == {} and set(m._ref) == {0}


def test_large_pool():
    m = BlockManager(1_000_000, 16)
    m.allocate(0, 17)
    assert m.num_free_blocks == 999_998


# ---- error paths --------------------------------------------------------------------------------
@pytest.mark.parametrize("num_blocks, block_size, word", [
    (0, 16, "num_blocks"), (-3, 16, "num_blocks"), (4, 0, "block_size"), (4, -1, "block_size")])
def test_bad_constructor_arguments(num_blocks, block_size, word):
    with pytest.raises(ValueError, match=f"{word} must be an integer >= 1"):
        BlockManager(num_blocks, block_size)


@pytest.mark.parametrize("num_blocks, block_size", [(4.0, 16), (4, "16"), (True, 4)])
def test_non_integer_constructor_arguments(num_blocks, block_size):
    with pytest.raises(TypeError, match="must be an integer"):
        BlockManager(num_blocks, block_size)


def test_bad_tokens():
    m = BlockManager(4, 2)
    before = m._state()
    with pytest.raises(ValueError, match="tokens must be an integer >= 0, got -1"):
        m.allocate("a", -1)
    with pytest.raises(TypeError, match="tokens must be an int count or a sequence"):
        m.allocate("a", "abc")
    with pytest.raises(TypeError, match="tokens must be an int count or a sequence"):
        m.allocate("a", [1, 2.5])
    with pytest.raises(TypeError, match="tokens must be an int count or a sequence"):
        m.allocate("a", 2.0)
    assert m._state() == before and "a" not in m


def test_unknown_sequences_raise_key_error():
    m = BlockManager(4, 2)
    m.allocate("a", 1)
    before = m._state()
    for call in (lambda: m.append_slot("x"), lambda: m.free("x"), lambda: m.block_table("x"),
                 lambda: m.fork("x", "y"), lambda: m.can_append("x"), lambda: m.num_tokens("x")):
        with pytest.raises(KeyError, match="unknown sequence 'x'"):
            call()
    assert m._state() == before


def test_duplicate_ids_raise_value_error():
    m = BlockManager(4, 2)
    m.allocate("a", 3)
    m.allocate("b", 1)
    before = m._state()
    with pytest.raises(ValueError, match="sequence 'a' is already allocated"):
        m.allocate("a", 1)
    with pytest.raises(ValueError, match="sequence 'b' is already allocated"):
        m.fork("a", "b")
    assert m._state() == before


def test_out_of_blocks_changes_nothing():
    m = BlockManager(3, 2)
    m.allocate("a", [1, 2, 3])
    m.fork("a", "b")
    before = m._state()
    with pytest.raises(OutOfBlocks, match=r"needs 2 blocks but only 1 are free"):
        m.allocate("c", 4)
    assert m._state() == before
    assert issubclass(OutOfBlocks, RuntimeError)
    m.allocate("c", 1)
    assert not m.can_append("a")
    before = m._state()
    with pytest.raises(OutOfBlocks, match=r"append_slot\('a'\) needs 1 block but 0 are free"):
        m.append_slot("a")          # shared partial last block, no block to copy into
    assert m._state() == before
    assert m.can_append("c")        # room in its own block
    m.append_slot("c")
    with pytest.raises(OutOfBlocks):
        m.append_slot("c")          # full last block, nothing free
    with pytest.raises(OutOfBlocks):
        m.allocate("d", [1, 2, 9, 9])   # first block is a hit, the second has no block
    assert "d" not in m


# ---- stateful model -----------------------------------------------------------------------------
ALPHABET = st.integers(0, 2)


class BlockManagerMachine(RuleBasedStateMachine):
    """Drives a BlockManager and a simulated physical KV store; each live sequence must read back its tokens."""

    @initialize(num_blocks=st.integers(1, 12), block_size=st.integers(1, 4))
    def setup(self, num_blocks, block_size):
        self.m = BlockManager(num_blocks, block_size)
        self.bs = block_size
        self.store: dict[int, int] = {}
        self.tokens: dict[int, list[int]] = {}
        self.next_id = 0
        self.next_value = 1000          # values written by count-allocations and appends: unique

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _fresh(self) -> int:
        self.next_value += 1
        return self.next_value

    def _write(self, slots, values):
        for s, v in zip(slots, values):
            if s >= 0:
                self.store[s] = v

    def _expect_out_of_blocks(self, call):
        before = self.m._state()
        with pytest.raises(OutOfBlocks):
            call()
        assert self.m._state() == before

    @rule(n=st.integers(0, 10))
    def allocate_count(self, n):
        sid = self._new_id()
        needed = -(-n // self.bs)
        assert self.m.can_allocate(n) == (needed <= self.m.num_free_blocks)
        if needed > self.m.num_free_blocks:
            self._expect_out_of_blocks(lambda: self.m.allocate(sid, n))
            return
        values = [self._fresh() for _ in range(n)]
        slots = self.m.allocate(sid, n)
        assert -1 not in slots
        self._write(slots, values)
        self.tokens[sid] = values

    @rule(ids=st.lists(ALPHABET, max_size=10))
    def allocate_ids(self, ids):
        sid = self._new_id()
        needed = self.m.blocks_needed(ids)
        assert needed <= -(-len(ids) // self.bs)
        if needed > self.m.num_free_blocks:
            assert not self.m.can_allocate(ids)
            self._expect_out_of_blocks(lambda: self.m.allocate(sid, ids))
            return
        free_before = self.m.num_free_blocks
        slots = self.m.allocate(sid, ids)
        assert self.m.num_free_blocks == free_before - needed
        cached = slots.count(-1)
        assert slots[:cached] == [-1] * cached and cached % self.bs == 0
        self._write(slots, ids)
        self.tokens[sid] = list(ids)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def append(self, data):
        sid = data.draw(st.sampled_from(sorted(self.tokens)))
        if not self.m.can_append(sid):
            self._expect_out_of_blocks(lambda: self.m.append_slot(sid))
            return
        slot, copy = self.m.append_slot(sid)
        table = self.m.block_table(sid)
        n = len(self.tokens[sid])
        assert slot == table[n // self.bs] * self.bs + n % self.bs
        if copy is not None:
            src, dst = copy
            assert dst == table[-1] and src != dst and self.m.ref_count(src) >= 1
            for o in range(self.bs):       # the copy goes first, then the new token
                if src * self.bs + o in self.store:
                    self.store[dst * self.bs + o] = self.store[src * self.bs + o]
        value = self._fresh()
        self.store[slot] = value
        self.tokens[sid].append(value)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.tokens)))
        child = self._new_id()
        free_before = self.m.num_free_blocks
        self.m.fork(parent, child)
        assert self.m.num_free_blocks == free_before
        self.tokens[child] = list(self.tokens[parent])

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        sid = data.draw(st.sampled_from(sorted(self.tokens)))
        self.m.free(sid)
        del self.tokens[sid]

    @rule()
    def too_big(self):
        n = (self.m.num_free_blocks + 1) * self.bs
        self._expect_out_of_blocks(lambda: self.m.allocate(self._new_id(), n))

    @rule()
    def unknown_and_duplicate(self):
        before = self.m._state()
        with pytest.raises(KeyError):
            self.m.append_slot(-1)
        if self.tokens:
            sid = min(self.tokens)
            with pytest.raises(ValueError):
                self.m.allocate(sid, 0)
            with pytest.raises(ValueError):
                self.m.fork(sid, sid)
        assert self.m._state() == before

    @invariant()
    def every_sequence_reads_back_its_tokens(self):
        for sid, toks in self.tokens.items():
            table = self.m.block_table(sid)
            assert len(table) == -(-len(toks) // self.bs) and self.m.num_tokens(sid) == len(toks)
            got = [self.store.get(table[t // self.bs] * self.bs + t % self.bs) for t in range(len(toks))]
            assert got == toks, f"sequence {sid}"

    @invariant()
    def counts_are_consistent(self):
        m = self.m
        refs = [0] * m.num_blocks
        for sid in self.tokens:
            for b in m.block_table(sid):
                refs[b] += 1
        assert refs == [m.ref_count(b) for b in range(m.num_blocks)]
        used = sum(r > 0 for r in refs)
        assert m.num_free_blocks + used == m.num_blocks == m.num_free_blocks + m.num_used_blocks
        assert sorted(m._free) == [b for b in range(m.num_blocks) if refs[b] == 0]

    @invariant()
    def only_full_live_blocks_are_registered(self):
        m = self.m
        assert sorted(m._index.values()) == sorted(m._key)
        for sid, toks in self.tokens.items():
            for i, b in enumerate(m.block_table(sid)):
                if b in m._key:
                    assert (i + 1) * self.bs <= len(toks)
                    assert list(m._key[b][2]) == toks[i * self.bs:(i + 1) * self.bs]

    def teardown(self):
        if not hasattr(self, "m"):
            return
        for sid in list(self.tokens):
            self.m.free(sid)
        assert self.m.num_free_blocks == self.m.num_blocks
        assert self.m._index == {} and self.m._key == {} and set(self.m._ref) == {0}


TestBlockManagerMachine = BlockManagerMachine.TestCase
# One stateful example costs about 10 ms; ten times the profile's example count keeps the ci run
# near a second and scales with the thorough profile.
TestBlockManagerMachine.settings = settings(settings.default, max_examples=10 * settings.default.max_examples)
