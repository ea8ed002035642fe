/* pool_kernel.c: a held-out pooling kernel (1-D and 2-D, NCL / NCHW, avg and max, float32 and
   float64, any kernel, stride and padding, no dilation) for benchmarks/heldout34.py.

   Written for the held-out corpus of issue 34 only, from the descriptions of the bug
   classes; one source, each planted defect behind one compile flag (none: the correct kernel):

     -DBUG_SCRATCH_TAIL  backward accumulates each plane in a malloc'd scratch buffer, clears it
                         only up to the last cell a window reads, and copies the whole plane out:
                         the cells past the last window (odd lengths, VALID) carry whatever the heap held
     -DBUG_UNWRITTEN     backward writes only the cells some window reads; a cell no window reads
                         (stride > kernel, or past the last window) is never written, as if the
                         caller's buffer were zeroed (a framework hands it torch.empty)
     -DBUG_WRITE_PAST    correct values, then one element written past the end of the output buffer
     -DBUG_WRITE_BEFORE  correct values, then one element written before its start
     -DBUG_DIVISOR       average pooling divides by the kernel's area, padding included (the spec
                         excludes it)
     -DONE_SHOT          (no defect) the program serves one request per run and exits 0, as
                         docs/native.md allows

   Every value is computed in double and rounded once to the output dtype. */
#include "symjac_driver.h"

#include <math.h>

typedef struct {
    int64_t planes, h, w, oh, ow, kh, kw, sh, sw, top, left;
} geometry;

static double load(const symjac_array *a, int64_t i) {
    return symjac_is(a->dtype, "float32") ? (double)((const float *)a->data)[i] : ((const double *)a->data)[i];
}

static void store(symjac_array *a, int64_t i, double v) {
    if (symjac_is(a->dtype, "float32")) ((float *)a->data)[i] = (float)v;
    else ((double *)a->data)[i] = v;
}

/* Rank 1 is rank 2 with one row: kernel 1, stride 1, no padding along it. */
static int setup(symjac_request *r, const symjac_array *x, const symjac_array *y, geometry *g) {
    int two = r->rank == 2;
    if ((r->rank != 1 && r->rank != 2) || !symjac_is(r->layout, "channels_first") ||
        r->dilation[0] != 1 || (two && r->dilation[1] != 1) ||
        (!symjac_is(r->dtype, "float32") && !symjac_is(r->dtype, "float64")))
        return symjac_fail(r, "only 1-D/2-D channels_first float32/float64 pooling without dilation");
    if (symjac_is(r->mode, "avg") && !symjac_is(r->divisor, "exclude_pad") && (r->divisor[0] < '0' || r->divisor[0] > '9'))
        return symjac_fail(r, "divisor %s not implemented", r->divisor);
    g->w = x->shape[x->ndim - 1];
    g->h = two ? x->shape[x->ndim - 2] : 1;
    g->planes = x->count / (g->h * g->w);
    g->ow = y->shape[y->ndim - 1];
    g->oh = two ? y->shape[y->ndim - 2] : 1;
    g->kh = two ? r->kernel[0] : 1, g->kw = r->kernel[two];
    g->sh = two ? r->stride[0] : 1, g->sw = r->stride[two];
    g->top = two ? r->pads[0][0] : 0, g->left = r->pads[two][0];
    return 0;
}

/* The cells of window (i, j), clipped to the input: rows [*a, *b), columns [*c, *d). */
static void window(const geometry *g, int64_t i, int64_t j, int64_t *a, int64_t *b, int64_t *c, int64_t *d) {
    int64_t r0 = i * g->sh - g->top, c0 = j * g->sw - g->left;
    *a = r0 < 0 ? 0 : r0, *b = r0 + g->kh > g->h ? g->h : r0 + g->kh;
    *c = c0 < 0 ? 0 : c0, *d = c0 + g->kw > g->w ? g->w : c0 + g->kw;
}

static double divisor(const symjac_request *r, const geometry *g, int64_t a, int64_t b, int64_t c, int64_t d) {
#ifdef BUG_DIVISOR
    (void)r, (void)a, (void)b, (void)c, (void)d;
    return (double)(g->kh * g->kw);
#else
    (void)g;
    if (symjac_is(r->divisor, "exclude_pad")) return (double)((b - a) * (d - c));
    return strtod(r->divisor, NULL);
#endif
}

/* The flat index (in the plane) of the first maximum of window (a..b, c..d). */
static int64_t argmax(const symjac_array *x, int64_t base, const geometry *g, int64_t a, int64_t b, int64_t c,
                      int64_t d) {
    int64_t i, j, best = a * g->w + c;
    for (i = a; i < b; i++)
        for (j = c; j < d; j++)
            if (load(x, base + i * g->w + j) > load(x, base + best)) best = i * g->w + j;
    return best;
}

static int forward(symjac_request *r, const symjac_array *x) {
    geometry g;
    int64_t n, i, j, p, q, a, b, c, d;
    if (setup(r, x, &r->output, &g)) return 1;
    for (n = 0; n < g.planes; n++)
        for (i = 0; i < g.oh; i++)
            for (j = 0; j < g.ow; j++) {
                double acc = 0;
                window(&g, i, j, &a, &b, &c, &d);
                if (symjac_is(r->mode, "max")) acc = load(x, n * g.h * g.w + argmax(x, n * g.h * g.w, &g, a, b, c, d));
                else {
                    for (p = a; p < b; p++)
                        for (q = c; q < d; q++) acc += load(x, n * g.h * g.w + p * g.w + q);
                    acc /= divisor(r, &g, a, b, c, d);
                }
                store(&r->output, (n * g.oh + i) * g.ow + j, acc);
            }
    return 0;
}

/* Add window (i, j)'s share of dy to the plane's gradient acc. */
static void scatter(const symjac_request *r, const geometry *g, const symjac_array *x, int64_t n, double gy,
                    int64_t i, int64_t j, double *acc) {
    int64_t a, b, c, d, p, q;
    window(g, i, j, &a, &b, &c, &d);
    if (symjac_is(r->mode, "max")) {
        acc[argmax(x, n * g->h * g->w, g, a, b, c, d)] += gy;
        return;
    }
    for (p = a; p < b; p++)
        for (q = c; q < d; q++) acc[p * g->w + q] += gy / divisor(r, g, a, b, c, d);
}

#ifdef BUG_SCRATCH_TAIL
/* The flat index (in the plane) one past the last cell any window reads. */
static int64_t covered(const geometry *g) {
    int64_t a, b, c, d;
    window(g, g->oh - 1, g->ow - 1, &a, &b, &c, &d);
    return (b - 1) * g->w + d;
}

static int backward(symjac_request *r, const symjac_array *x, const symjac_array *dy) {
    geometry g;
    int64_t n, i, j, k, plane;
    if (setup(r, x, dy, &g)) return 1;
    plane = g.h * g.w;
    for (n = 0; n < g.planes; n++) {
        double *scratch = (double *)malloc((size_t)plane * sizeof(double));
        if (scratch == NULL) return symjac_fail(r, "out of memory");
        memset(scratch, 0, (size_t)covered(&g) * sizeof(double)); /* the bug: only up to the last window's end */
        for (i = 0; i < g.oh; i++)
            for (j = 0; j < g.ow; j++) scatter(r, &g, x, n, load(dy, (n * g.oh + i) * g.ow + j), i, j, scratch);
        for (k = 0; k < plane; k++) store(&r->output, n * plane + k, scratch[k]);
        free(scratch);
    }
    return 0;
}
#else
static int backward(symjac_request *r, const symjac_array *x, const symjac_array *dy) {
    geometry g;
    int64_t n, i, j, plane;
    double *acc;
    if (setup(r, x, dy, &g)) return 1;
    plane = g.h * g.w;
    acc = (double *)calloc((size_t)plane, sizeof(double));
    if (acc == NULL) return symjac_fail(r, "out of memory");
    for (n = 0; n < g.planes; n++) {
        memset(acc, 0, (size_t)plane * sizeof(double));
        for (i = 0; i < g.oh; i++)
            for (j = 0; j < g.ow; j++) scatter(r, &g, x, n, load(dy, (n * g.oh + i) * g.ow + j), i, j, acc);
#ifdef BUG_UNWRITTEN
        for (i = 0; i < g.oh; i++) /* the bug: only the cells of some window are written */
            for (j = 0; j < g.ow; j++) {
                int64_t a, b, c, d, p, q;
                window(&g, i, j, &a, &b, &c, &d);
                for (p = a; p < b; p++)
                    for (q = c; q < d; q++) store(&r->output, n * plane + p * g.w + q, acc[p * g.w + q]);
            }
#else
        for (i = 0; i < plane; i++) store(&r->output, n * plane + i, acc[i]);
#endif
    }
    free(acc);
    return 0;
}
#endif

static int dispatch(symjac_request *r) {
    const symjac_array *x = symjac_input(r, "x"), *dy = symjac_input(r, "dy");
    int status;
    if (!symjac_is(r->operator_name, "pool") || (!symjac_is(r->mode, "avg") && !symjac_is(r->mode, "max")))
        return symjac_fail(r, "only avg and max pooling");
    status = symjac_is(r->op, "backward") ? backward(r, x, dy) : forward(r, x);
#if defined(BUG_WRITE_PAST)
    if (status == 0) store(&r->output, r->output.count, load(&r->output, 0)); /* one element past the end */
#elif defined(BUG_WRITE_BEFORE)
    if (status == 0) store(&r->output, -1, load(&r->output, 0)); /* one element before the start */
#endif
    return status;
}

#if defined(ONE_SHOT) && !defined(SYMJAC_SHARED)
/* One request per run, then exit 0 (docs/native.md: symjac restarts the program). */
int main(void) {
    static symjac_request request;
    static char line[SYMJAC_SETTINGS];
    return symjac__serve_one(dispatch, &request, line, sizeof line) == 2 ? 2 : 0;
}
#else
SYMJAC_MAIN(dispatch)
#endif
