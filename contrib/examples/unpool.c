/* unpool.c: max unpooling (PyTorch max_unpool1d/2d/3d, ONNX MaxUnpool) for symjac's native routes.

   cc -std=c99 -O2 -I contrib -o unpool contrib/examples/unpool.c                     (symjac --exec / process route)
   cc -std=c99 -O2 -I contrib -shared -fPIC -DSYMJAC_SHARED -o libunpool.so contrib/examples/unpool.c   (ctypes)

   The request carries x, then the indices (int64, x's shape), then for the backward dy. Each
   index counts the cells of its (N, C) plane of the output (`flat plane`, PyTorch) or of the
   whole output (`flat tensor`, ONNX); y is zero where no index writes, and where two inputs
   write one cell, the later in row-major order wins (`write last`) or the earlier (`write first`).
   The backward is the derivative of that forward: dx[i] = dy[index[i]] where input i's write
   won, and 0 where another write overwrote it.

   Planted defects:
   -DUNPOOL_GATHER_BACKWARD  the backward gathers dy at every index, overwritten writes too
                             (PyTorch's dy.gather(indices): not the derivative at a repeated index);
   -DUNPOOL_NO_ZERO          the forward never zeroes y: the cells no index names keep what was there. */
#include <stdlib.h>
#include "symjac_driver.h"

typedef struct {
    int64_t n_in, n_out, in_plane, out_plane; /* elements of x and y, and of one (N, C) plane of each */
    int tensor, first;                        /* flat tensor; write first */
} unpool_params;

/* The output cell input i writes, or -1 when its index lies outside the output. */
static int64_t unpool_target(const unpool_params *p, const int64_t *index, int64_t i) {
    int64_t t = index[i], bound = p->tensor ? p->n_out : p->out_plane;
    if (t < 0 || t >= bound) return -1;
    return p->tensor ? t : i / p->in_plane * p->out_plane + t;
}

/* winner[o]: the input whose write output o keeps (-1: none), by the write order. */
static void unpool_winners(const unpool_params *p, const int64_t *index, int64_t *winner) {
    int64_t i, o;
    for (o = 0; o < p->n_out; o++) winner[o] = -1;
    for (i = 0; i < p->n_in; i++) {
        int64_t t = unpool_target(p, index, i);
        if (t >= 0 && (!p->first || winner[t] < 0)) winner[t] = i;
    }
}

#define UNPOOL_KERNELS(T, SUFFIX)                                                                          \
    static void unpool_forward_##SUFFIX(const unpool_params *p, const T *x, const int64_t *winner, T *y) { \
        int64_t o;                                                                                         \
        for (o = 0; o < p->n_out; o++)                                                                     \
            if (winner[o] >= 0) y[o] = x[winner[o]];                                                       \
            else UNPOOL_ZERO(y[o]);                                                                        \
    }                                                                                                      \
    static void unpool_backward_##SUFFIX(const unpool_params *p, const int64_t *index, const int64_t *winner, \
                                         const T *dy, T *dx) {                                             \
        int64_t i;                                                                                         \
        for (i = 0; i < p->n_in; i++) {                                                                    \
            int64_t t = unpool_target(p, index, i);                                                        \
            dx[i] = t >= 0 && UNPOOL_WON(winner[t], i) ? dy[t] : (T)0;                                     \
        }                                                                                                  \
    }

#ifdef UNPOOL_NO_ZERO
#define UNPOOL_ZERO(cell) ((void)0)
#else
#define UNPOOL_ZERO(cell) ((cell) = 0)
#endif
#ifdef UNPOOL_GATHER_BACKWARD
#define UNPOOL_WON(w, i) ((void)(w), 1)
#else
#define UNPOOL_WON(w, i) ((w) == (i))
#endif

UNPOOL_KERNELS(float, f32)
UNPOOL_KERNELS(double, f64)

static int dispatch(symjac_request *r) {
    const symjac_array *x = symjac_input(r, "x"), *ix = symjac_input(r, "indices"), *dy = symjac_input(r, "dy");
    int backward = symjac_is(r->op, "backward"), f32 = symjac_is(r->dtype, "float32");
    const symjac_array *out = backward ? dy : &r->output;
    char flat[16], write[16];
    unpool_params p;
    int64_t i, planes, *winner;
    if (!symjac_is(r->operator_name, "max_unpool")) return symjac_fail(r, "this kernel is max unpooling only");
    if (!f32 && !symjac_is(r->dtype, "float64")) return symjac_fail(r, "dtype %s is not implemented", r->dtype);
    if (!backward && !symjac_is(r->op, "forward")) return symjac_fail(r, "op %s is not forward or backward", r->op);
    if (x == NULL || ix == NULL || out == NULL || !symjac_is(ix->dtype, "int64") || ix->count != x->count ||
        x->ndim < 3 || out->ndim != x->ndim)
        return symjac_fail(r, "give x (N, C, spatial...), int64 indices of x's shape and dy of y's shape");
    symjac_setting(r, "flat", flat, sizeof flat);
    symjac_setting(r, "write", write, sizeof write);
    planes = x->shape[0] * x->shape[1];
    p.n_in = x->count, p.n_out = out->count, p.in_plane = x->count / planes, p.out_plane = out->count / planes;
    p.tensor = symjac_is(flat, "tensor"), p.first = symjac_is(write, "first");
    for (i = 0; i < p.n_in; i++)
        if (unpool_target(&p, ix->data, i) < 0)
            return symjac_fail(r, "index %lld of input %lld is outside the output", (long long)((int64_t *)ix->data)[i],
                               (long long)i);
    winner = malloc((size_t)(p.n_out + 1) * sizeof *winner);
    if (winner == NULL) return symjac_fail(r, "out of memory");
    unpool_winners(&p, ix->data, winner);
    if (!backward && f32) unpool_forward_f32(&p, x->data, winner, r->output.data);
    if (!backward && !f32) unpool_forward_f64(&p, x->data, winner, r->output.data);
    if (backward && f32) unpool_backward_f32(&p, ix->data, winner, dy->data, r->output.data);
    if (backward && !f32) unpool_backward_f64(&p, ix->data, winner, dy->data, r->output.data);
    free(winner);
    return 0;
}

SYMJAC_MAIN(dispatch)
