/* loss.c: the kernel author's part for symjac: one dispatch from a request to the loss kernels.

   cc -O2 -I contrib -o loss contrib/examples/loss.c -lm                  (process route)
   cc -O2 -I contrib -shared -fPIC -DSYMJAC_SHARED -o libloss.so contrib/examples/loss.c -lm   (ctypes)
   add -DSEED003_BUG for nntrainer's missing loss scale in sigmoid_ce. */
#include "symjac_driver.h"
#include "loss_kernels.h"

static int dispatch(symjac_request *r) {
    const symjac_array *z = symjac_input(r, "pred"), *y = symjac_input(r, "label"), *u = symjac_input(r, "upstream");
    int f32 = symjac_is(r->dtype, "float32"), kind, reduce;
    if (symjac_is(r->kind, "mse")) kind = LOSS_MSE;
    else if (symjac_is(r->kind, "sigmoid_ce")) kind = LOSS_SIGMOID_CE;
    else return symjac_fail(r, "loss %s is not implemented", r->kind);
    if (symjac_is(r->reduction, "mean")) reduce = REDUCE_MEAN;
    else if (symjac_is(r->reduction, "sum")) reduce = REDUCE_SUM;
    else if (symjac_is(r->reduction, "none")) reduce = REDUCE_NONE;
    else return symjac_fail(r, "reduction %s is not implemented", r->reduction);
    if (symjac_setting(r, "weight", NULL, 0) >= 0 || symjac_setting(r, "pos_weight", NULL, 0) >= 0)
        return symjac_fail(r, "no weights here");
    if (!f32 && !symjac_is(r->dtype, "float64")) return symjac_fail(r, "dtype %s is not implemented", r->dtype);
    if (z == NULL || y == NULL || !symjac_is(y->dtype, z->dtype) || y->count != z->count)
        return symjac_fail(r, "pred and label must have one dtype and size");
    if (symjac_is(r->op, "loss")) {
        if (f32) loss_value_f32(kind, reduce, z->count, z->data, y->data, r->output.data);
        else loss_value_f64(kind, reduce, z->count, z->data, y->data, r->output.data);
    } else if (symjac_is(r->op, "derivative")) {
        if (f32) loss_derivative_f32(kind, reduce, r->scale, z->count, z->data, y->data, u ? u->data : NULL,
                                     r->output.data);
        else loss_derivative_f64(kind, reduce, r->scale, z->count, z->data, y->data, u ? u->data : NULL,
                                 r->output.data);
    } else {
        return symjac_fail(r, "op %s is not loss or derivative", r->op);
    }
    return 0;
}

SYMJAC_MAIN(dispatch)
