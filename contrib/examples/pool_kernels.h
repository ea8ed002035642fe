/* pool_kernels.h: reference pooling over 1, 2 or 3 spatial axes, in float and double.

   Plain C99 (and libm) with no symjac in it: the kernels a framework would have.

   Layout. An array is [outer][D][H][W][inner]: channels_first (N, C, spatial...) has every
   leading dimension in `outer` and inner = 1; channels_last (N, spatial..., C) has the
   channels in `inner`. Rank 1 and 2 are rank 3 with leading spatial axes of length 1, so
   one set of loops serves every rank. A cell's offset is plane + ((d * H + h) * W + w) * inner.

   Windows. Fixed windows (operator pool): window o of an axis starts at o * stride - low
   and holds the kernel's slots start + j * dilation, j < kernel, as far as they lie in the
   padded input [-low, L + high) (under ceil_mode the last window may reach past the high
   pad: that part is no cell at all). A slot outside [0, L) is a pad cell. Adaptive windows
   (adaptive and global pooling): [floor(o L / out), ceil((o + 1) L / out)), no padding.

   Modes, per window:
   - max: the first maximal cell in row-major window order; a NaN is above every number
     (NaN propagates, and the window's gradient goes to its first NaN). Pad cells take no
     part, unless pad_zero (pad_value 0): then they hold 0 and compete, and a window won by
     a pad cell sends its gradient nowhere.
   - avg: the sum of the input cells over a divisor: the number of input cells
     (exclude_pad), of slots in the padded input (include_pad: the ceil-mode overhang does
     not count), or an integer (a divisor override).
   - lp: y = (sum x^p)^(1/p), dy/dx_i = (x_i / y)^(p - 1) (p = 1: the sum, derivative 1).
     Where y = 0 (a zero window) the derivative is the zero_window value (0: PyTorch's; 1).
     The power sum is formed after scaling by a power of two near the window's largest
     |x|, so x^p does not overflow where y does not.
   Values are computed in double and rounded once to the array's type.

   Planted defects (each a kind seen in framework kernels), for the tests:
   -DSEED000_BUG       nntrainer's SAME average-pooling backward (symjac seed 000): the backward
                       skips windows starting past L - k + low, where high belongs;
   -DDILATION_BUG      the backward forgets the dilation (contiguous windows);
   -DCHANNELS_LAST_BUG the backward steps one element from cell to cell, not `inner`;
   -DCEIL_DIVISOR_BUG  include_pad counts the ceil-mode overhang (the whole kernel);
   -DDIVISOR_BUG       the backward divides by the cell count, not an integer divisor override;
   -DLP_ZERO_BUG       lp's backward divides by y at a zero window (NaN, no zero_window rule);
   -DADAPTIVE_BUG      an adaptive window's end rounded down (floor, not ceil). */
#ifndef POOL_KERNELS_H
#define POOL_KERNELS_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

enum { POOL_MAX, POOL_AVG, POOL_LP };
enum { POOL_EXCLUDE_PAD = -1, POOL_INCLUDE_PAD = -2 }; /* divisor rules; an integer >= 1 is an override */

typedef struct {
    int mode, f32;                 /* POOL_MAX, POOL_AVG or POOL_LP; float (1) or double (0) arrays */
    int adaptive;                  /* adaptive windows (adaptive and global pooling) */
    int64_t outer, inner;          /* planes before the spatial axes; channels after them */
    int64_t in[3], out[3];         /* spatial sizes of input and output (D, H, W) */
    int64_t kernel[3], stride[3], dilation[3], low[3], high[3];
    int64_t divisor;               /* avg: POOL_EXCLUDE_PAD, POOL_INCLUDE_PAD or an integer >= 1 */
    int pad_zero;                  /* max: pad cells hold 0 and compete */
    int p;                         /* lp: the power, >= 1 */
    double zero_window;            /* lp: the derivative at a zero window */
} pool_nd;

typedef struct {
    int64_t start[3], step[3];     /* slot j of axis a is the cell start[a] + j * step[a] */
    int64_t first[3], last[3];     /* the slots j in [first, last) inside the padded input */
} pool_window;

static inline double pool_load(const void *a, int f32, int64_t i) {
    return f32 ? (double)((const float *)a)[i] : ((const double *)a)[i];
}

static inline void pool_store(void *a, int f32, int64_t i, double v) {
    if (f32) ((float *)a)[i] = (float)v;
    else ((double *)a)[i] = v;
}

static inline double pool_ipow(double v, int n) {
    double r = 1;
    while (n-- > 0) r *= v;
    return r;
}

static inline int64_t pool_floor_div(int64_t a, int64_t b) { /* b > 0 */
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* The window of output cell (o[0], o[1], o[2]). */
static inline void pool_window_of(const pool_nd *p, const int64_t o[3], pool_window *w) {
    int a;
    for (a = 0; a < 3; a++) {
        int64_t L = p->in[a];
        w->first[a] = 0;
        if (p->adaptive) {
            w->start[a] = o[a] * L / p->out[a];
#ifdef ADAPTIVE_BUG
            w->last[a] = (o[a] + 1) * L / p->out[a] - w->start[a];
#else
            w->last[a] = ((o[a] + 1) * L + p->out[a] - 1) / p->out[a] - w->start[a];
#endif
            w->step[a] = 1;
        } else {
            int64_t reach;
            w->start[a] = o[a] * p->stride[a] - p->low[a];
            w->step[a] = p->dilation[a];
            reach = pool_floor_div(L + p->high[a] - 1 - w->start[a], w->step[a]) + 1; /* slots before L + high */
            w->last[a] = reach < p->kernel[a] ? (reach < 0 ? 0 : reach) : p->kernel[a];
        }
    }
}

/* The 2-D NCHW case without dilation (planes of h x w maps, windows kh x kw at strides sh, sw, padding top,
   bottom, left, right): the pool_nd a caller that knows no rank or layout fills in one call. */
static inline pool_nd pool_nd_2d(int mode, int f32, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                                 int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t top, int64_t bottom,
                                 int64_t left, int64_t right, int64_t divisor) {
    pool_nd p;
    memset(&p, 0, sizeof p);
    p.mode = mode, p.f32 = f32, p.outer = planes, p.inner = 1, p.divisor = divisor, p.p = 1;
    p.in[0] = p.out[0] = p.kernel[0] = p.stride[0] = p.dilation[0] = p.dilation[1] = p.dilation[2] = 1;
    p.in[1] = h, p.in[2] = w, p.out[1] = oh, p.out[2] = ow, p.kernel[1] = kh, p.kernel[2] = kw;
    p.stride[1] = sh, p.stride[2] = sw, p.low[1] = top, p.high[1] = bottom, p.low[2] = left, p.high[2] = right;
    return p;
}

/* The spatial offset of slot (i, j, k) of a window, or -1 for a pad cell. */
static inline int64_t pool_cell(const pool_nd *p, const pool_window *w, int64_t i, int64_t j, int64_t k) {
    int64_t d = w->start[0] + i * w->step[0], h = w->start[1] + j * w->step[1], c = w->start[2] + k * w->step[2];
    if (d < 0 || d >= p->in[0] || h < 0 || h >= p->in[1] || c < 0 || c >= p->in[2]) return -1;
    return (d * p->in[1] + h) * p->in[2] + c;
}

/* avg: what the window's sum is divided by. */
static inline double pool_divisor(const pool_nd *p, const pool_window *w) {
    int64_t cells = 1, slots = 1, j;
    int a;
    if (p->divisor >= 1) return (double)p->divisor;
    for (a = 0; a < 3; a++) {
        int64_t inside = 0;
        for (j = w->first[a]; j < w->last[a]; j++) {
            int64_t at = w->start[a] + j * w->step[a];
            inside += at >= 0 && at < p->in[a];
        }
        cells *= inside;
#ifdef CEIL_DIVISOR_BUG
        slots *= p->adaptive ? w->last[a] - w->first[a] : p->kernel[a];
#else
        slots *= w->last[a] - w->first[a];
#endif
    }
    return (double)(p->divisor == POOL_INCLUDE_PAD ? slots : cells);
}

/* max: the first maximal slot's spatial offset (-1: a pad cell; -2: the window has no cell),
   its value in *value. x points at the plane, cells `step` elements apart. */
static inline int64_t pool_argmax(const pool_nd *p, const pool_window *w, const void *x, int64_t step, double *value) {
    int64_t i, j, k, best = -2;
    double top = -INFINITY;
    for (i = w->first[0]; i < w->last[0]; i++)
        for (j = w->first[1]; j < w->last[1]; j++)
            for (k = w->first[2]; k < w->last[2]; k++) {
                int64_t at = pool_cell(p, w, i, j, k);
                double v;
                if (at < 0 && !p->pad_zero) continue;
                v = at < 0 ? 0.0 : pool_load(x, p->f32, at * step);
                if (best == -2 || v > top || (v != v && top == top)) best = at, top = v;
            }
    *value = top;
    return best;
}

/* avg and lp: the window's value. */
static inline double pool_value(const pool_nd *p, const pool_window *w, const void *x, int64_t step) {
    int64_t i, j, k;
    double sum = 0, big = 0;
    int e = 0, finite = 1;
    if (p->mode == POOL_LP && p->p > 1) { /* the largest |x|, for the scale 2^e */
        for (i = w->first[0]; i < w->last[0]; i++)
            for (j = w->first[1]; j < w->last[1]; j++)
                for (k = w->first[2]; k < w->last[2]; k++) {
                    int64_t at = pool_cell(p, w, i, j, k);
                    double a = at < 0 ? 0.0 : fabs(pool_load(x, p->f32, at * step));
                    if (!(a <= DBL_MAX)) finite = 0; /* inf or NaN: IEEE's sum as it is */
                    else if (a > big) big = a;
                }
        if (finite && big > 0) frexp(big, &e);
    }
    for (i = w->first[0]; i < w->last[0]; i++)
        for (j = w->first[1]; j < w->last[1]; j++)
            for (k = w->first[2]; k < w->last[2]; k++) {
                int64_t at = pool_cell(p, w, i, j, k);
                double v;
                if (at < 0) continue;
                v = pool_load(x, p->f32, at * step);
                sum += p->mode == POOL_LP && p->p > 1 ? pool_ipow(ldexp(v, -e), p->p) : v;
            }
    if (p->mode == POOL_AVG) return sum / pool_divisor(p, w);
    if (p->p == 1) return sum;
    if (sum < 0) return NAN; /* odd p: the power sum is negative, outside lp's domain */
    return ldexp(p->p == 2 ? sqrt(sum) : p->p == 3 ? cbrt(sum) : pow(sum, 1.0 / p->p), e);
}

/* dy/dx at cell value v of a window of value y. */
static inline double pool_lp_slope(const pool_nd *p, double v, double y) {
    if (p->p == 1) return 1;
#ifndef LP_ZERO_BUG
    if (y == 0) return p->zero_window;
#endif
    return pool_ipow(v / y, p->p - 1);
}

/* The window of output cell n of a plane (row-major over D, H, W). */
static inline void pool_window_at(const pool_nd *p, int64_t n, pool_window *w) {
    int64_t o[3];
    o[0] = n / (p->out[1] * p->out[2]), o[1] = n / p->out[2] % p->out[1], o[2] = n % p->out[2];
    pool_window_of(p, o, w);
}

static inline void pool_forward(const pool_nd *p, const void *x, void *y) {
    int64_t plane, c, n, cells = p->in[0] * p->in[1] * p->in[2], outs = p->out[0] * p->out[1] * p->out[2];
    for (plane = 0; plane < p->outer; plane++)
        for (c = 0; c < p->inner; c++) {
            const void *xs = p->f32 ? (const void *)((const float *)x + (plane * cells * p->inner + c))
                                    : (const void *)((const double *)x + (plane * cells * p->inner + c));
            for (n = 0; n < outs; n++) {
                pool_window w;
                double v;
                pool_window_at(p, n, &w);
                if (p->mode == POOL_MAX) pool_argmax(p, &w, xs, p->inner, &v);
                else v = pool_value(p, &w, xs, p->inner);
                pool_store(y, p->f32, (plane * outs + n) * p->inner + c, v);
            }
        }
}

#ifdef SEED000_BUG
/* nntrainer: the backward's window loop runs while start <= L - k + low, where high belongs */
#define SEED000_SKIP(p, w) ((w).start[0] > (p)->in[0] - (p)->kernel[0] + (p)->low[0] ||                    \
                            (w).start[1] > (p)->in[1] - (p)->kernel[1] + (p)->low[1] ||                    \
                            (w).start[2] > (p)->in[2] - (p)->kernel[2] + (p)->low[2])
#else
#define SEED000_SKIP(p, w) 0
#endif

/* dx += dy * dy/dx of every window (dx zeroed first). */
static inline void pool_backward(const pool_nd *p, const void *x, const void *dy, void *dx) {
    int64_t plane, c, n, i, j, k, cells = p->in[0] * p->in[1] * p->in[2], outs = p->out[0] * p->out[1] * p->out[2];
    int64_t step = p->inner;
    pool_nd q = *p;
#ifdef DILATION_BUG
    q.dilation[0] = q.dilation[1] = q.dilation[2] = 1;
#endif
#ifdef CHANNELS_LAST_BUG
    step = 1;
#endif
    for (i = 0; i < p->outer * cells * p->inner; i++) pool_store(dx, p->f32, i, 0);
    for (plane = 0; plane < p->outer; plane++)
        for (c = 0; c < p->inner; c++) {
            int64_t base = plane * cells * p->inner + c;
            const void *xs = p->f32 ? (const void *)((const float *)x + base)
                                    : (const void *)((const double *)x + base);
            for (n = 0; n < outs; n++) {
                pool_window w;
                double g = pool_load(dy, p->f32, (plane * outs + n) * p->inner + c), y = 0;
                pool_window_at(&q, n, &w);
                if (p->mode == POOL_MAX) {
                    int64_t at = pool_argmax(&q, &w, xs, p->inner, &y);
                    if (at >= 0) pool_store(dx, p->f32, base + at * step, pool_load(dx, p->f32, base + at * step) + g);
                    continue;
                }
                if (p->mode == POOL_AVG) {
                    if (SEED000_SKIP(p, w)) continue;
#ifdef DIVISOR_BUG
                    q.divisor = p->divisor >= 1 ? POOL_EXCLUDE_PAD : p->divisor;
#endif
                    g /= pool_divisor(&q, &w);
                } else {
                    y = pool_value(&q, &w, xs, p->inner);
                }
                for (i = w.first[0]; i < w.last[0]; i++)
                    for (j = w.first[1]; j < w.last[1]; j++)
                        for (k = w.first[2]; k < w.last[2]; k++) {
                            int64_t at = pool_cell(&q, &w, i, j, k);
                            double slope = 1;
                            if (at < 0) continue;
                            if (p->mode == POOL_LP) slope = pool_lp_slope(p, pool_load(xs, p->f32, at * p->inner), y);
                            at = base + at * step;
                            pool_store(dx, p->f32, at, pool_load(dx, p->f32, at) + g * slope);
                        }
            }
        }
}

#endif /* POOL_KERNELS_H */
