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

struct L2 {
    int64_t capacity, used;
    // entries: a doubly linked LRU list through prev/next (head = most recent), -1 terminated
    uint64_t* sector;
    int64_t *prev, *next, *owner;
    uint32_t* mask;      // bytes written while resident (valid without a DRAM read)
    uint8_t *full, *dirty;
    int64_t head, tail, free_head;
    // open addressing, linear probing: slot -> entry index or -1
    int64_t* slots;
    uint64_t slot_mask;
};

static uint64_t hash64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

EXPORT L2* l2_new(int64_t capacity) {
    L2* c = (L2*)calloc(1, sizeof(L2));
    c->capacity = capacity;
    c->sector = (uint64_t*)malloc(capacity * sizeof(uint64_t));
    c->prev = (int64_t*)malloc(capacity * sizeof(int64_t));
    c->next = (int64_t*)malloc(capacity * sizeof(int64_t));
    c->owner = (int64_t*)malloc(capacity * sizeof(int64_t));
    c->mask = (uint32_t*)malloc(capacity * sizeof(uint32_t));
    c->full = (uint8_t*)malloc(capacity);
    c->dirty = (uint8_t*)malloc(capacity);
    uint64_t nslots = 1;
    while (nslots < (uint64_t)capacity * 2) nslots <<= 1;
    c->slots = (int64_t*)malloc(nslots * sizeof(int64_t));
    memset(c->slots, 0xff, nslots * sizeof(int64_t));
    c->slot_mask = nslots - 1;
    c->head = c->tail = -1;
    for (int64_t i = 0; i < capacity; ++i) c->next[i] = i + 1 < capacity ? i + 1 : -1;
    c->free_head = capacity ? 0 : -1;
    return c;
}

EXPORT void l2_free(L2* c) {
    free(c->sector); free(c->prev); free(c->next); free(c->owner); free(c->mask); free(c->full);
    free(c->dirty); free(c->slots); free(c);
}

static int64_t* find_slot(L2* c, uint64_t sector) {
    uint64_t i = hash64(sector) & c->slot_mask;
    while (c->slots[i] >= 0 && c->sector[c->slots[i]] != sector) i = (i + 1) & c->slot_mask;
    return &c->slots[i];
}

// Backward-shift deletion keeps every probe chain unbroken: an entry after the hole moves into it
// unless its home slot lies cyclically in (hole, its slot].
static void erase_slot(L2* c, uint64_t sector) {
    uint64_t i = find_slot(c, sector) - c->slots, j = i;
    for (;;) {
        j = (j + 1) & c->slot_mask;
        if (c->slots[j] < 0) break;
        const uint64_t home = hash64(c->sector[c->slots[j]]) & c->slot_mask;
        const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            c->slots[i] = c->slots[j];
            i = j;
        }
    }
    c->slots[i] = -1;
}

static void unlink_entry(L2* c, int64_t e) {
    if (c->prev[e] >= 0) c->next[c->prev[e]] = c->next[e]; else c->head = c->next[e];
    if (c->next[e] >= 0) c->prev[c->next[e]] = c->prev[e]; else c->tail = c->prev[e];
}

static void push_front(L2* c, int64_t e) {
    c->prev[e] = -1;
    c->next[e] = c->head;
    if (c->head >= 0) c->prev[c->head] = e;
    c->head = e;
    if (c->tail < 0) c->tail = e;
}

// Feed `n` rows whose blocks are numbered from `owner_base` in the call's owner arrays; DRAM bytes are
// added to dram_read / dram_write (indexed by owner). Returns the number of L2 hits.
EXPORT int64_t l2_feed(L2* c, const Row* rows, int64_t n, int64_t owner_base, int64_t* dram_read, int64_t* dram_write) {
    int64_t hits = 0;
    for (int64_t r = 0; r < n; ++r) {
        const Row& row = rows[r];
        const int64_t owner = owner_base + row.block;
        int64_t* slot = find_slot(c, row.sector);
        int64_t e = *slot;
        if (e >= 0) {
            unlink_entry(c, e);
            push_front(c, e);
            if (row.read && !c->full[e] && (c->mask[e] & row.mask) != row.mask) {
                dram_read[owner] += 32;
                c->full[e] = 1;
            } else {
                hits++;
            }
        } else {
            if (c->free_head < 0) {  // evict the least recently used sector
                const int64_t victim = c->tail;
                unlink_entry(c, victim);
                if (c->dirty[victim]) dram_write[c->owner[victim]] += 32;
                erase_slot(c, c->sector[victim]);
                c->next[victim] = c->free_head;
                c->free_head = victim;
                slot = find_slot(c, row.sector);
            }
            e = c->free_head;
            c->free_head = c->next[e];
            c->sector[e] = row.sector;
            c->mask[e] = 0;
            c->dirty[e] = 0;
            c->full[e] = 0;
            *slot = e;
            push_front(c, e);
            if (row.read) {
                dram_read[owner] += 32;
                c->full[e] = 1;
            }
        }
        if (row.write) {
            if (!c->dirty[e]) c->owner[e] = owner;
            c->dirty[e] = 1;
            c->mask[e] |= row.mask;
        }
    }
    return hits;
}

// The end of a variant's call: every dirty sector is written back.
EXPORT void l2_flush(L2* c, int64_t* dram_write) {
    for (int64_t e = c->head; e >= 0; e = c->next[e])
        if (c->dirty[e]) {
            dram_write[c->owner[e]] += 32;
            c->dirty[e] = 0;
        }
}

}  // extern "C"
