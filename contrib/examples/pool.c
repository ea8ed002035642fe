/* pool.c: the kernel author's part for symjac: one dispatch from a request to the kernels.

   cc -O2 -I contrib -o pool contrib/examples/pool.c                      (symjac --exec / process route)
   cc -O2 -I contrib -shared -fPIC -DSYMJAC_SHARED -o libpool.so contrib/examples/pool.c   (ctypes route)
   add -DSEED000_BUG for nntrainer's SAME average-pooling backward defect. */
#include "symjac_driver.h"
#include "pool_kernels.h"

static int dispatch(symjac_request *r) {
    const symjac_array *x = symjac_input(r, "x"), *dy = symjac_input(r, "dy");
    int f32 = symjac_is(r->dtype, "float32"), avg = symjac_is(r->mode, "avg");
    pool2d p;
    if (!symjac_is(r->operator_name, "pool") || r->rank != 2 || !symjac_is(r->layout, "channels_first"))
        return symjac_fail(r, "this kernel is 2-D NCHW pooling only");
    if (!avg && !symjac_is(r->mode, "max")) return symjac_fail(r, "mode %s is not implemented", r->mode);
    if (!f32 && !symjac_is(r->dtype, "float64")) return symjac_fail(r, "dtype %s is not implemented", r->dtype);
    if (r->dilation[0] != 1 || r->dilation[1] != 1 || symjac_setting(r, "pad_value", NULL, 0) >= 0)
        return symjac_fail(r, "dilation and pad_value are not implemented");
    if (avg && !symjac_is(r->divisor, "exclude_pad") && !symjac_is(r->divisor, "include_pad"))
        return symjac_fail(r, "divisor %s is not implemented", r->divisor);
    if (x == NULL || x->ndim < 2) return symjac_fail(r, "x must have H and W");
    p.h = x->shape[x->ndim - 2];
    p.w = x->shape[x->ndim - 1];
    p.planes = x->count / (p.h * p.w > 0 ? p.h * p.w : 1);
    p.kh = r->kernel[0], p.kw = r->kernel[1], p.sh = r->stride[0], p.sw = r->stride[1];
    p.top = r->pads[0][0], p.bottom = r->pads[0][1], p.left = r->pads[1][0], p.right = r->pads[1][1];
    p.include_pad = symjac_is(r->divisor, "include_pad");
    if (symjac_is(r->op, "forward")) {
        p.oh = r->output.shape[r->output.ndim - 2];
        p.ow = r->output.shape[r->output.ndim - 1];
        if (avg && f32) avg_pool2d_forward_f32(&p, x->data, r->output.data);
        if (avg && !f32) avg_pool2d_forward_f64(&p, x->data, r->output.data);
        if (!avg && f32) max_pool2d_forward_f32(&p, x->data, r->output.data);
        if (!avg && !f32) max_pool2d_forward_f64(&p, x->data, r->output.data);
        return 0;
    }
    if (!symjac_is(r->op, "backward") || dy == NULL || dy->ndim != x->ndim)
        return symjac_fail(r, "op %s is not forward or backward(x, dy)", r->op);
    p.oh = dy->shape[dy->ndim - 2];
    p.ow = dy->shape[dy->ndim - 1];
    if (avg && f32) avg_pool2d_backward_f32(&p, dy->data, r->output.data);
    if (avg && !f32) avg_pool2d_backward_f64(&p, dy->data, r->output.data);
    if (!avg && f32) max_pool2d_backward_f32(&p, x->data, dy->data, r->output.data);
    if (!avg && !f32) max_pool2d_backward_f64(&p, x->data, dy->data, r->output.data);
    return 0;
}

SYMJAC_MAIN(dispatch)
