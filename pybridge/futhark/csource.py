"""Fixes to the C that ``futhark <backend> --library`` generates, so that ordinary calls cannot
kill the process (measured with Futhark 0.25.32, c and multicore backends):

- ``host_alloc`` ignores a NULL from ``malloc``: an allocation too large for the machine
  (``replicate (1<<36) 0u8``) then writes through NULL and segfaults. The fix records an error,
  which the generated ``memblock_alloc`` already turns into ``FUTHARK_OUT_OF_MEMORY`` (code 3).
- ``memblock_alloc`` calls ``futhark_panic`` (``exit(1)``) on a negative size, e.g.
  ``replicate n 0`` with ``n < 0``. The fix records the same message as an error and returns
  ``FUTHARK_PROGRAM_ERROR``; callers already propagate a failed allocation.

- multicore: ``scheduler_destroy`` (in ``futhark_context_free``) waits for the main worker's queue
  to drain after every worker thread has been joined. Futhark 0.25.32 can leave a subtask there
  (after a nested map over an empty outer dimension, and at times after other calls), which no
  thread will ever run, so closing the context hung forever. The fix drops what is left in that
  queue once the workers are joined (nothing can run it any more; the subtasks' memory leaks).
- Signed division of the lowest value by -1 (``i32.lowest / -1``, also ``%``, ``//``, ``%%``, and
  i64) traps on x86 (SIGFPE kills the process). Futhark's own interpreter wraps (``i32.lowest / -1
  == i32.lowest``, remainders 0), as every other overflow does; the fix gives the C host code that
  answer, in a form that costs nothing measurable in index arithmetic (``_division_fixes``). 8- and 16-bit operands are promoted to int by C and never trapped. GPU kernels (NVRTC
  strings) are left alone: the GPU does not trap.
- Byte counts wrap: ``int64_t bytes_7 = (int64_t) 8 * n;`` with ``n = 2**61`` is 0, so ``iota n``
  allocated 0 bytes and wrote 2^61 elements (SIGSEGV); ``replicate n (replicate 4 x)`` with
  ``n = -(2**62)`` allocated 0 bytes and returned an array of shape ``(-2**62, 4)``. The fix makes
  every product that forms an allocation size (the definitions of ``bytes_*``, ``binop_x_*``,
  ``binop_y_*``, ``total_sizze_*`` and the size argument of ``memblock_alloc``,
  ``memblock_alloc_device`` and ``lexical_realloc``, and the definition of a variable passed
  there, when they are products of variables and constants) a checked one: a negative factor gives ``INT64_MIN``, an overflow ``INT64_MAX``; the
  allocation functions turn those into ``FUTHARK_PROGRAM_ERROR`` ("a dimension is negative") and
  ``FUTHARK_OUT_OF_MEMORY`` ("... cannot exist"): ``memblock_alloc*`` before allocating,
  ``lexical_realloc`` when ``realloc`` refused the size (it refuses every one of them: 2^63 - 1
  bytes and more), both through one out-of-line function. Other arithmetic keeps
  Futhark's wrapping semantics.
- multicore: a failed parallel task sets the scheduler's ``error`` flag, which only
  ``scheduler_init`` clears: every later parallel task of that context then drops its subtasks
  and returns the stale code 2 (no message). The fix clears the flag when an API function takes
  the context lock (the calls are serialised by it, and every task of the previous call has been
  joined).
- cuda: ``memblock_alloc_device`` ignores what ``gpu_alloc`` returns and tests ``ctx->error``,
  which a refused ``cuMemAlloc`` (``CUDA_ERROR_OUT_OF_MEMORY``) does not set: the block was taken
  as allocated with a stale pointer (``iota (2**58)`` returned a handle), and freeing it put that
  pointer on the free list, so every later call of the context failed. The fix records an error
  when ``gpu_alloc`` fails, which the function already turns into ``FUTHARK_OUT_OF_MEMORY``.
- cuda: ``futhark_context_sync`` pushes its context and, when a kernel reported a failure (a
  bounds check), returns the error without popping it: the Futhark context stays on the thread's
  context stack, and after that context is freed the thread's CUDA calls run in a destroyed
  context (another Futhark context's free then aborted the process). The fix pops it first.
- ``futhark_context_clear_caches`` keeps the host memory blocks of 1 MiB and more that freed values
  leave in the context's free list (``host_free``): c and multicore release nothing (only the peak
  usage counter is reset), cuda only its device list. Blocks are reused only when a request fits
  (the same allocation site, or within a factor of 2), so calls of varying sizes keep adding blocks
  until ``futhark_context_free``: 33.5 MB after 600 calls of 1-6 MB arrays, 90 MB after 6,000
  (RELIABILITY.md, "Memory after many calls"). The fix frees that list too, as the C API documents the function
  ("release context-internal caches and buffers"); the list is used under the context lock.
- cuda: three accessors are appended (``pybridge_cuda_stream``, ``pybridge_cuda_context``,
  ``pybridge_cuda_may_fail``), so that exchanges with CuPy / PyTorch / numba can order on the device
  with CUDA events instead of syncing the host (pybridge/futhark/gpustream.py). Not a fix: the C
  API has no way to get a context's stream.

Applied by ``pybridge build`` / ``pybridge.futhark.load("prog.fut")`` and by ``make`` (this file
runs as a script: ``python3 pybridge/futhark/csource.py prog.c``). Standard library only. Each fix
is applied only where the generated text has the expected form; the text is unchanged otherwise.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MARK = "/* pybridge: hardened v10 */"  # part of pybridge build's cache key: a new fix rebuilds

_MALLOC = "    *mem_out = malloc(size);\n"
_MALLOC_CHECKED = (
    "    *mem_out = malloc(size);\n"
    "    if (*mem_out == NULL && size != 0)\n"
    '      set_error(ctx, msgprintf("Host allocation of %lld bytes failed (malloc returned NULL).\\n", (long long) size));\n'
)
_NEGATIVE = re.compile(r'futhark_panic\(1, ("Negative allocation of %lld bytes attempted for %s in %s\.\\n", \(long long\) size, desc, [^;]*)\);')

_OWN_QUEUE = "  // And then destroy our own queue.\n  subtask_queue_destroy(&scheduler->workers[0].q);\n"
_OWN_QUEUE_DRAINED = (
    "  // And then destroy our own queue.\n"
    "  scheduler->workers[0].q.num_used = 0; /* pybridge: workers joined, a leftover subtask would wait forever */\n"
    "  subtask_queue_destroy(&scheduler->workers[0].q);\n"
)


_OLD_MARK = re.compile(r"\A/\* pybridge: hardened v\d+ \*/\n")


# ---- checked allocation sizes
_SZMUL = (
    "/* pybridge: checked products for allocation sizes: INT64_MIN if a factor is negative,\n"
    "   INT64_MAX if the product overflows (see pybridge/futhark/csource.py) */\n"
    "static __attribute__((noinline)) int64_t pb_szmul(int64_t a, int64_t b) {\n"
    "  int64_t r;\n"
    "  if ((a | b) < 0) return INT64_MIN;\n"
    "  if (__builtin_mul_overflow(a, b, &r)) return INT64_MAX;\n"
    "  return r;\n"
    "}\n"
)
# Out of line, and no division: the sizes are computed outside loops, once per allocation, but the
# inlined checks changed the register allocation of the entry functions' loops (kmeans +2.6%,
# averaged over code layouts as described in _division_fixes), and the division that tested for
# overflow cost small calls with many allocations (sort of 1000 keys) a few percent.
_SZMUL_V6 = (
    _SZMUL[: _SZMUL.index("static ")]
    + "static inline int64_t pb_szmul(int64_t a, int64_t b) {\n"
    "  if (a < 0 || b < 0) return INT64_MIN;\n"
    "  if (a != 0 && b > INT64_MAX / a) return INT64_MAX;\n"
    "  return a * b;\n"
    "}\n"
)
_STDINT = "#include <stdint.h>\n"

# ---- cuda: what exchanges need to order on the device instead of syncing the host
# (pybridge/futhark/gpustream.py): the context's stream and CUDA context, and whether work it has
# enqueued may still fail (a kernel with a bounds check: that error must be raised, not its data
# handed on). Exported whatever visibility the library is compiled with.
_CUDA_CONTEXT_FIELDS = ("  CUcontext cu_ctx;\n", "  CUstream stream;\n", "  int32_t failure_is_an_option;\n")
_CUDA_ACCESSORS = (
    "\n/* pybridge: cuda-stream-accessors (see pybridge/futhark/gpustream.py) */\n"
    "__attribute__((visibility(\"default\"))) void *pybridge_cuda_stream(struct futhark_context *ctx) { return (void *) ctx->stream; }\n"
    "__attribute__((visibility(\"default\"))) void *pybridge_cuda_context(struct futhark_context *ctx) { return (void *) ctx->cu_ctx; }\n"
    "__attribute__((visibility(\"default\"))) int pybridge_cuda_may_fail(struct futhark_context *ctx) { return ctx->failure_is_an_option != 0; }\n"
)

# ---- cuda: futhark_context_sync pushes the context and returns a kernel's failure without popping
# it: the thread's context stack keeps the Futhark context, and once that context is freed every
# later CUDA call of the thread (another Futhark context's free: abort) runs in a destroyed context.
_SYNC_FAILURE = "      ctx->error = get_failure_msg(failure_idx, args);\n\n      return FUTHARK_PROGRAM_ERROR;\n"
_SYNC_FAILURE_POPPED = (
    "      ctx->error = get_failure_msg(failure_idx, args);\n"
    "      cuCtxPopCurrent(&ctx->cu_ctx); /* pybridge: sync-pops-context */\n"
    "      return FUTHARK_PROGRAM_ERROR;\n"
)

# ---- a failed device allocation
# memblock_alloc_device ignores gpu_alloc's result and tests ctx->error instead, but cuMemAlloc's
# CUDA_ERROR_OUT_OF_MEMORY comes back as FUTHARK_OUT_OF_MEMORY with no error set: the block was
# then taken as allocated, with whatever pointer it held (a 2^60-byte array "succeeded"; freed, the
# garbage pointer went to the free list and broke every later call of the context).
_GPU_ALLOC_IGNORED = "    (void) gpu_alloc(ctx, ctx->log, (size_t) size, desc, &block->mem, (size_t *) &size);\n"
_GPU_ALLOC_CHECKED = (
    "    if (gpu_alloc(ctx, ctx->log, (size_t) size, desc, &block->mem, (size_t *) &size) != FUTHARK_SUCCESS && ctx->error == NULL)\n"
    "      set_error(ctx, msgprintf(\"The device could not allocate %lld bytes for %s.\\n\", (long long) size, desc)); /* pybridge: gpu-alloc-error */\n"
)
# memblock_alloc, memblock_alloc_device (and other spaces): refuse the two sentinels first.
_ALLOC_HEAD = re.compile(
    r"(?m)^(int memblock_alloc\w*\(struct futhark_context \*ctx, struct memblock\w* \*block, int64_t size, const char \*desc\)\n\{\n)"
)
# The two checks live out of line (one unlikely branch at each allocation): inlined, their
# set_error/msgprintf calls in lexical_realloc (which is inlined into every entry function) cost a
# sort of 1000 keys 3% (see _division_fixes for how this was measured).
_SIZE_ERROR = (  # the messages say "Negative allocation" / "Failed to allocate": errors.error_for's classes
    "/* pybridge: the sizes pb_szmul marks: INT64_MIN (a negative dimension), INT64_MAX (too large) */\n"
    "static __attribute__((noinline, cold)) int pybridge_size_error(struct futhark_context *ctx, int64_t size, const char *desc) {\n"
    "  if (size == INT64_MAX) {\n"
    "    set_error(ctx, desc ? msgprintf(\"Failed to allocate memory for %s: its size in bytes does not fit in 64 bits (no such array can exist).\\n\", desc)\n"
    "                        : msgprintf(\"Failed to allocate memory: its size in bytes does not fit in 64 bits (no such array can exist).\\n\"));\n"
    "    return FUTHARK_OUT_OF_MEMORY;\n"
    "  }\n"
    "  set_error(ctx, desc ? msgprintf(\"Negative allocation for %s: an array dimension is negative.\\n\", desc)\n"
    "                      : msgprintf(\"Negative allocation: an array dimension is negative.\\n\"));\n"
    "  return FUTHARK_PROGRAM_ERROR;\n"
    "}\n"
)
_ALLOC_GUARD = (
    "    if (__builtin_expect(size == INT64_MIN || size == INT64_MAX, 0)) return pybridge_size_error(ctx, size, desc); /* pybridge: size-overflow */\n"
)
_REALLOC_HEAD = re.compile(r"(?m)^(static int lexical_realloc\(struct futhark_context \*ctx,\n[^{]*\{\n)")
_REALLOC_GUARD = (
    "  if (__builtin_expect(new_size < 0 || new_size == INT64_MAX, 0)) return pybridge_size_error(ctx, new_size < 0 ? INT64_MIN : new_size, NULL); /* pybridge: size-overflow */\n"
)
# lexical_realloc is inlined into every entry function: there the check goes where realloc failed,
# which it does for every such size (2^63 - 1 bytes and more: no address space has them), and out
# of line, so the inlined code is what Futhark wrote (a check at its head made GCC inline the
# function's error path too, and cost kmeans 3%).
_REALLOC_FAILED = re.compile(
    r"(?m)^(static int lexical_realloc\(struct futhark_context \*ctx,\n[^{]*\{\n"
    r"  unsigned char \*new = realloc\(\*ptr, \(size_t\)new_size\);\n  if \(new == NULL\) \{\n)"
    r"    lexical_realloc_error\(ctx, new_size\);\n    return FUTHARK_OUT_OF_MEMORY;\n"
)
_REALLOC_FAILED_GUARD = "    return pybridge_realloc_failed(ctx, new_size); /* pybridge: size-overflow */\n"
_REALLOC_FAILED_FN = (
    "static __attribute__((noinline, cold)) int pybridge_realloc_failed(struct futhark_context *ctx, int64_t new_size) {\n"
    "  if (new_size < 0 || new_size == INT64_MAX) return pybridge_size_error(ctx, new_size < 0 ? INT64_MIN : new_size, NULL);\n"
    "  lexical_realloc_error(ctx, new_size);\n"
    "  return FUTHARK_OUT_OF_MEMORY;\n"
    "}\n\n"
)
# pybridge <= v6 wrote the checks inline: upgraded to the form above (and still written so where the
# generated C is laid out otherwise than _size_error_at expects).
_ALLOC_GUARD_V6 = (
    "    if (size == INT64_MIN) { set_error(ctx, msgprintf(\"Negative allocation for %s: an array dimension is negative.\\n\", desc)); return FUTHARK_PROGRAM_ERROR; } /* pybridge: size-overflow */\n"
    "    if (size == INT64_MAX) { set_error(ctx, msgprintf(\"Failed to allocate memory for %s: its size in bytes does not fit in 64 bits (no such array can exist).\\n\", desc)); return FUTHARK_OUT_OF_MEMORY; }\n"
)
_REALLOC_GUARD_V6 = (
    "  if (new_size < 0) { set_error(ctx, msgprintf(\"Negative allocation: an array dimension is negative.\\n\")); return FUTHARK_PROGRAM_ERROR; } /* pybridge: size-overflow */\n"
    "  if (new_size == INT64_MAX) { set_error(ctx, msgprintf(\"Failed to allocate memory: its size in bytes does not fit in 64 bits (no such array can exist).\\n\")); return FUTHARK_OUT_OF_MEMORY; }\n"
)
_CONTEXT_STRUCT = "\nstruct futhark_context {\n"
_SIZE_DEF = re.compile(r"(?m)^(\s*int64_t (?:bytes|binop_x|binop_y|total_sizze)_\d+ = )([^;\n]*\*[^;\n]*);$")
_SIZE_ARG = re.compile(
    r"(?m)^(\s*(?:if \(|err = )?(?:memblock_alloc\w*\(ctx, &[\w>-]+, |lexical_realloc\(ctx, &\w+, &\w+, ))([^,;\n]*\*[^,;\n]*)(, \"|\);)"
)
_BARE_ARG = re.compile(r"(?:memblock_alloc\w*\(ctx, &[\w>-]+, |lexical_realloc\(ctx, &\w+, &\w+, )([A-Za-z_]\w*)(?:, \"|\);)")
_ATOM = re.compile(r"\s*(\(int64_t\) \d+|\d+|[A-Za-z_]\w*)\s*")


def _checked_product(expr: str) -> str | None:
    """``a * (b * 8)`` -> ``pb_szmul(a, pb_szmul(b, 8))``; None unless ``expr`` is a product of
    variables and integer constants (parenthesised products included)."""
    pos = 0

    def product() -> str | None:
        nonlocal pos
        terms = []
        while True:
            t = term()
            if t is None:
                return None
            terms.append(t)
            if pos < len(expr) and expr[pos] == "*":
                pos += 1
                continue
            break
        out = terms[0]
        for t in terms[1:]:
            out = f"pb_szmul({out}, {t})"
        return out

    def term() -> str | None:
        nonlocal pos
        while pos < len(expr) and expr[pos] == " ":
            pos += 1
        if expr.startswith("(int64_t) ", pos) or pos >= len(expr) or expr[pos] != "(":
            m = _ATOM.match(expr, pos)
            if m is None:
                return None
            pos = m.end()
            return m.group(1)
        pos += 1
        inner = product()
        while pos < len(expr) and expr[pos] == " ":
            pos += 1
        if inner is None or pos >= len(expr) or expr[pos] != ")":
            return None
        pos += 1
        while pos < len(expr) and expr[pos] == " ":
            pos += 1
        return inner

    out = product()
    return out if out is not None and pos == len(expr) and "*" in expr else None


def _checked_sizes(text: str) -> tuple[str, int]:
    """Every allocation size that is a product, computed with pb_szmul; the number rewritten."""
    count = 0

    def rewrite(m: re.Match[str], group: int) -> str:
        nonlocal count
        checked = _checked_product(m.group(group))
        if checked is None:
            return m.group(0)
        count += 1
        return m.group(0)[: m.start(group) - m.start(0)] + checked + m.group(0)[m.end(group) - m.start(0) :]

    text = _SIZE_DEF.sub(lambda m: rewrite(m, 2), text)
    text = _SIZE_ARG.sub(lambda m: rewrite(m, 2), text)
    # A size passed as a bare variable whose definition is a product (cuda: `nest_sizze_7 = n * m`
    # for a bool array): that definition is checked too. Where the product did not wrap and no
    # factor is negative, its value is unchanged, so its other uses (grid sizes) are unchanged.
    for name in sorted(set(_BARE_ARG.findall(text))):
        text = re.sub(rf"(?m)^(\s*int64_t {name} = )([^;\n]*\*[^;\n]*);$", lambda m: rewrite(m, 2), text)
    return text, count


def _division_fixes() -> list[tuple[str, str]]:
    """(generated text, guarded text) for the signed division functions that can trap.

    Only ``lowest / -1`` traps. Every function divides by ``d = y == -1 ? 1 : y`` (the same
    expression in all of them, so ``x / y`` and ``x % y`` of one pair of operands stay one ``idiv``
    after inlining, as in the unguarded code), and the quotients take ``-x`` (wrapping) when
    ``y == -1``: two selects, no branch; where ``y`` is loop-invariant the test is hoisted, where
    the compiler knows ``y != -1`` (a constant, a size) it folds away.

    Measured in issue 23 (2-core dev machine, Futhark's own executable with its -r/-t timer, each
    variant linked at 8 code offsets, 0-112 bytes, because code layout alone moved these programs by
    up to +-10%; ratios to the unguarded code, mean over the offsets): the stencil of
    benchmarks/programs (i / w, i % w) 0.969 (the v6 form, a divisor select in the remainders only,
    left two idivs per element: 1.024), a histogram 0.999 (1.000), division-bound loops of random
    operands 1.004 / 1.028 / 1.009 (v6: 1.017 / 1.033 / 1.046); a branch on the operands instead
    (``if (x == lowest && y == -1)``) cost the histogram 7.5%."""
    pairs = []
    for bits in (32, 64):
        t, u = f"int{bits}_t", f"uint{bits}_t"
        head = f"SCALAR_FUN_ATTR {t} %s{bits}({t} x, {t} y) {{\n"
        neg = f"({t}) (0 - ({u}) x)"  # -x, wrapping: lowest / -1 == lowest
        note = " /* pybridge: no SIGFPE on lowest / -1 */"
        pairs += [
            (head % "sdiv" + f"  {t} q = x / y;\n  {t} r = x % y;\n",
             head % "sdiv" + f"  {t} d = y == -1 ? 1 : y;{note}\n  {t} q = y == -1 ? {neg} : x / d;\n  {t} r = x % d;\n"),
            (head % "smod" + f"  {t} r = x % y;\n",
             head % "smod" + f"  {t} r = x % (y == -1 ? 1 : y); /* pybridge: no SIGFPE on lowest % -1 */\n"),
        ]
        one_line = f"SCALAR_FUN_ATTR {t} %s{bits}({t} x, {t} y) {{ return %s; }}"
        pairs += [
            (one_line % ("squot", "x / y"), one_line % ("squot", f"y == -1 ? {neg} : x / (y == -1 ? 1 : y)")),
            (one_line % ("srem", "x % y"), one_line % ("srem", "x % (y == -1 ? 1 : y)")),
            (one_line % ("squot_safe", "y == 0 ? 0 : x / y"), one_line % ("squot_safe", f"y == 0 ? 0 : squot{bits}(x, y)")),
            (one_line % ("srem_safe", "y == 0 ? 0 : x % y"), one_line % ("srem_safe", f"y == 0 ? 0 : srem{bits}(x, y)")),
        ]
    return pairs


def _division_upgrades() -> list[tuple[str, str]]:
    """(v6 text, current text): C hardened by pybridge <= v6 (carried generated C, ``make`` with
    FUTHARK=/bin/true) gets the current form of the two functions that changed."""
    out = []
    for bits in (32, 64):
        t = f"int{bits}_t"
        head = f"SCALAR_FUN_ATTR {t} %s{bits}({t} x, {t} y) {{\n"
        guard = (f"  if (__builtin_expect(x == INT{bits}_MIN && y == -1, 0)) return pybridge_lowest_div{bits}(x);"
                 " /* pybridge: no SIGFPE on lowest / -1 */\n")
        for name, plain in (("sdiv", f"  {t} q = x / y;\n  {t} r = x % y;\n"), ("squot", "  return x / y;\n}")):
            generated = head % name + plain if name == "sdiv" else f"SCALAR_FUN_ATTR {t} squot{bits}({t} x, {t} y) {{ return x / y; }}"
            current = dict(_DIVISION)[generated]
            v6 = head % name + guard + plain
            out.append((v6, current))
    return out


def _v6_helper(bits: int) -> str:
    """The out-of-line helper of the v6 quotient guards (removed once nothing calls it)."""
    return (f"/* pybridge: i{bits}.lowest / -1 wraps to i{bits}.lowest (and its remainder is 0), as in Futhark's interpreter */\n"
            f"static __attribute__((noinline, cold)) int{bits}_t pybridge_lowest_div{bits}(int{bits}_t x) {{ return x; }}\n")


_DIVISION = _division_fixes()
_DIVISION_V6 = _division_upgrades()

# multicore: every API function takes the context lock and then names worker 0; the scheduler's
# error flag of an earlier failed call is cleared there (only scheduler_init cleared it).
_LOCKED = re.compile(r"(?m)^( +)lock_lock\(&ctx->lock\);\n\1worker_local = &ctx->scheduler\.workers\[0\];\n")
_LOCKED_RESET = r"\g<0>\1ctx->scheduler.error = 0; /* pybridge: a failed call's error flag is not sticky */\n"

# futhark_context_clear_caches: the host free list freed too, before the context lock is released
# (free_all_in_free_list is defined further down: declared first).
_CLEAR_CACHES_END = re.compile(
    r"(?ms)^(int futhark_context_clear_caches\(struct futhark_context \*ctx\)\n\{\n(?:(?!^\}).)*?)"
    r"(^ +lock_unlock\(&ctx->lock\);\n +return ctx->error != NULL;\n\}\n)"
)
_CLEAR_CACHES_FREES = (
    "static void free_all_in_free_list(struct futhark_context* ctx); /* pybridge: clear-caches-frees-host-blocks */\n"
    r"\1    free_all_in_free_list(ctx); /* pybridge: clear-caches-frees-host-blocks */\n\2"
)


def _size_error_at(text: str) -> int:
    """Where pybridge_size_error goes: before the first function that calls it, which must come
    after the context's struct and set_error's declaration (as in the C of Futhark 0.25); -1 if
    this C is laid out otherwise."""
    m = _ALLOC_HEAD.search(text)
    starts = [i for i in (m.start() if m else -1, text.find("static int lexical_realloc("),
                          text.find("static __attribute__((noinline, cold)) int pybridge_realloc_failed(")) if i >= 0]
    if not starts:
        return -1
    at = min(starts)
    before = text[:at]
    ok = _CONTEXT_STRUCT in before and "static void set_error(struct futhark_context* ctx, char *error);" in before
    return at if ok else -1


def _with_size_error(text: str) -> str:
    """``text`` with pybridge_size_error defined before its first caller (see _size_error_at)."""
    if "int pybridge_size_error(" in text:
        return text
    at = _size_error_at(text)
    return text[:at] + _SIZE_ERROR + text[at:]


def harden(text: str) -> tuple[str, list[str]]:
    """The patched text and the names of the fixes applied."""
    applied = []  # each fix is idempotent: a file patched by an older pybridge gets only what is new
    head = text.find("static void host_alloc(struct futhark_context* ctx,\n")
    if head >= 0 and text.find(_MALLOC, head) >= 0 and _MALLOC_CHECKED not in text and "static void set_error(" in text:
        at = text.find(_MALLOC, head)
        text = text[:at] + _MALLOC_CHECKED + text[at + len(_MALLOC) :]
        applied.append("malloc-null")
    if _OWN_QUEUE in text:
        text = text.replace(_OWN_QUEUE, _OWN_QUEUE_DRAINED)
        applied.append("multicore-free-hang")
    text, n = _NEGATIVE.subn(r"{ set_error(ctx, msgprintf(\1)); return FUTHARK_PROGRAM_ERROR; }", text)
    if n:
        applied.append("negative-allocation")
    if "pb_szmul(" not in text and _STDINT in text and _ALLOC_HEAD.search(text):
        text, n = _checked_sizes(text)
        if _size_error_at(text) >= 0:  # the checks out of line
            text = _ALLOC_HEAD.sub(lambda m: m.group(1) + _ALLOC_GUARD, text)
            text, n_failed = _REALLOC_FAILED.subn(lambda m: _REALLOC_FAILED_FN + m.group(1) + _REALLOC_FAILED_GUARD, text)
            if not n_failed:  # another form of lexical_realloc: checked at its head
                text = _REALLOC_HEAD.sub(lambda m: m.group(1) + _REALLOC_GUARD, text)
            text = _with_size_error(text)
        else:  # C laid out otherwise: the same checks inline, as pybridge <= v6 wrote them
            text = _ALLOC_HEAD.sub(lambda m: m.group(1) + _ALLOC_GUARD_V6, text)
            text = _REALLOC_HEAD.sub(lambda m: m.group(1) + _REALLOC_GUARD_V6, text)
        at = text.find(_STDINT) + len(_STDINT)
        text = text[:at] + _SZMUL + text[at:]
        applied.append(f"size-overflow ({n} sizes)")
    if _SYNC_FAILURE in text and "int futhark_context_sync(struct futhark_context* ctx) {\n  CUDA_SUCCEED_OR_RETURN(cuCtxPushCurrent" in text:
        text = text.replace(_SYNC_FAILURE, _SYNC_FAILURE_POPPED)
        applied.append("sync-pops-context")
    if _GPU_ALLOC_IGNORED in text:
        text = text.replace(_GPU_ALLOC_IGNORED, _GPU_ALLOC_CHECKED)
        applied.append("gpu-alloc-error")
    if "pybridge_cuda_stream(" not in text and all(f in text for f in _CUDA_CONTEXT_FIELDS) and "struct futhark_context {\n" in text:
        text = text.rstrip("\n ") + "\n" + _CUDA_ACCESSORS
        applied.append("cuda-stream-accessors")
    if "ctx->scheduler.error = 0; /* pybridge" not in text:
        text, n = _LOCKED.subn(_LOCKED_RESET, text)
        if n:
            applied.append("multicore-error-reset")
    if "/* pybridge: clear-caches-frees-host-blocks */" not in text and "static void free_all_in_free_list(struct futhark_context* ctx) {\n" in text:
        text, n = _CLEAR_CACHES_END.subn(_CLEAR_CACHES_FREES, text, count=1)
        if n:
            applied.append("clear-caches-frees-host-blocks")
    patched = 0
    for generated, guarded in _DIVISION:
        # At the start of a line only: the GPU program is embedded as string literals, left alone.
        text, n = re.subn("(?m)^" + re.escape(generated), lambda _match, g=guarded: g, text)
        patched += n
    if patched:
        applied.append("division-overflow")
    upgraded = 0
    for v6, current in _DIVISION_V6:  # C hardened by an older pybridge: the current, cheaper form
        if v6 in text:
            text = text.replace(v6, current)
            upgraded += 1
    for bits in (32, 64):
        helper = _v6_helper(bits)
        if helper in text and text.count(f"pybridge_lowest_div{bits}(") == 1:  # its definition only
            text = text.replace(helper, "")
    if _SZMUL_V6 in text:
        text = text.replace(_SZMUL_V6, _SZMUL)
        upgraded += 1
    if (_ALLOC_GUARD_V6 in text or _REALLOC_GUARD_V6 in text) and _size_error_at(text) >= 0:
        text = text.replace(_ALLOC_GUARD_V6, _ALLOC_GUARD)
        if _REALLOC_GUARD_V6 in text:
            moved, n_failed = _REALLOC_FAILED.subn(lambda m: _REALLOC_FAILED_FN + m.group(1) + _REALLOC_FAILED_GUARD,
                                                   text.replace(_REALLOC_GUARD_V6, ""))
            text = moved if n_failed else text.replace(_REALLOC_GUARD_V6, _REALLOC_GUARD)
        text = _with_size_error(text)
        upgraded += 1
    if upgraded:
        applied.append("upgraded to the current forms")
    if applied and MARK not in text:
        text = MARK + "\n" + _OLD_MARK.sub("", text, count=1)
    return text, applied


def harden_file(path: str | Path) -> list[str]:
    p = Path(path)
    text, applied = harden(p.read_text())
    if applied:
        p.write_text(text)
    return applied


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        fixes = harden_file(arg)
        print(f"csource: {arg}: {', '.join(fixes) if fixes else 'nothing to patch (already done, or another Futhark version)'}")
