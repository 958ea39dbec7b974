/* Skip py1e rows' random draws without making their results: an optional speed-up.
 *
 * A node of a multi-node job starts at its own canonical row, so it must bring numpy's PCG64
 * generator to the state it has after the rows before it (streaming/order/shuffles/py1e.py,
 * ``_skip_py1e_row``). Per row that is, in order: every span's Fisher-Yates draws (numpy's
 * ``random_interval``: 32-bit words masked and rejected), then per span one window size
 * (``Generator.integers``: Lemire's method on 32-bit words) and ``length`` uniform shifts (one
 * 64-bit word each, which touch no buffered 32-bit half, so they are skipped in O(log n) with
 * the LCG's jump-ahead). Only the consumption is replayed: no swap, no value kept.
 *
 * This is numpy's PCG64 (XSL-RR output, 128-bit LCG, a buffered upper half for 32-bit draws),
 * written out so the loop runs inline; tests/order/test_py1e_skip.py checks the final state
 * against numpy's own draws. Without a C compiler the package installs without this module and
 * py1e.py makes the draws through numpy instead: the same state, more slowly.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#ifndef __SIZEOF_INT128__
#error "needs a compiler with 128-bit integers (the pure-numpy path is used instead)"
#endif

typedef unsigned __int128 u128;

#define PCG_MULTIPLIER (((u128)2549297995355413924ULL << 64) | 4865540595714422341ULL)

typedef struct {
    u128 state, inc;
    int has_uint32;
    uint32_t uinteger;
} pcg64;


static inline uint64_t output(u128 state);

static inline uint32_t next_uint32(pcg64 *g) {
    if (g->has_uint32) {
        g->has_uint32 = 0;
        return g->uinteger;
    }
    g->state = g->state * PCG_MULTIPLIER + g->inc;
    uint64_t word = output(g->state);
    g->has_uint32 = 1;
    g->uinteger = (uint32_t)(word >> 32);
    return (uint32_t)word;
}

/* Words are made WORDS at a time in four interleaved LCG streams (each jumps four steps), so
 * the 128-bit multiplies overlap instead of waiting on each other. The lanes are plain locals
 * (not an array) so that they stay in registers; a small batch lets the multiplies of the next
 * batch overlap with the (latency-bound) acceptance tests of this one. */
#define WORDS 16
#define LANES 4

static inline uint64_t output(u128 state) {
    uint64_t folded = (uint64_t)(state >> 64) ^ (uint64_t)state;
    unsigned rot = (unsigned)(state >> 122);
    return (folded >> rot) | (folded << ((-rot) & 63));
}

static inline void put_word(uint32_t *out, uint64_t word) {
    out[0] = (uint32_t)word;
    out[1] = (uint32_t)(word >> 32);
}

static void fill_words(u128 *state, u128 inc, u128 lane_mult, u128 lane_plus, uint32_t *out) {
    u128 lane0 = *state * PCG_MULTIPLIER + inc;
    u128 lane1 = lane0 * PCG_MULTIPLIER + inc;
    u128 lane2 = lane1 * PCG_MULTIPLIER + inc;
    u128 lane3 = lane2 * PCG_MULTIPLIER + inc;
    for (int m = 0; m < WORDS; m += LANES) {
        put_word(out + 2 * m, output(lane0));
        put_word(out + 2 * m + 2, output(lane1));
        put_word(out + 2 * m + 4, output(lane2));
        put_word(out + 2 * m + 6, output(lane3));
        *state = lane3;
        lane0 = lane0 * lane_mult + lane_plus;
        lane1 = lane1 * lane_mult + lane_plus;
        lane2 = lane2 * lane_mult + lane_plus;
        lane3 = lane3 * lane_mult + lane_plus;
    }
}

/* ``delta`` steps of the LCG as one affine map: state -> mult * state + plus (Brown). */
static void jump(u128 inc, uint64_t delta, u128 *mult_out, u128 *plus_out) {
    u128 mult = PCG_MULTIPLIER, plus = inc, acc_mult = 1, acc_plus = 0;
    while (delta) {
        if (delta & 1) {
            acc_mult *= mult;
            acc_plus = acc_plus * mult + plus;
        }
        plus = (mult + 1) * plus;
        mult *= mult;
        delta >>= 1;
    }
    *mult_out = acc_mult;
    *plus_out = acc_plus;
}

/* ``delta`` 64-bit draws, skipped. */
static void advance(pcg64 *g, uint64_t delta) {
    u128 mult, plus;
    jump(g->inc, delta, &mult, &plus);
    g->state = mult * g->state + plus;
}

/* The draws of numpy's shuffles of spans ``lengths`` (one after another): for each span,
 * random_interval(i) for i = length-1..1, i.e. 32-bit words masked to the smallest 2**k - 1
 * >= i until one is <= i. The words come from a buffer (the 32-bit stream numpy reads: a
 * buffered upper half first if any, then each 64-bit word's lower and upper halves), and the
 * acceptance test is arithmetic, not a branch, since it fails about a third of the time. */
static void fisher_yates_draws(pcg64 *g, const int64_t *lengths, Py_ssize_t count) {
    uint32_t buffer[2 * WORDS + 1];
    u128 lane_mult, lane_plus, made = g->state;
    jump(g->inc, LANES, &lane_mult, &lane_plus);
    Py_ssize_t size = 0, pos = 0;
    uint64_t taken = 0; /* 32-bit halves of made words consumed */
    int buffered = g->has_uint32;
    if (buffered)
        buffer[size++] = g->uinteger;
    for (Py_ssize_t span = 0; span < count; span++) {
        uint32_t i = lengths[span] > 1 ? (uint32_t)(lengths[span] - 1) : 0;
        while (i) {
            uint32_t mask = UINT32_MAX >> __builtin_clz(i), low = (mask >> 1) + 1;
            while (i >= low) { /* One mask for every i in [low, mask]. */
                if (pos == size) {
                    fill_words(&made, g->inc, lane_mult, lane_plus, buffer);
                    taken += (uint64_t)(size - buffered);
                    size = 2 * WORDS;
                    pos = buffered = 0;
                }
                /* i falls by at most one a word: these words all see an i >= low. */
                Py_ssize_t count = size - pos < (Py_ssize_t)(i - low) + 1
                                       ? size - pos : (Py_ssize_t)(i - low) + 1;
                const uint32_t *words = buffer + pos;
                for (Py_ssize_t k = 0; k < count; k++)
                    i -= (words[k] & mask) <= i;
                pos += count;
            }
        }
    }
    if (!pos && !taken)
        return; /* Nothing drawn (or only refills): the state is unchanged. */
    taken += (uint64_t)(pos - buffered);
    if (!taken) { /* Only the buffered upper half was used. */
        g->has_uint32 = 0;
        return;
    }
    advance(g, (taken + 1) / 2);
    /* numpy keeps the last word's upper half, used or not: the next draw's, or stale. */
    g->has_uint32 = (int)(taken & 1);
    g->uinteger = buffer[taken & 1 ? pos : pos - 1];
}

/* The draws of ``Generator.integers`` over ``range + 1`` values (0 < range < 2**32 - 1). */
static void lemire_draws(pcg64 *g, uint32_t range) {
    uint32_t exclusive = range + 1;
    uint32_t leftover = (uint32_t)((uint64_t)next_uint32(g) * exclusive);
    if (leftover < exclusive) {
        uint32_t threshold = (UINT32_MAX - range) % exclusive;
        while (leftover < threshold)
            leftover = (uint32_t)((uint64_t)next_uint32(g) * exclusive);
    }
}

static int read_int64s(Py_buffer *view, const char *name) {
    if (view->len % 8) {
        PyErr_Format(PyExc_TypeError, "%s: expected contiguous int64 values", name);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(skip_rows_doc,
"skip_rows(state_high, state_low, inc_high, inc_low, has_uint32, uinteger, lengths, row_ends,\n"
"          low_block, high_block, shifts=True) -> (state_high, state_low, has_uint32, uinteger)\n\n"
"PCG64's state after py1e's draws for rows of span ``lengths`` (int64; row r ends at span\n"
"``row_ends[r]``), window sizes drawn from [low_block, high_block). ``shifts=False``: only\n"
"the rows' Fisher-Yates draws.");

static PyObject *skip_rows(PyObject *module, PyObject *args) {
    unsigned long long state_high, state_low, inc_high, inc_low;
    int has_uint32;
    unsigned int uinteger;
    Py_buffer lengths_view, ends_view;
    long long low_block, high_block;
    int shifts = 1;
    if (!PyArg_ParseTuple(args, "KKKKpIy*y*LL|p", &state_high, &state_low, &inc_high, &inc_low,
                          &has_uint32, &uinteger, &lengths_view, &ends_view, &low_block,
                          &high_block, &shifts))
        return NULL;
    PyObject *result = NULL;
    if (read_int64s(&lengths_view, "lengths") || read_int64s(&ends_view, "row_ends"))
        goto done;
    if (high_block - low_block - 1 < 0 || high_block - low_block - 1 >= 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_ValueError, "window sizes: need 0 < high_block - low_block < 2**32");
        goto done;
    }
    pcg64 g;
    g.state = ((u128)state_high << 64) | state_low;
    g.inc = ((u128)inc_high << 64) | inc_low;
    g.has_uint32 = has_uint32;
    g.uinteger = uinteger;
    const int64_t *lengths = lengths_view.buf, *ends = ends_view.buf;
    Py_ssize_t num_spans = lengths_view.len / 8, num_rows = ends_view.len / 8;
    uint32_t range = (uint32_t)(high_block - low_block - 1);
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t begin = 0;
    for (Py_ssize_t row = 0; row < num_rows && !bad; row++) {
        Py_ssize_t end = (Py_ssize_t)ends[row];
        if (end < begin || end > num_spans) {
            bad = 1;
            break;
        }
        for (Py_ssize_t span = begin; span < end; span++)
            bad |= lengths[span] < 0 || lengths[span] > 0xFFFFFFFFLL;
        if (bad)
            break;
        fisher_yates_draws(&g, lengths + begin, end - begin);
        for (Py_ssize_t span = begin; span < end && shifts; span++) {
            if (range)
                lemire_draws(&g, range);
            advance(&g, (uint64_t)lengths[span]);
        }
        begin = end;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError,
                        "row_ends must be non-decreasing span counts and lengths in [0, 2**32]");
        goto done;
    }
    result = Py_BuildValue("(KKiI)", (unsigned long long)(g.state >> 64),
                           (unsigned long long)g.state, g.has_uint32, (unsigned int)g.uinteger);
done:
    PyBuffer_Release(&lengths_view);
    PyBuffer_Release(&ends_view);
    return result;
}

static PyMethodDef methods[] = {
    {"skip_rows", skip_rows, METH_VARARGS, skip_rows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_py1e_skip",
    "py1e rows' random draws skipped in C (see _py1e_skip.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__py1e_skip(void) { return PyModule_Create(&module_def); }
