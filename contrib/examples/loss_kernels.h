/* loss_kernels.h: reference mse, sigmoid cross-entropy and softmax cross-entropy (from logits),
   with a loss scale S, in float and double.

   Plain C99 (and libm), no symjac in it. Values are computed in double and rounded once to
   the caller's type. Loss elements, with z the prediction, y the label:
     mse:        every entry, l = (z - y)^2, dl/dz = 2 (z - y)
     sigmoid_ce: every entry (PyTorch's binary_cross_entropy_with_logits), with w = weight and
                 p = pos_weight of the entry's class (the last axis; one number: every class):
                 l = w [p y softplus(-z) + (1 - y) softplus(z)],
                 dl/dz = w [(1 - y) sigmoid(z) - p y sigmoid(-z)]
     softmax_ce: every row of the last axis, C classes (PyTorch's cross_entropy): with t the
                 label row (probabilities), or the one-hot row of a class index (indices),
                 e = label_smoothing and w the class weights,
                 a_c = ((1 - e) t_c + e / C) w_c,  l = sum_c a_c (logsumexp(z) - z_c),
                 dl/dz_j = (sum_c a_c) softmax(z)_j - a_j;
                 a row labelled ignore_index is 0, value and derivative.
   Reductions: "sum" adds the elements, "mean" divides the sum by their number n (softmax_ce
   with class indices: by the sum of w[y_i] over the rows not ignored, their number without
   weights, as PyTorch), "batch_mean" by the elements' first dimension, "none" keeps every
   element (the derivative is then the VJP with the upstream u: sum_i u_i dl_i/dz). The
   derivative emitted is S dL/dz (the loss scale enters only the derivative).

   Planted defects, for the tests:
   -DSEED003_BUG       nntrainer's missing loss scale (symjac seed 003): sigmoid_ce's derivative
                       forgets S; mse applies it, as in nntrainer;
   -DBATCH_MEAN_BUG    batch_mean divides by every element, as mean does;
   -DPOS_WEIGHT_BUG    sigmoid_ce's derivative forgets pos_weight (its value keeps it);
   -DIGNORE_INDEX_BUG  softmax_ce's mean counts the ignored rows in its divisor. */
#ifndef LOSS_KERNELS_H
#define LOSS_KERNELS_H

#include <math.h>
#include <stdint.h>

enum { LOSS_MSE, LOSS_SIGMOID_CE, LOSS_SOFTMAX_CE };
enum { REDUCE_MEAN, REDUCE_BATCH_MEAN, REDUCE_SUM, REDUCE_NONE };

typedef struct {
    int kind, reduce, f32;          /* LOSS_*, REDUCE_*; float (1) or double (0) arrays */
    int64_t count;                  /* entries of pred */
    int64_t classes;                /* the last axis of pred (1 for a 0-D pred) */
    int64_t batch;                  /* batch_mean's divisor: the elements' first dimension */
    double scale;                   /* S */
    const double *weight;           /* n_weight class weights (sigmoid_ce: 1 or C of them), or NULL */
    const double *pos_weight;       /* sigmoid_ce: 1 or C positive weights, or NULL */
    int n_weight, n_pos_weight;
    double smoothing;               /* softmax_ce: label_smoothing */
    int indices;                    /* softmax_ce: the label holds int64 class indices, one per row */
    int ignore;                     /* softmax_ce with indices: ignore_index is set */
    int64_t ignore_index;
} loss_spec;

static inline double loss_load(const void *a, int f32, int64_t i) {
    return f32 ? (double)((const float *)a)[i] : ((const double *)a)[i];
}

static inline void loss_store(void *a, int f32, int64_t i, double v) {
    if (f32) ((float *)a)[i] = (float)v;
    else ((double *)a)[i] = v;
}

static inline double loss_softplus(double z) { return (z > 0 ? z : 0) + log1p(exp(-fabs(z))); }

static inline double loss_sigmoid(double z) { return z >= 0 ? 1 / (1 + exp(-z)) : exp(z) / (1 + exp(z)); }

static inline double loss_class_weight(const double *w, int n, int64_t c) { return w == NULL ? 1 : w[n == 1 ? 0 : c]; }

/* The number of loss elements: entries, or rows for softmax_ce. */
static inline int64_t loss_elements(const loss_spec *s) {
    return s->kind == LOSS_SOFTMAX_CE ? s->count / s->classes : s->count;
}

/* The class-weighted, smoothed target a_k of class k in softmax_ce's row i. */
static inline double loss_target(const loss_spec *s, const void *y, int64_t i, int64_t k) {
    double t = s->indices ? (double)(((const int64_t *)y)[i] == k) : loss_load(y, s->f32, i * s->classes + k);
    return ((1 - s->smoothing) * t + s->smoothing / (double)s->classes) * loss_class_weight(s->weight, s->n_weight, k);
}

/* Element i's value; with dz != NULL, its derivative times `scale` written into dz (its entry or row). */
static inline double loss_element(const loss_spec *s, int64_t i, const void *z, const void *y, double scale, void *dz) {
    int64_t c = i % s->classes, k, row = i * s->classes;
    double zi, yi, w, p, a_sum = 0, big = -INFINITY, sum = 0, l = 0;
    if (s->kind != LOSS_SOFTMAX_CE) {
        zi = loss_load(z, s->f32, i), yi = loss_load(y, s->f32, i);
        if (s->kind == LOSS_MSE) {
            if (dz) loss_store(dz, s->f32, i, scale * 2 * (zi - yi));
            return (zi - yi) * (zi - yi);
        }
        w = loss_class_weight(s->weight, s->n_weight, c), p = loss_class_weight(s->pos_weight, s->n_pos_weight, c);
#ifdef POS_WEIGHT_BUG
        if (dz) loss_store(dz, s->f32, i, scale * w * ((1 - yi) * loss_sigmoid(zi) - yi * loss_sigmoid(-zi)));
#else
        if (dz) loss_store(dz, s->f32, i, scale * w * ((1 - yi) * loss_sigmoid(zi) - p * yi * loss_sigmoid(-zi)));
#endif
        return w * (p * yi * loss_softplus(-zi) + (1 - yi) * loss_softplus(zi));
    }
    if (s->indices && s->ignore && ((const int64_t *)y)[i] == s->ignore_index) {
        for (k = 0; dz && k < s->classes; k++) loss_store(dz, s->f32, row + k, 0);
        return 0;
    }
    for (k = 0; k < s->classes; k++) { /* logsumexp, shifted by the row's largest logit */
        double v = loss_load(z, s->f32, row + k);
        if (v > big) big = v;
    }
    for (k = 0; k < s->classes; k++) sum += exp(loss_load(z, s->f32, row + k) - big);
    for (k = 0; k < s->classes; k++) {
        double a = loss_target(s, y, i, k);
        a_sum += a;
        l += a * (big - loss_load(z, s->f32, row + k) + log(sum));
    }
    for (k = 0; dz && k < s->classes; k++) {
        double softmax = exp(loss_load(z, s->f32, row + k) - big) / sum;
        loss_store(dz, s->f32, row + k, scale * (a_sum * softmax - loss_target(s, y, i, k)));
    }
    return l;
}

/* What "mean" and "batch_mean" divide by; 1 for "sum" and "none". */
static inline double loss_divisor(const loss_spec *s, const void *y) {
    int64_t i, n = loss_elements(s);
    double d = 0;
#ifdef BATCH_MEAN_BUG
    if (s->reduce == REDUCE_BATCH_MEAN) return (double)n;
#else
    if (s->reduce == REDUCE_BATCH_MEAN) return (double)s->batch;
#endif
    if (s->reduce != REDUCE_MEAN) return 1;
    if (s->kind != LOSS_SOFTMAX_CE || !s->indices) return (double)n;
    for (i = 0; i < n; i++) { /* class indices: the weights of the rows' labels, ignored rows left out */
        int64_t label = ((const int64_t *)y)[i];
#ifndef IGNORE_INDEX_BUG
        if (s->ignore && label == s->ignore_index) continue;
#endif
        d += s->weight == NULL || (s->ignore && label == s->ignore_index) ? 1 : s->weight[label];
    }
    return d;
}

/* A class index outside [0, C) that is not ignore_index: the first such row, or -1. */
static inline int64_t loss_bad_label(const loss_spec *s, const void *y) {
    int64_t i, n = loss_elements(s);
    for (i = 0; s->kind == LOSS_SOFTMAX_CE && s->indices && i < n; i++) {
        int64_t label = ((const int64_t *)y)[i];
        if ((label < 0 || label >= s->classes) && !(s->ignore && label == s->ignore_index)) return i;
    }
    return -1;
}

/* The loss value: one number, or one per element (reduction none). */
static inline void loss_value(const loss_spec *s, const void *z, const void *y, void *out) {
    int64_t i, n = loss_elements(s);
    double sum = 0;
    for (i = 0; i < n; i++) {
        double l = loss_element(s, i, z, y, 0, NULL);
        if (s->reduce == REDUCE_NONE) loss_store(out, s->f32, i, l);
        sum += l;
    }
    if (s->reduce != REDUCE_NONE) loss_store(out, s->f32, 0, sum / loss_divisor(s, y));
}

#ifdef SEED003_BUG
#define SEED003_SCALE(s) ((s)->kind == LOSS_SIGMOID_CE ? 1.0 : (s)->scale) /* nntrainer: only mse applies S */
#else
#define SEED003_SCALE(s) ((s)->scale)
#endif

/* S dL/dz, pred's shape; u: the upstream gradient, one per element (reduction none), else NULL. */
static inline void loss_derivative(const loss_spec *s, const void *z, const void *y, const void *u, void *dz) {
    int64_t i, n = loss_elements(s);
    double scale = SEED003_SCALE(s) / loss_divisor(s, y);
    for (i = 0; i < n; i++) loss_element(s, i, z, y, u ? scale * loss_load(u, s->f32, i) : scale, dz);
}

#endif /* LOSS_KERNELS_H */
