/* pool_kernels.h: a reference 2-D average / max pooling, NCHW, in float and double.

   Plain C99 with no symjac in it: the kernels a framework would have. Every leading
   dimension (N, C, ...) is a batch of independent H x W planes. Average pooling divides
   by the window's valid cells (exclude_pad) or by its cells inside the padded input
   (include_pad); max pooling ignores padding and routes the gradient to the first maximum, a NaN
   counting as above every number (NaN propagates, and its window's gradient goes to the first NaN).

   -DSEED000_BUG plants nntrainer's SAME average-pooling backward defect (symjac seed 000):
   the backward loops end at H - k + top (W - k + left), where bottom (right) belongs, so at
   2x2 stride 1 SAME on a 2x2 input only the first of the 4 output windows is visited. */
#ifndef POOL_KERNELS_H
#define POOL_KERNELS_H

#include <stdint.h>

typedef struct {
    int64_t planes, h, w;          /* input: planes x h x w */
    int64_t oh, ow;                /* output size */
    int64_t kh, kw, sh, sw;        /* kernel, stride */
    int64_t top, bottom, left, right;
    int include_pad;               /* average: count pad cells in the divisor */
} pool2d;

/* The window's rows [*a, *b) and columns [*c, *d) inside the input; returns its divisor. */
static inline int64_t pool2d_window(const pool2d *p, int64_t oi, int64_t oj, int64_t *a, int64_t *b, int64_t *c, int64_t *d) {
    int64_t i = oi * p->sh - p->top, j = oj * p->sw - p->left;
    int64_t pa = i < -p->top ? -p->top : i, pb = i + p->kh > p->h + p->bottom ? p->h + p->bottom : i + p->kh;
    int64_t pc = j < -p->left ? -p->left : j, pd = j + p->kw > p->w + p->right ? p->w + p->right : j + p->kw;
    *a = i < 0 ? 0 : i;
    *b = i + p->kh > p->h ? p->h : i + p->kh;
    *c = j < 0 ? 0 : j;
    *d = j + p->kw > p->w ? p->w : j + p->kw;
    return p->include_pad ? (pb - pa) * (pd - pc) : (*b - *a) * (*d - *c);
}

#define POOL2D_KERNELS(T, SUFFIX)                                                                          \
    static inline void avg_pool2d_forward_##SUFFIX(const pool2d *p, const T *x, T *y) {                          \
        int64_t n, oi, oj, i, j, a, b, c, d, count;                                                       \
        for (n = 0; n < p->planes; n++)                                                                   \
            for (oi = 0; oi < p->oh; oi++)                                                                \
                for (oj = 0; oj < p->ow; oj++) {                                                          \
                    T sum = 0;                                                                            \
                    count = pool2d_window(p, oi, oj, &a, &b, &c, &d);                                     \
                    for (i = a; i < b; i++)                                                               \
                        for (j = c; j < d; j++) sum += x[(n * p->h + i) * p->w + j];                      \
                    y[(n * p->oh + oi) * p->ow + oj] = sum / (T)count;                                    \
                }                                                                                         \
    }                                                                                                     \
    static inline void avg_pool2d_backward_##SUFFIX(const pool2d *p, const T *dy, T *dx) {                       \
        int64_t n, oi, oj, i, j, a, b, c, d, count;                                                       \
        for (i = 0; i < p->planes * p->h * p->w; i++) dx[i] = 0;                                          \
        for (n = 0; n < p->planes; n++)                                                                   \
            for (oi = 0; oi < p->oh; oi++) {                                                              \
                if (SEED000_END(oi * p->sh - p->top, p->h, p->kh, p->top)) break;                         \
                for (oj = 0; oj < p->ow; oj++) {                                                          \
                    T g;                                                                                  \
                    if (SEED000_END(oj * p->sw - p->left, p->w, p->kw, p->left)) break;                   \
                    count = pool2d_window(p, oi, oj, &a, &b, &c, &d);                                     \
                    g = dy[(n * p->oh + oi) * p->ow + oj] / (T)count;                                     \
                    for (i = a; i < b; i++)                                                               \
                        for (j = c; j < d; j++) dx[(n * p->h + i) * p->w + j] += g;                       \
                }                                                                                         \
            }                                                                                             \
    }                                                                                                     \
    static inline int64_t max_pool2d_argmax_##SUFFIX(const pool2d *p, const T *x, int64_t n, int64_t oi, int64_t oj) { \
        int64_t i, j, a, b, c, d, best = -1;                                                              \
        pool2d_window(p, oi, oj, &a, &b, &c, &d);                                                         \
        for (i = a; i < b; i++)                                                                           \
            for (j = c; j < d; j++) {                                                                     \
                int64_t at = (n * p->h + i) * p->w + j;                                                   \
                /* ties: the first maximum; a NaN is above every number (NaN propagates, as PyTorch) */ \
                if (best < 0 || x[at] > x[best] || (x[at] != x[at] && x[best] == x[best])) best = at;     \
            }                                                                                             \
        return best;                                                                                      \
    }                                                                                                     \
    static inline void max_pool2d_forward_##SUFFIX(const pool2d *p, const T *x, T *y) {                          \
        int64_t n, oi, oj;                                                                                \
        for (n = 0; n < p->planes; n++)                                                                   \
            for (oi = 0; oi < p->oh; oi++)                                                                \
                for (oj = 0; oj < p->ow; oj++)                                                            \
                    y[(n * p->oh + oi) * p->ow + oj] = x[max_pool2d_argmax_##SUFFIX(p, x, n, oi, oj)];    \
    }                                                                                                     \
    static inline void max_pool2d_backward_##SUFFIX(const pool2d *p, const T *x, const T *dy, T *dx) {           \
        int64_t n, oi, oj, i;                                                                             \
        for (i = 0; i < p->planes * p->h * p->w; i++) dx[i] = 0;                                          \
        for (n = 0; n < p->planes; n++)                                                                   \
            for (oi = 0; oi < p->oh; oi++)                                                                \
                for (oj = 0; oj < p->ow; oj++)                                                            \
                    dx[max_pool2d_argmax_##SUFFIX(p, x, n, oi, oj)] += dy[(n * p->oh + oi) * p->ow + oj]; \
    }

#ifdef SEED000_BUG
/* nntrainer: the backward loop runs while start <= length - k + top, where bottom belongs */
#define SEED000_END(start, length, k, low) ((start) > (length) - (k) + (low))
#else
#define SEED000_END(start, length, k, low) 0
#endif

POOL2D_KERNELS(float, f32)
POOL2D_KERNELS(double, f64)

#endif /* POOL_KERNELS_H */
