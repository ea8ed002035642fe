/* pool.c: the kernel author's part for symjac: one dispatch from a request to the kernels.

   Operators pool, adaptive_pool and global_pool; modes max, avg and lp; rank 1, 2 and 3;
   channels_first and channels_last; float32 and float64 (pool_kernels.h).

   cc -O2 -I contrib -o pool contrib/examples/pool.c -lm                  (symjac --exec / process route)
   cc -O2 -I contrib -shared -fPIC -DSYMJAC_SHARED -o libpool.so contrib/examples/pool.c -lm   (ctypes route)
   add -DSEED000_BUG for nntrainer's SAME average-pooling backward defect (pool_kernels.h lists the others). */
#include "symjac_driver.h"
#include "pool_kernels.h"

static int dispatch(symjac_request *r) {
    const symjac_array *x = symjac_input(r, "x"), *dy = symjac_input(r, "dy");
    const symjac_array *out = symjac_is(r->op, "forward") ? &r->output : dy;
    int rank = r->rank, last = symjac_is(r->layout, "channels_last") && x != NULL && x->ndim > rank, a;
    int64_t cells = 1;
    char zero_window[32]; /* lp: the rule at a zero window, its derivative 0 (zero, the default) or 1 (one) */
    pool_nd p = {0};
    if (!symjac_is(r->operator_name, "pool") && !symjac_is(r->operator_name, "adaptive_pool") &&
        !symjac_is(r->operator_name, "global_pool"))
        return symjac_fail(r, "operator %s is not implemented", r->operator_name);
    if (symjac_is(r->mode, "max")) p.mode = POOL_MAX;
    else if (symjac_is(r->mode, "avg")) p.mode = POOL_AVG;
    else if (symjac_is(r->mode, "lp")) p.mode = POOL_LP;
    else return symjac_fail(r, "mode %s is not implemented", r->mode);
    if (!symjac_is(r->dtype, "float32") && !symjac_is(r->dtype, "float64"))
        return symjac_fail(r, "dtype %s is not implemented", r->dtype);
    if (!symjac_is(r->op, "forward") && (!symjac_is(r->op, "backward") || dy == NULL))
        return symjac_fail(r, "op %s is not forward or backward(x, dy)", r->op);
    if (x == NULL || rank < 1 || rank > 3 || x->ndim < rank || out->ndim != x->ndim)
        return symjac_fail(r, "x must have %d spatial axes", rank);
    p.f32 = symjac_is(r->dtype, "float32");
    p.adaptive = !symjac_is(r->operator_name, "pool");
    p.inner = last ? x->shape[x->ndim - 1] : 1;
    for (a = 0; a < 3; a++) { /* rank 1 and 2: leading axes of length 1 */
        int s = a - (3 - rank), at = x->ndim - last - rank + s;
        p.in[a] = s < 0 ? 1 : x->shape[at];
        p.out[a] = s < 0 ? 1 : out->shape[at];
        p.kernel[a] = s < 0 ? 1 : r->kernel[s];
        p.stride[a] = s < 0 ? 1 : r->stride[s];
        p.dilation[a] = s < 0 || r->dilation[s] < 1 ? 1 : r->dilation[s];
        p.low[a] = s < 0 ? 0 : r->pads[s][0];
        p.high[a] = s < 0 ? 0 : r->pads[s][1];
        cells *= p.in[a];
    }
    p.outer = cells * p.inner > 0 ? x->count / (cells * p.inner) : 0;
    if (symjac_is(r->divisor, "include_pad")) p.divisor = POOL_INCLUDE_PAD;
    else if (r->divisor[0] >= '1' && r->divisor[0] <= '9') p.divisor = (int64_t)symjac_setting_number(r, "divisor", 1);
    else p.divisor = POOL_EXCLUDE_PAD; /* exclude_pad, and adaptive and global pooling */
    p.pad_zero = symjac_setting(r, "pad_value", NULL, 0) >= 0;
    p.p = (int)symjac_setting_number(r, "p", 1);
    symjac_setting(r, "zero_window", zero_window, sizeof zero_window);
    p.zero_window = symjac_is(zero_window, "one");
    if (symjac_setting_number(r, "pad_value", 0) != 0 || p.p < 1 ||
        (zero_window[0] != '\0' && !p.zero_window && !symjac_is(zero_window, "zero")))
        return symjac_fail(r, "pad_value must be 0, p >= 1 and zero_window zero or one");
    if (symjac_is(r->op, "forward")) pool_forward(&p, x->data, r->output.data);
    else pool_backward(&p, x->data, dy->data, r->output.data);
    return 0;
}

SYMJAC_MAIN(dispatch)
