/* loss_kernels.h: reference mse and sigmoid cross-entropy (from logits) with a loss scale S.

   Plain C99 (and libm), no symjac in it. Values are computed in double and rounded once
   to the caller's type. Per element, with z the prediction, y the label:
     mse:        l = (z - y)^2,                          dl/dz = 2 (z - y)
     sigmoid_ce: l = max(z, 0) - z y + log(1 + e^-|z|),  dl/dz = sigmoid(z) - y
   reduction "mean" divides the sum by n, "sum" does not, "none" keeps every l_i (and the
   derivative is then the VJP with the upstream u: u_i dl_i/dz_i). The derivative emitted is
   S dL/dz (the loss scale enters only the derivative).

   -DSEED003_BUG plants nntrainer's missing loss scale (symjac seed 003): sigmoid_ce's
   derivative forgets S; mse applies it, as in nntrainer. */
#ifndef LOSS_KERNELS_H
#define LOSS_KERNELS_H

#include <math.h>
#include <stdint.h>

enum { LOSS_MSE, LOSS_SIGMOID_CE };
enum { REDUCE_MEAN, REDUCE_SUM, REDUCE_NONE };

static inline double loss_element(int kind, double z, double y) {
    double d = z - y;
    if (kind == LOSS_MSE) return d * d;
    return (z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z)));
}

static inline double loss_slope(int kind, double z, double y) {
    if (kind == LOSS_MSE) return 2 * (z - y);
    return (z >= 0 ? 1 / (1 + exp(-z)) : exp(z) / (1 + exp(z))) - y;
}

#ifdef SEED003_BUG
#define SEED003_SCALE(kind, s) ((kind) == LOSS_SIGMOID_CE ? 1.0 : (s)) /* nntrainer: only mse applies S */
#else
#define SEED003_SCALE(kind, s) (s)
#endif

#define LOSS_KERNELS(T, SUFFIX)                                                                    \
    /* value: one number (mean, sum) or n numbers (none) */                                       \
    static inline void loss_value_##SUFFIX(int kind, int reduce, int64_t n, const T *z, const T *y, T *out) { \
        double sum = 0;                                                                           \
        int64_t i;                                                                                \
        for (i = 0; i < n; i++) {                                                                 \
            double l = loss_element(kind, (double)z[i], (double)y[i]);                            \
            if (reduce == REDUCE_NONE) out[i] = (T)l;                                             \
            sum += l;                                                                             \
        }                                                                                         \
        if (reduce != REDUCE_NONE) out[0] = (T)(reduce == REDUCE_MEAN ? sum / (double)n : sum);   \
    }                                                                                             \
    static inline void loss_derivative_##SUFFIX(int kind, int reduce, double scale, int64_t n, const T *z, \
                                                const T *y, const T *u, T *dz) {                  \
        double s = SEED003_SCALE(kind, scale) / (reduce == REDUCE_MEAN ? (double)n : 1.0);        \
        int64_t i;                                                                                \
        for (i = 0; i < n; i++)                                                                   \
            dz[i] = (T)(s * (u ? (double)u[i] : 1.0) * loss_slope(kind, (double)z[i], (double)y[i])); \
    }

LOSS_KERNELS(float, f32)
LOSS_KERNELS(double, f64)

#endif /* LOSS_KERNELS_H */
