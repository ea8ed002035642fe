/* roi.c: the kernel author's part for symjac's RoI Align and RoI max pooling: one dispatch from a
   request to the kernels.

   cc -std=c99 -O2 -I contrib -o roi contrib/examples/roi.c -lm                      (symjac --exec / process route)
   cc -std=c99 -O2 -I contrib -shared -fPIC -DSYMJAC_SHARED -o libroi.so contrib/examples/roi.c -lm   (ctypes route)
   add -DROI_NO_ALIGN_OFFSET, -DROI_BACKWARD_NO_ZERO, -DROI_BACKWARD_BIN_COUNT or -DROI_CLAMP_BUG (RoI
   Align), -DROI_POOL_ROUND_EVEN or -DROI_POOL_END_FLOOR (RoI pooling) for a planted defect
   (roi_kernels.h; ROI_BACKWARD_NO_ZERO serves both). The boxes come as the settings line `boxes` (K rows of
   batch_index x1 y1 x2 y2, exact numbers), read as doubles and handed to the kernels in the map's dtype,
   as torchvision's rois tensor. */
#include <stdlib.h>
#include "symjac_driver.h"
#include "roi_kernels.h"

/* The boxes in the map's dtype (float or double), n_rois rows of 5; NULL after a refusal. */
static void *read_rois(symjac_request *r, const roi_align_params *p, int f32) {
    int64_t k, count = 5 * p->n_rois;
    double *boxes = malloc((size_t)(count + 1) * sizeof *boxes);
    void *rois = malloc((size_t)(count + 1) * (f32 ? sizeof(float) : sizeof(double)));
    int read = boxes && rois ? symjac_setting_numbers(r, "boxes", boxes, (int)count + 1) : -1;
    if (read != count) {
        symjac_fail(r, "boxes: %d numbers for %lld boxes (5 each)", read, (long long)p->n_rois);
        free(boxes), free(rois);
        return NULL;
    }
    for (k = 0; k < count; k++) {
        if (k % 5 == 0 && (boxes[k] < 0 || boxes[k] >= (double)p->batch)) {
            symjac_fail(r, "box %lld names batch item %g; the map has %lld", (long long)(k / 5), boxes[k],
                        (long long)p->batch);
            free(boxes), free(rois);
            return NULL;
        }
        if (f32) ((float *)rois)[k] = (float)boxes[k];
        else ((double *)rois)[k] = boxes[k];
    }
    free(boxes);
    return rois;
}

/* RoI max pooling: the forward's scan gives each bin's argmax, which the backward sends dy to. */
static int roi_pool(symjac_request *r, const symjac_array *x, const symjac_array *dy, const roi_align_params *a,
                    void *rois, double scale, int f32) {
    roi_pool_params p;
    int64_t *arg = malloc((size_t)(a->n_rois * a->channels * a->pooled_h * a->pooled_w + 1) * sizeof *arg);
    p.batch = a->batch, p.channels = a->channels, p.height = a->height, p.width = a->width;
    p.n_rois = a->n_rois, p.pooled_h = a->pooled_h, p.pooled_w = a->pooled_w;
    if (arg == NULL) return symjac_fail(r, "out of memory");
    if (f32) roi_pool_argmax_f32(&p, x->data, rois, (float)scale, dy ? NULL : r->output.data, arg);
    else roi_pool_argmax_f64(&p, x->data, rois, scale, dy ? NULL : r->output.data, arg);
    if (dy && f32) roi_pool_backward_f32(&p, dy->data, rois, arg, r->output.data);
    if (dy && !f32) roi_pool_backward_f64(&p, dy->data, rois, arg, r->output.data);
    free(arg);
    return 0;
}

static int dispatch(symjac_request *r) {
    const symjac_array *x = symjac_input(r, "x"), *dy = symjac_input(r, "dy");
    int backward = symjac_is(r->op, "backward"), f32 = symjac_is(r->dtype, "float32");
    int align = symjac_is(r->operator_name, "roi_align");
    const symjac_array *bins = backward ? dy : &r->output;
    double scale = symjac_setting_number(r, "spatial_scale", 1.0);
    int64_t aligned = 0;
    roi_align_params p;
    void *rois;
    int status = 0;
    if (!align && !symjac_is(r->operator_name, "roi_pool"))
        return symjac_fail(r, "this kernel is RoI Align and RoI max pooling only");
    if (!f32 && !symjac_is(r->dtype, "float64")) return symjac_fail(r, "dtype %s is not implemented", r->dtype);
    if (!backward && !symjac_is(r->op, "forward")) return symjac_fail(r, "op %s is not forward or backward", r->op);
    if (x == NULL || x->ndim != 4 || bins == NULL || bins->ndim != 4)
        return symjac_fail(r, "x must be (N, C, H, W) and dy (K, C, out_h, out_w)");
    p.batch = x->shape[0], p.channels = x->shape[1], p.height = x->shape[2], p.width = x->shape[3];
    p.n_rois = bins->shape[0], p.pooled_h = r->output_size[0], p.pooled_w = r->output_size[1];
    p.sampling_ratio = -1;
    symjac_setting_ints(r, "sampling_ratio", &p.sampling_ratio, 1);
    symjac_setting_ints(r, "aligned", &aligned, 1);
    p.aligned = aligned != 0;
    if (p.pooled_h != bins->shape[2] || p.pooled_w != bins->shape[3] || bins->shape[1] != p.channels)
        return symjac_fail(r, "output_size %lld x %lld does not match the bins' shape", (long long)p.pooled_h,
                           (long long)p.pooled_w);
    rois = read_rois(r, &p, f32);
    if (rois == NULL) return 1;
    if (!align) status = roi_pool(r, x, backward ? dy : NULL, &p, rois, scale, f32);
    else if (!backward && f32) roi_align_forward_f32(&p, x->data, rois, (float)scale, r->output.data);
    else if (!backward) roi_align_forward_f64(&p, x->data, rois, scale, r->output.data);
    else if (f32) roi_align_backward_f32(&p, dy->data, rois, (float)scale, r->output.data);
    else roi_align_backward_f64(&p, dy->data, rois, scale, r->output.data);
    free(rois);
    return status;
}

SYMJAC_MAIN(dispatch)
