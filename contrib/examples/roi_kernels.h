/* roi_kernels.h: a reference RoI Align (torchvision's roi_align) and RoI max pooling (roi_pool, below),
   NCHW, in float and double.

   Plain C99 with no symjac in it: the kernels a framework would have, written after
   torchvision/csrc/ops/cpu/roi_align_kernel.cpp. A box is a row (batch_index, x1, y1, x2, y2) of
   the rois array, in the map's dtype. It is scaled by spatial_scale and, when aligned, shifted
   by -1/2 (the half-pixel offset; unaligned boxes are at least 1 x 1). Each of its
   pooled_h x pooled_w bins averages a grid of sample points (sampling_ratio per axis, or, when
   sampling_ratio <= 0, ceil(box size / bins): the adaptive grid), each the bilinear
   interpolation of the map: 0 where the point lies below -1 or beyond H (W), else clamped to 0
   below and, past the last row (column), moved onto it. The bin divides by the grid's points
   (at least 1). The backward spreads each bin's gradient over the same points and weights, and
   accumulates into dx: it zeroes dx first, as the framework's at::zeros does.

   Planted defects, each a kind reported against framework RoI Align kernels:
   -DROI_NO_ALIGN_OFFSET     aligned is ignored: the half-pixel offset is never applied;
   -DROI_BACKWARD_NO_ZERO    the backward accumulates into dx without zeroing it first;
   -DROI_BACKWARD_BIN_COUNT  the backward divides by floor(box size / bins) per axis, where the
                             forward's adaptive grid has ceil: another sample count than the forward's;
   -DROI_CLAMP_BUG           the backward's interpolation tests the low edge at 0, not -1: sample
                             points in [-1, 0) are dropped instead of clamped onto row (column) 0. */
#ifndef ROI_KERNELS_H
#define ROI_KERNELS_H

#include <math.h>
#include <stdint.h>

typedef struct {
    int64_t batch, channels, height, width; /* the map: batch x channels x height x width */
    int64_t n_rois, pooled_h, pooled_w;     /* the output: n_rois x channels x pooled_h x pooled_w */
    int64_t sampling_ratio;                 /* <= 0: adaptive */
    int aligned;
} roi_align_params;

#ifdef ROI_NO_ALIGN_OFFSET
#define ROI_OFFSET(aligned) 0
#else
#define ROI_OFFSET(aligned) ((aligned) ? 0.5 : 0.0)
#endif

#ifdef ROI_CLAMP_BUG
#define ROI_GRADIENT_LOW 0
#else
#define ROI_GRADIENT_LOW -1
#endif

#define ROI_ALIGN_KERNELS(T, SUFFIX)                                                                        \
    /* One box's geometry: its batch item, start, bin sizes, sample grid and the bin's divisor. */        \
    typedef struct {                                                                                      \
        int64_t item, grid_h, grid_w;                                                                     \
        T start_h, start_w, bin_h, bin_w, roi_h, roi_w, count;                                             \
    } roi_box_##SUFFIX;                                                                                   \
    static inline roi_box_##SUFFIX roi_box_of_##SUFFIX(const roi_align_params *p, const T *roi, T scale) { \
        roi_box_##SUFFIX b;                                                                               \
        T offset = (T)ROI_OFFSET(p->aligned);                                                             \
        T end_w = roi[3] * scale - offset, end_h = roi[4] * scale - offset;                               \
        b.item = (int64_t)roi[0];                                                                         \
        b.start_w = roi[1] * scale - offset;                                                              \
        b.start_h = roi[2] * scale - offset;                                                              \
        b.roi_w = end_w - b.start_w;                                                                      \
        b.roi_h = end_h - b.start_h;                                                                      \
        if (!p->aligned) { /* force malformed boxes to 1 x 1 */                                          \
            if (b.roi_w < 1) b.roi_w = 1;                                                                 \
            if (b.roi_h < 1) b.roi_h = 1;                                                                 \
        }                                                                                                 \
        b.bin_h = b.roi_h / (T)p->pooled_h;                                                               \
        b.bin_w = b.roi_w / (T)p->pooled_w;                                                               \
        b.grid_h = p->sampling_ratio > 0 ? p->sampling_ratio : (int64_t)ceil(b.roi_h / (T)p->pooled_h);   \
        b.grid_w = p->sampling_ratio > 0 ? p->sampling_ratio : (int64_t)ceil(b.roi_w / (T)p->pooled_w);   \
        b.count = (T)(b.grid_h * b.grid_w > 1 ? b.grid_h * b.grid_w : 1);                                 \
        return b;                                                                                         \
    }                                                                                                     \
    /* The sample point (iy, ix) of bin (ph, pw). */                                                      \
    static inline T roi_sample_y_##SUFFIX(const roi_box_##SUFFIX *b, int64_t ph, int64_t iy) {          \
        return b->start_h + (T)ph * b->bin_h + ((T)iy + (T)0.5) * b->bin_h / (T)b->grid_h;                \
    }                                                                                                     \
    static inline T roi_sample_x_##SUFFIX(const roi_box_##SUFFIX *b, int64_t pw, int64_t ix) {          \
        return b->start_w + (T)pw * b->bin_w + ((T)ix + (T)0.5) * b->bin_w / (T)b->grid_w;                \
    }                                                                                                     \
    /* Bilinear interpolation at (y, x): the four corners' offsets in the plane and weights; 0 when   \
       the point lies outside (below `low` or beyond the map), else 1. */                                 \
    static inline int roi_bilinear_##SUFFIX(int64_t height, int64_t width, T y, T x, T low, int64_t pos[4], \
                                            T w[4]) {                                                     \
        int64_t y_low, x_low, y_high, x_high;                                                             \
        T ly, lx, hy, hx;                                                                                 \
        if (y < low || y > (T)height || x < low || x > (T)width) return 0;                                \
        if (y <= 0) y = 0;                                                                                \
        if (x <= 0) x = 0;                                                                                \
        y_low = (int64_t)y;                                                                               \
        x_low = (int64_t)x;                                                                               \
        if (y_low >= height - 1) {                                                                        \
            y_high = y_low = height - 1;                                                                  \
            y = (T)y_low;                                                                                 \
        } else                                                                                            \
            y_high = y_low + 1;                                                                           \
        if (x_low >= width - 1) {                                                                         \
            x_high = x_low = width - 1;                                                                   \
            x = (T)x_low;                                                                                 \
        } else                                                                                            \
            x_high = x_low + 1;                                                                           \
        ly = y - (T)y_low, lx = x - (T)x_low, hy = 1 - ly, hx = 1 - lx;                                   \
        w[0] = hy * hx, w[1] = hy * lx, w[2] = ly * hx, w[3] = ly * lx;                                   \
        pos[0] = y_low * width + x_low, pos[1] = y_low * width + x_high;                                  \
        pos[2] = y_high * width + x_low, pos[3] = y_high * width + x_high;                                \
        return 1;                                                                                         \
    }                                                                                                     \
    static inline void roi_align_forward_##SUFFIX(const roi_align_params *p, const T *x, const T *rois,   \
                                                  T scale, T *y) {                                        \
        int64_t k, c, ph, pw, iy, ix, q, pos[4];                                                          \
        T w[4];                                                                                           \
        for (k = 0; k < p->n_rois; k++) {                                                                 \
            roi_box_##SUFFIX b = roi_box_of_##SUFFIX(p, rois + 5 * k, scale);                             \
            for (c = 0; c < p->channels; c++) {                                                           \
                const T *plane = x + (b.item * p->channels + c) * p->height * p->width;                   \
                for (ph = 0; ph < p->pooled_h; ph++)                                                      \
                    for (pw = 0; pw < p->pooled_w; pw++) {                                                \
                        T sum = 0;                                                                        \
                        for (iy = 0; iy < b.grid_h; iy++)                                                 \
                            for (ix = 0; ix < b.grid_w; ix++) {                                           \
                                T yy = roi_sample_y_##SUFFIX(&b, ph, iy), xx = roi_sample_x_##SUFFIX(&b, pw, ix); \
                                if (!roi_bilinear_##SUFFIX(p->height, p->width, yy, xx, -1, pos, w)) continue; \
                                for (q = 0; q < 4; q++) sum += w[q] * plane[pos[q]];                      \
                            }                                                                             \
                        y[((k * p->channels + c) * p->pooled_h + ph) * p->pooled_w + pw] = sum / b.count; \
                    }                                                                                     \
            }                                                                                             \
        }                                                                                                 \
    }                                                                                                     \
    static inline void roi_align_backward_##SUFFIX(const roi_align_params *p, const T *dy, const T *rois, \
                                                   T scale, T *dx) {                                      \
        int64_t k, c, ph, pw, iy, ix, q, pos[4];                                                          \
        T w[4];                                                                                           \
        ROI_ZERO(dx, p->batch * p->channels * p->height * p->width);                                      \
        for (k = 0; k < p->n_rois; k++) {                                                                 \
            roi_box_##SUFFIX b = roi_box_of_##SUFFIX(p, rois + 5 * k, scale);                             \
            T count = ROI_BACKWARD_COUNT(T, p, b);                                                        \
            for (c = 0; c < p->channels; c++) {                                                           \
                T *plane = dx + (b.item * p->channels + c) * p->height * p->width;                        \
                for (ph = 0; ph < p->pooled_h; ph++)                                                      \
                    for (pw = 0; pw < p->pooled_w; pw++) {                                                \
                        T g = dy[((k * p->channels + c) * p->pooled_h + ph) * p->pooled_w + pw];          \
                        for (iy = 0; iy < b.grid_h; iy++)                                                 \
                            for (ix = 0; ix < b.grid_w; ix++) {                                           \
                                T yy = roi_sample_y_##SUFFIX(&b, ph, iy), xx = roi_sample_x_##SUFFIX(&b, pw, ix); \
                                if (!roi_bilinear_##SUFFIX(p->height, p->width, yy, xx, ROI_GRADIENT_LOW, pos, w)) \
                                    continue;                                                             \
                                for (q = 0; q < 4; q++) plane[pos[q]] += g * w[q] / count;                \
                            }                                                                             \
                    }                                                                                     \
            }                                                                                             \
        }                                                                                                 \
    }

#ifdef ROI_BACKWARD_NO_ZERO
#define ROI_ZERO(dx, n) ((void)0)
#else
#define ROI_ZERO(dx, n)                                     \
    do {                                                    \
        int64_t i_;                                         \
        for (i_ = 0; i_ < (n); i_++) (dx)[i_] = 0;          \
    } while (0)
#endif

#ifdef ROI_BACKWARD_BIN_COUNT
/* the adaptive grid's count rounded down: floor(size / bins) per axis, at least 1 */
#define ROI_BACKWARD_COUNT(T, p, b)                                                                          \
    ((p)->sampling_ratio > 0 ? (b).count                                                                      \
                             : (T)(floor((b).roi_h / (T)(p)->pooled_h) * floor((b).roi_w / (T)(p)->pooled_w) > 1 \
                                       ? floor((b).roi_h / (T)(p)->pooled_h) * floor((b).roi_w / (T)(p)->pooled_w) \
                                       : 1))
#else
#define ROI_BACKWARD_COUNT(T, p, b) ((b).count)
#endif

/* RoI max pooling (torchvision's roi_pool, roi_pool_kernel.cpp): a box is rounded to cells
   (C's round: half away from zero), at least 1 x 1; bin i spans [floor(i * size / out),
   ceil((i + 1) * size / out)) from its start, clamped to the map; its value is the first maximum
   in row-major order (strict >, from the bin's first cell; a number replaces a NaN: symjac's NaN policy
   "ignore", a bin of -inf only is -inf), 0 for an empty bin; the backward sends dy to that cell.
   -DROI_POOL_ROUND_EVEN  the box rounded half to even (rint), as NumPy rounds, not half away from zero;
   -DROI_POOL_END_FLOOR   a bin's end rounded down: overlapping bins lose their shared row. */
#ifdef ROI_POOL_ROUND_EVEN
#define ROI_ROUND(v) rint(v)
#else
#define ROI_ROUND(v) round(v)
#endif
#ifdef ROI_POOL_END_FLOOR
#define ROI_END(v) floor(v)
#else
#define ROI_END(v) ceil(v)
#endif

typedef struct {
    int64_t batch, channels, height, width;
    int64_t n_rois, pooled_h, pooled_w;
} roi_pool_params;

static inline int64_t roi_clamp(int64_t v, int64_t hi) { return v < 0 ? 0 : v > hi ? hi : v; }

#define ROI_POOL_KERNELS(T, SUFFIX)                                                                         \
    /* The argmax (a flat H x W index, -1 for an empty bin) and value of every (box, channel, bin). */   \
    static inline void roi_pool_argmax_##SUFFIX(const roi_pool_params *p, const T *x, const T *rois,     \
                                                T scale, T *y, int64_t *arg) {                           \
        int64_t k, c, ph, pw, h, w;                                                                       \
        for (k = 0; k < p->n_rois; k++) {                                                                 \
            const T *roi = rois + 5 * k;                                                                  \
            int64_t item = (int64_t)roi[0];                                                               \
            int64_t start_w = (int64_t)ROI_ROUND(roi[1] * scale), start_h = (int64_t)ROI_ROUND(roi[2] * scale); \
            int64_t end_w = (int64_t)ROI_ROUND(roi[3] * scale), end_h = (int64_t)ROI_ROUND(roi[4] * scale); \
            int64_t roi_w = end_w - start_w + 1 > 1 ? end_w - start_w + 1 : 1;                            \
            int64_t roi_h = end_h - start_h + 1 > 1 ? end_h - start_h + 1 : 1;                            \
            T bin_h = (T)roi_h / (T)p->pooled_h, bin_w = (T)roi_w / (T)p->pooled_w;                       \
            for (ph = 0; ph < p->pooled_h; ph++)                                                          \
                for (pw = 0; pw < p->pooled_w; pw++) {                                                    \
                    int64_t hs = roi_clamp((int64_t)floor((T)ph * bin_h) + start_h, p->height);           \
                    int64_t he = roi_clamp((int64_t)ROI_END((T)(ph + 1) * bin_h) + start_h, p->height);   \
                    int64_t ws = roi_clamp((int64_t)floor((T)pw * bin_w) + start_w, p->width);            \
                    int64_t we = roi_clamp((int64_t)ROI_END((T)(pw + 1) * bin_w) + start_w, p->width);    \
                    int empty = he <= hs || we <= ws;                                                     \
                    for (c = 0; c < p->channels; c++) {                                                   \
                        const T *plane = x + (item * p->channels + c) * p->height * p->width;             \
                        int64_t at = ((k * p->channels + c) * p->pooled_h + ph) * p->pooled_w + pw, best = -1; \
                        for (h = hs; h < he; h++)                                                         \
                            for (w = ws; w < we; w++)                                                     \
                                if (best < 0 || plane[h * p->width + w] > plane[best]                     \
                                    || (plane[best] != plane[best] && plane[h * p->width + w] == plane[h * p->width + w])) \
                                    best = h * p->width + w;                                              \
                        if (y != NULL) y[at] = empty ? (T)0 : plane[best];                                \
                        arg[at] = empty ? -1 : best;                                                      \
                    }                                                                                     \
                }                                                                                         \
        }                                                                                                 \
    }                                                                                                     \
    /* dx: each bin's dy to its argmax (arg, from the forward's scan of the same x). */                  \
    static inline void roi_pool_backward_##SUFFIX(const roi_pool_params *p, const T *dy, const T *rois,  \
                                                  const int64_t *arg, T *dx) {                           \
        int64_t k, c, b, bins = p->pooled_h * p->pooled_w;                                                \
        ROI_ZERO(dx, p->batch * p->channels * p->height * p->width);                                      \
        for (k = 0; k < p->n_rois; k++)                                                                   \
            for (c = 0; c < p->channels; c++)                                                             \
                for (b = 0; b < bins; b++) {                                                              \
                    int64_t at = (k * p->channels + c) * bins + b;                                        \
                    if (arg[at] >= 0)                                                                     \
                        dx[((int64_t)rois[5 * k] * p->channels + c) * p->height * p->width + arg[at]] += dy[at]; \
                }                                                                                         \
    }

ROI_ALIGN_KERNELS(float, f32)
ROI_ALIGN_KERNELS(double, f64)
ROI_POOL_KERNELS(float, f32)
ROI_POOL_KERNELS(double, f64)

#endif
