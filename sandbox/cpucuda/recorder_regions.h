// recorder_regions.h: which of a launch's regions (its arrays, its shared memory) an address lies in, for the
// recorders of the instrumented modes (traffic_recorder.cpp, race_checker.cpp).
//
// Most accesses hit the region of the access before; most others are to a fiber's stack or the runtime's
// state, in no region at all, and would scan every region each time: a direct-mapped cache of 4 KiB pages
// that lie wholly inside one region, or outside all of them, answers those without a scan.
#pragma once

#include <stdint.h>
#include <string.h>

#include <vector>

// R: a region type with uint64_t lo, hi (real addresses [lo, hi)). Call changed() after adding or resizing one.
template <class R>
struct RegionIndex : std::vector<R> {
    RegionIndex() { changed(); }

    void changed() {
        last_ = 0;
        memset(pages_, 0xff, sizeof pages_);
    }

    // The index of the first region holding `a`, or -1.
    int find(uint64_t a) {
        const std::vector<R>& v = *this;
        if (last_ < v.size() && a - v[last_].lo < v[last_].hi - v[last_].lo) return (int)last_;
        const uint64_t page = a >> 12;
        Slot& slot = pages_[page & (kSlots - 1)];
        if (slot.page == page) return remember(slot.region);
        int found = -1;
        for (size_t i = 0; i < v.size() && found < 0; ++i)
            if (a - v[i].lo < v[i].hi - v[i].lo) found = (int)i;
        const uint64_t lo = page << 12, hi = lo + 4096;
        bool whole = true;  // the page lies in region `found` alone (or, when -1, in none)
        for (size_t i = 0; i < v.size() && whole; ++i)
            if (v[i].lo < hi && lo < v[i].hi) whole = (int)i == found && v[i].lo <= lo && hi <= v[i].hi;
        if (whole) slot = Slot{page, found};
        return remember(found);
    }

  private:
    static const size_t kSlots = 1024;
    struct Slot { uint64_t page; int64_t region; };
    int remember(int64_t region) {
        if (region >= 0) last_ = (size_t)region;
        return (int)region;
    }
    size_t last_;
    Slot pages_[kSlots];
};
