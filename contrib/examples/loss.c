/* loss.c: the kernel author's part for symjac: one dispatch from a request to the loss kernels.

   Kinds mse, sigmoid_ce (weight, pos_weight) and softmax_ce (labels probabilities or indices,
   weight, ignore_index, label_smoothing); reductions mean, batch_mean, sum and none; the loss
   scale S; float32 and float64 (loss_kernels.h).

   cc -O2 -I contrib -o loss contrib/examples/loss.c -lm                  (process route)
   cc -O2 -I contrib -shared -fPIC -DSYMJAC_SHARED -o libloss.so contrib/examples/loss.c -lm   (ctypes)
   add -DSEED003_BUG for nntrainer's missing loss scale in sigmoid_ce (loss_kernels.h lists the others). */
#include "symjac_driver.h"
#include "loss_kernels.h"

static int dispatch(symjac_request *r) {
    const symjac_array *z = symjac_input(r, "pred"), *y = symjac_input(r, "label"), *u = symjac_input(r, "upstream");
    double weight[4096], pos_weight[4096]; /* the settings take at most 16 KiB: fewer numbers than this */
    char labels[32];
    int64_t rows, d;
    loss_spec s = {0};
    if (symjac_is(r->kind, "mse")) s.kind = LOSS_MSE;
    else if (symjac_is(r->kind, "sigmoid_ce")) s.kind = LOSS_SIGMOID_CE;
    else if (symjac_is(r->kind, "softmax_ce")) s.kind = LOSS_SOFTMAX_CE;
    else return symjac_fail(r, "loss %s is not implemented", r->kind);
    if (symjac_is(r->reduction, "mean")) s.reduce = REDUCE_MEAN;
    else if (symjac_is(r->reduction, "batch_mean")) s.reduce = REDUCE_BATCH_MEAN;
    else if (symjac_is(r->reduction, "sum")) s.reduce = REDUCE_SUM;
    else if (symjac_is(r->reduction, "none")) s.reduce = REDUCE_NONE;
    else return symjac_fail(r, "reduction %s is not implemented", r->reduction);
    if (!symjac_is(r->dtype, "float32") && !symjac_is(r->dtype, "float64"))
        return symjac_fail(r, "dtype %s is not implemented", r->dtype);
    symjac_setting(r, "labels", labels, sizeof labels);
    s.indices = symjac_is(labels, "indices");
    if (z == NULL || y == NULL || (s.kind == LOSS_SOFTMAX_CE && z->ndim < 1))
        return symjac_fail(r, "pred and label are needed (softmax_ce: classes along pred's last axis)");
    s.f32 = symjac_is(r->dtype, "float32");
    s.count = z->count;
    s.classes = z->ndim > 0 && z->shape[z->ndim - 1] > 0 ? z->shape[z->ndim - 1] : 1;
    rows = s.kind == LOSS_SOFTMAX_CE ? s.count / s.classes : s.count;
    s.batch = s.kind == LOSS_SOFTMAX_CE ? (z->ndim > 1 ? z->shape[0] : 1) : (z->ndim > 0 ? z->shape[0] : 1);
    s.scale = r->scale;
    s.n_weight = symjac_setting_numbers(r, "weight", weight, 4096);
    s.n_pos_weight = symjac_setting_numbers(r, "pos_weight", pos_weight, 4096);
    s.weight = s.n_weight ? weight : NULL, s.pos_weight = s.n_pos_weight ? pos_weight : NULL;
    s.smoothing = symjac_setting_number(r, "label_smoothing", 0);
    s.ignore = symjac_setting(r, "ignore_index", NULL, 0) >= 0;
    s.ignore_index = (int64_t)symjac_setting_number(r, "ignore_index", -100);
    if (s.indices ? !symjac_is(y->dtype, "int64") || y->count != rows
                  : !symjac_is(y->dtype, z->dtype) || y->count != z->count)
        return symjac_fail(r, "label: %s", s.indices ? "int64 class indices, one per row" : "pred's dtype and size");
    if ((s.n_weight && s.n_weight != s.classes && (s.kind == LOSS_SOFTMAX_CE || s.n_weight != 1)) ||
        (s.n_pos_weight && s.n_pos_weight != s.classes && s.n_pos_weight != 1))
        return symjac_fail(r, "weight, pos_weight: one per class (%lld) or one number", (long long)s.classes);
    if ((d = loss_bad_label(&s, y->data)) >= 0) return symjac_fail(r, "row %lld: no class %lld", (long long)d,
                                                                   (long long)((const int64_t *)y->data)[d]);
    if (symjac_is(r->op, "loss")) {
        if (s.reduce == REDUCE_NONE && s.kind == LOSS_SOFTMAX_CE) r->output.ndim = z->ndim - 1; /* one per row */
        loss_value(&s, z->data, y->data, r->output.data);
    } else if (symjac_is(r->op, "derivative")) {
        loss_derivative(&s, z->data, y->data, u ? u->data : NULL, r->output.data);
    } else {
        return symjac_fail(r, "op %s is not loss or derivative", r->op);
    }
    return 0;
}

SYMJAC_MAIN(dispatch)
