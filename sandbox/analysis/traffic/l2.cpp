// l2.cpp: a fully associative LRU L2 of 32-byte sectors over raw.py's sector stream (see l2.py).
//
// Reads fill whole sectors from DRAM; a store writes into L2 without reading DRAM (the sector keeps a
// byte mask of what was written), and a later read of bytes outside that mask fetches the sector. A
// dirty sector reaches DRAM once per time it is evicted, or at the flush that ends a variant's call;
// its DRAM write is charged to the block that first dirtied it. Atomics read (a miss fetches) and write.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

extern "C" {

struct __attribute__((packed)) Row {  // raw.SECTOR_DTYPE, byte for byte
    int64_t block;
    uint64_t sector;
    uint32_t mask;
    uint8_t write;
    uint8_t read;
};

// One resident sector; the LRU list runs through prev/next (head = most recent, -1 terminated).
struct Entry {
    uint64_t sector;
    int64_t owner;       // block charged with the write-back
    int32_t prev, next;
    uint32_t mask;       // bytes written while resident (valid without a DRAM read)
    uint8_t full, dirty;
};

// Open addressing with linear probing; a slot keeps the sector beside the entry index, so probing
// never leaves the slot array.
struct Slot {
    uint64_t sector;
    int64_t entry;       // -1: empty
};

struct L2 {
    int64_t capacity;
    Entry* entries;
    int32_t head, tail, free_head;
    Slot* slots;
    uint64_t slot_mask;
};

static uint64_t hash64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

EXPORT L2* l2_new(int64_t capacity) {
    if (capacity > (1ll << 30)) capacity = 1ll << 30;  // int32 links
    L2* c = (L2*)calloc(1, sizeof(L2));
    c->capacity = capacity;
    c->entries = (Entry*)malloc(capacity * sizeof(Entry));
    uint64_t nslots = 1;
    while (nslots < (uint64_t)capacity * 2) nslots <<= 1;
    c->slots = (Slot*)malloc(nslots * sizeof(Slot));
    for (uint64_t i = 0; i < nslots; ++i) c->slots[i].entry = -1;
    c->slot_mask = nslots - 1;
    c->head = c->tail = -1;
    for (int64_t i = 0; i < capacity; ++i) c->entries[i].next = i + 1 < capacity ? (int32_t)(i + 1) : -1;
    c->free_head = capacity ? 0 : -1;
    return c;
}

EXPORT void l2_free(L2* c) {
    free(c->entries);
    free(c->slots);
    free(c);
}

static uint64_t find_slot(const L2* c, uint64_t sector) {
    uint64_t i = hash64(sector) & c->slot_mask;
    while (c->slots[i].entry >= 0 && c->slots[i].sector != sector) i = (i + 1) & c->slot_mask;
    return i;
}

// Backward-shift deletion keeps every probe chain unbroken: an entry after the hole moves into it
// unless its home slot lies cyclically in (hole, its slot].
static void erase_slot(L2* c, uint64_t sector) {
    uint64_t i = find_slot(c, sector), j = i;
    for (;;) {
        j = (j + 1) & c->slot_mask;
        if (c->slots[j].entry < 0) break;
        const uint64_t home = hash64(c->slots[j].sector) & c->slot_mask;
        const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            c->slots[i] = c->slots[j];
            i = j;
        }
    }
    c->slots[i].entry = -1;
}

static void unlink_entry(L2* c, int32_t e) {
    Entry& x = c->entries[e];
    if (x.prev >= 0) c->entries[x.prev].next = x.next; else c->head = x.next;
    if (x.next >= 0) c->entries[x.next].prev = x.prev; else c->tail = x.prev;
}

static void push_front(L2* c, int32_t e) {
    Entry& x = c->entries[e];
    x.prev = -1;
    x.next = c->head;
    if (c->head >= 0) c->entries[c->head].prev = e;
    c->head = e;
    if (c->tail < 0) c->tail = e;
}

// Feed `n` rows whose blocks are numbered from `owner_base` in the call's owner arrays; DRAM bytes are
// added to dram_read / dram_write (indexed by owner). Returns the number of L2 hits.
EXPORT int64_t l2_feed(L2* c, const Row* rows, int64_t n, int64_t owner_base, int64_t* dram_read,
                       int64_t* dram_write) {
    int64_t hits = 0;
    for (int64_t r = 0; r < n; ++r) {
        const Row& row = rows[r];
        const int64_t owner = owner_base + row.block;
        uint64_t slot = find_slot(c, row.sector);
        int32_t e = (int32_t)c->slots[slot].entry;
        if (e >= 0) {
            unlink_entry(c, e);
            push_front(c, e);
            Entry& x = c->entries[e];
            if (row.read && !x.full && (x.mask & row.mask) != row.mask) {
                dram_read[owner] += 32;
                x.full = 1;
            } else {
                hits++;
            }
        } else {
            if (c->free_head < 0) {  // evict the least recently used sector
                const int32_t victim = c->tail;
                unlink_entry(c, victim);
                Entry& v = c->entries[victim];
                if (v.dirty) dram_write[v.owner] += 32;
                erase_slot(c, v.sector);
                v.next = c->free_head;
                c->free_head = victim;
                slot = find_slot(c, row.sector);
            }
            e = c->free_head;
            Entry& x = c->entries[e];
            c->free_head = x.next;
            x.sector = row.sector;
            x.mask = 0;
            x.dirty = 0;
            x.full = 0;
            c->slots[slot].sector = row.sector;
            c->slots[slot].entry = e;
            push_front(c, e);
            if (row.read) {
                dram_read[owner] += 32;
                x.full = 1;
            }
        }
        Entry& x = c->entries[e];
        if (row.write) {
            if (!x.dirty) x.owner = owner;
            x.dirty = 1;
            x.mask |= row.mask;
        }
    }
    return hits;
}

// The end of a variant's call: every dirty sector is written back.
EXPORT void l2_flush(L2* c, int64_t* dram_write) {
    for (int32_t e = c->head; e >= 0; e = c->entries[e].next)
        if (c->entries[e].dirty) {
            dram_write[c->entries[e].owner] += 32;
            c->entries[e].dirty = 0;
        }
}

}  // extern "C"
