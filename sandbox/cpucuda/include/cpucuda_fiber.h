// cpucuda_fiber.h: the context switch under the fibers (one per CUDA thread).
//
// On x86-64 a hand-written switch saves the six callee-saved registers and
// swaps stack pointers (about 10 instructions); ucontext's swapcontext makes a
// signal-mask system call per switch and is ~10x slower. Elsewhere, or with
// -DCPUCUDA_UCONTEXT, ucontext is used. The x87/SSE control words are not
// switched: kernels do not change rounding modes.
#pragma once

#if defined(__x86_64__) && !defined(CPUCUDA_UCONTEXT)
#define CPUCUDA_FIBER_IMPL "x86_64-asm"

// cpucuda_swap(save, to): push callee-saved registers, store rsp in *save,
// load `to` as rsp, pop and return into the other context.
// cpucuda_fiber_start: where a fresh fiber "returns" to; calls r13(r12).
__asm__(
    ".pushsection .text\n"
    ".p2align 4\n"
    ".hidden cpucuda_swap\n"
    ".globl cpucuda_swap\n"
    ".type cpucuda_swap,@function\n"
    "cpucuda_swap:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size cpucuda_swap, .-cpucuda_swap\n"
    ".hidden cpucuda_fiber_start\n"
    ".globl cpucuda_fiber_start\n"
    ".type cpucuda_fiber_start,@function\n"
    "cpucuda_fiber_start:\n"
    "  movq %r12, %rdi\n"
    "  callq *%r13\n"
    "  ud2\n"
    ".size cpucuda_fiber_start, .-cpucuda_fiber_start\n"
    ".popsection\n");

extern "C" void cpucuda_swap(void** save, void* to);
extern "C" void cpucuda_fiber_start(void);

namespace cpucuda {
struct Context { void* sp; };

// Lay out a stack so that the first switch to it pops six zero-ish
// registers and returns into cpucuda_fiber_start with rsp 16-byte aligned.
static inline void context_init(Context* c, char* lo, size_t size, void (*entry)(void*), void* arg) {
    uintptr_t top = ((uintptr_t)(lo + size)) & ~(uintptr_t)15;
    void** sp = (void**)(top - 72);
    sp[0] = 0;                                  // r15
    sp[1] = 0;                                  // r14
    sp[2] = (void*)entry;                       // r13
    sp[3] = arg;                                // r12
    sp[4] = 0;                                  // rbx
    sp[5] = 0;                                  // rbp: ends frame-pointer walks
    sp[6] = (void*)&cpucuda_fiber_start;        // return address
    c->sp = sp;
}
static inline void context_swap(Context* from, Context* to) { cpucuda_swap(&from->sp, to->sp); }
}  // namespace cpucuda

#else
#define CPUCUDA_FIBER_IMPL "ucontext"
#include <ucontext.h>

namespace cpucuda {
struct Context { ucontext_t uc; };
static void (*ucontext_entry)(void*);
static void* ucontext_arg;
static void ucontext_trampoline() { ucontext_entry(ucontext_arg); }

// makecontext passes only ints, so the entry and its argument go through
// statics read at once by the fresh fiber (fibers start one at a time).
static inline void context_init(Context* c, char* lo, size_t size, void (*entry)(void*), void* arg) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = lo;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, ucontext_trampoline, 0);
    ucontext_entry = entry;
    ucontext_arg = arg;
}
static inline void context_swap(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
}  // namespace cpucuda
#endif

// AddressSanitizer must be told about every switch between stacks, else it
// takes the fiber stack for an overflow of the thread stack.
#if defined(__SANITIZE_ADDRESS__)
#define CPUCUDA_ASAN 1
extern "C" {
void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
void __asan_unpoison_memory_region(void const volatile* addr, size_t size);
void __sanitizer_set_death_callback(void (*callback)(void));
}
#else
#define CPUCUDA_ASAN 0
#endif

#if CPUCUDA_TRAFFIC || CPUCUDA_RACE
// Traffic mode (sandbox/cpucuda/traffic.py) and racecheck (racecheck.py): the same instrumentation
// feeds the traffic recorder or the race checker; the runtime stays uninstrumented, so only the
// kernel's own accesses are seen.
#define CPUCUDA_RUNTIME __attribute__((no_sanitize("thread")))
#else
#define CPUCUDA_RUNTIME
#endif
