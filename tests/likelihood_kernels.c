/* likelihood_kernels.c: nll, poisson_nll and gaussian_nll as a native kernel on symjac's protocol
   (tests/test_losses_nll.py compiles it; float32 and float64, computed in double, rounded once).

   cc -O2 -I contrib -o likelihood tests/likelihood_kernels.c -lm
   -DPLANT_WEIGHTS: nll ignores its class weights; -DPLANT_CLAMP: gaussian_nll clamps the variance
   from above (min(v, eps)); -DPLANT_SCALE: every derivative forgets the loss scale S. */
#include <math.h>
#include <stdlib.h>
#include "symjac_driver.h"

#define TWO_PI 6.283185307179586476925286766559

static double get(const symjac_array *a, int64_t i) {
    if (symjac_is(a->dtype, "float32")) return ((const float *)a->data)[i];
    if (symjac_is(a->dtype, "int64")) return (double)((const int64_t *)a->data)[i];
    return ((const double *)a->data)[i];
}

static void put(symjac_array *a, const char *dtype, int64_t i, double v) {
    if (symjac_is(dtype, "float32")) ((float *)a->data)[i] = (float)v;
    else ((double *)a->data)[i] = v;
}

/* Setting key's numbers ("3/4 2 1/4"), up to max; returns how many. */
static int numbers(const symjac_request *r, const char *key, double *out, int max) {
    static char text[SYMJAC_SETTINGS];
    const char *p = text;
    char *end;
    int n = 0;
    if (symjac_setting(r, key, text, sizeof text) < 0) return 0;
    while (n < max && *p) {
        out[n] = strtod(p, &end);
        if (end == p) break;
        if (*end == '/') out[n] /= strtod(end + 1, &end);
        n++;
        p = end;
        while (*p == ' ') p++;
    }
    return n;
}

/* Per element the loss and d/dpred of each of its `per` entries (unreduced, unscaled); the
   reduction's factor per element; returns the number of elements. */
static int64_t elements(symjac_request *r, const symjac_array *z, const symjac_array *y, int64_t per, double *ell,
                        double *h, double *weight_of) {
    int64_t n = z->count / per, i, c;
    /* an option at its default is not sent (docs/native.md): eps defaults to 1e-8 (poisson_nll)
       and 1e-6 (gaussian_nll), as symjac.Loss's and PyTorch's */
    double eps = symjac_setting_number(r, "eps", symjac_is(r->kind, "poisson_nll") ? 1e-8 : 1e-6), w[256];
    int nw = numbers(r, "weight", w, 256), full = (int)symjac_setting_number(r, "full", 0);
    int has_ignore = symjac_setting(r, "ignore_index", NULL, 0) >= 0;
    int64_t ignore = (int64_t)symjac_setting_number(r, "ignore_index", 0);
    for (i = 0; i < n; i++) {
        if (symjac_is(r->kind, "nll")) {
            int64_t k = (int64_t)get(y, i);
            double wk = nw == 0 ? 1.0 : w[nw == 1 ? 0 : k];
#ifdef PLANT_WEIGHTS
            wk = 1.0;
#endif
            for (c = 0; c < per; c++) h[i * per + c] = 0;
            if (has_ignore && k == ignore) { ell[i] = 0; weight_of[i] = 0; continue; }
            ell[i] = -wk * get(z, i * per + k);
            h[i * per + k] = -wk;
            weight_of[i] = wk;
        } else if (symjac_is(r->kind, "poisson_nll")) {
            double zi = get(z, i), yi = get(y, i);
            if (symjac_setting_number(r, "log_input", 1)) { ell[i] = exp(zi) - yi * zi; h[i] = exp(zi) - yi; }
            else { ell[i] = zi - yi * log(zi + eps); h[i] = 1 - yi / (zi + eps); }
            if (full && yi > 1) ell[i] += yi * log(yi) - yi + 0.5 * log(TWO_PI * yi);
            weight_of[i] = 1;
        } else {  /* gaussian_nll: pairs (mean, variance); label (target, 0) */
            double mu = get(z, 2 * i), v = get(z, 2 * i + 1), t = get(y, 2 * i);
#ifdef PLANT_CLAMP
            double m = v > eps ? eps : v;
#else
            double m = v < eps ? eps : v;  /* a NaN variance stays NaN */
#endif
            double d = mu - t, q = d / m;
            ell[i] = 0.5 * (log(m) + q * d) + (full ? 0.5 * log(TWO_PI) : 0);
            h[2 * i] = q;
            h[2 * i + 1] = v < eps ? 0 : 0.5 * (1 / m - q * q);
            weight_of[i] = 1;
        }
    }
    return n;
}

static int dispatch(symjac_request *r) {
    const symjac_array *z = symjac_input(r, "pred"), *y = symjac_input(r, "label"), *u = symjac_input(r, "upstream");
    int64_t per, n, i, c;
    double *ell, *h, *wt, den = 0, total = 0, scale = r->scale;
    if (!symjac_is(r->dtype, "float32") && !symjac_is(r->dtype, "float64"))
        return symjac_fail(r, "dtype %s is not implemented", r->dtype);
    if (z == NULL || y == NULL) return symjac_fail(r, "pred and label are required");
    if (symjac_is(r->kind, "nll")) per = z->shape[z->ndim - 1];
    else if (symjac_is(r->kind, "gaussian_nll")) per = 2;
    else if (symjac_is(r->kind, "poisson_nll")) per = 1;
    else return symjac_fail(r, "loss %s is not implemented", r->kind);
#ifdef PLANT_SCALE
    scale = 1;
#endif
    ell = malloc(sizeof(double) * (size_t)z->count);
    h = malloc(sizeof(double) * (size_t)z->count);
    wt = malloc(sizeof(double) * (size_t)z->count);
    n = elements(r, z, y, per, ell, h, wt);
    for (i = 0; i < n; i++) { den += wt[i]; total += ell[i]; }
    if (!symjac_is(r->kind, "nll")) den = (double)n;  /* nll's mean: Σ w[y] over the counted rows */
    if (symjac_is(r->op, "loss")) {
        if (symjac_is(r->reduction, "none")) for (i = 0; i < n; i++) put(&r->output, r->dtype, i, ell[i]);
        else put(&r->output, r->dtype, 0, symjac_is(r->reduction, "mean") ? total / den : total);
    } else {
        for (i = 0; i < n; i++) {
            double f = symjac_is(r->reduction, "none") ? get(u, i) : symjac_is(r->reduction, "mean") ? 1 / den : 1;
            for (c = 0; c < per; c++) put(&r->output, r->dtype, i * per + c, scale * f * h[i * per + c]);
        }
    }
    free(ell); free(h); free(wt);
    return 0;
}

SYMJAC_MAIN(dispatch)
