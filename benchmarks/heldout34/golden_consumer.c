/* golden_consumer.c: a float32 max-pooling layer (1-D or 2-D, NCL / NCHW, no dilation) tested
   on symjac golden data (`symjac golden --format bin`), as a C++ framework's test suite would
   run it: the layer is built from each case's index.json alone, run in float32 on the case's
   float32 input, and its y and dx compared with the golden arrays within their bounds; where dx
   fails on a case with tied windows, any valid tie policy is accepted
   (symjac_golden_tie_policy). Held-out corpus of issue 34 (benchmarks/heldout34.py).

   -DBUG_ASSIGN: the backward assigns each window's dy to its maximum (`=`) instead of adding
   it, so a cell that is the maximum of two overlapping windows keeps only the last one's.

   Usage: golden_consumer FOLDER...; prints one line per case ("ok" or what failed) and exits 0
   when every case passes, 1 otherwise, 2 when a case cannot be read. */
#include "symjac_golden.h"

typedef struct {
    long long planes, h, w, oh, ow, kh, kw, sh, sw, top, left;
} layer;

static int build(const char *folder, const symjac_golden_array *x, const symjac_golden_array *y, layer *g,
                 char *err, size_t errlen) {
    long long k[2], s[2], pads[4], rank[1];
    char mode[16];
    int n;
    if (symjac_golden_meta_string(folder, "operator.mode", mode, sizeof mode, err, errlen) ||
        symjac_golden_meta_ints(folder, "operator.rank", rank, 1, err, errlen) != 1)
        return 1;
    if (strcmp(mode, "max") != 0 || (rank[0] != 1 && rank[0] != 2)) {
        snprintf(err, errlen, "only 1-D/2-D max pooling");
        return 1;
    }
    n = (int)rank[0];
    if (symjac_golden_meta_ints(folder, "operator.kernel", k, 2, err, errlen) != n ||
        symjac_golden_meta_ints(folder, "operator.stride", s, 2, err, errlen) != n ||
        symjac_golden_meta_ints(folder, "operator.pads", pads, 4, err, errlen) != 2 * n)
        return 1;
    g->w = (long long)x->shape[x->ndim - 1], g->ow = (long long)y->shape[y->ndim - 1];
    g->h = n == 2 ? (long long)x->shape[x->ndim - 2] : 1, g->oh = n == 2 ? (long long)y->shape[y->ndim - 2] : 1;
    g->planes = (long long)x->count / (g->h * g->w);
    g->kh = n == 2 ? k[0] : 1, g->kw = k[n - 1], g->sh = n == 2 ? s[0] : 1, g->sw = s[n - 1];
    g->top = n == 2 ? pads[0] : 0, g->left = pads[2 * (n - 1)];
    return 0;
}

/* The flat index of the first maximum of window (i, j) of plane p (float32 comparisons). */
static long long argmax(const layer *g, const float *x, long long p, long long i, long long j) {
    long long a, c, best = -1;
    for (a = i * g->sh - g->top; a < i * g->sh - g->top + g->kh; a++)
        for (c = j * g->sw - g->left; c < j * g->sw - g->left + g->kw; c++) {
            long long at = (p * g->h + a) * g->w + c;
            if (a < 0 || a >= g->h || c < 0 || c >= g->w) continue;
            if (best < 0 || x[at] > x[best]) best = at;
        }
    return best;
}

static void run(const layer *g, const float *x, const float *dy, float *y, float *dx) {
    long long p, i, j, n = g->planes * g->h * g->w;
    for (i = 0; i < n; i++) dx[i] = 0.0f;
    for (p = 0; p < g->planes; p++)
        for (i = 0; i < g->oh; i++)
            for (j = 0; j < g->ow; j++) {
                long long o = (p * g->oh + i) * g->ow + j, m = argmax(g, x, p, i, j);
                y[o] = x[m];
#ifdef BUG_ASSIGN
                dx[m] = dy[o];
#else
                dx[m] += dy[o];
#endif
            }
}

static float *narrow(const symjac_golden_array *a) {
    float *out = (float *)malloc((a->count ? a->count : 1) * sizeof(float));
    size_t i;
    for (i = 0; out != NULL && i < a->count; i++) out[i] = (float)a->values[i];
    return out;
}

/* 0: the case passes, 1: it fails (printed), 2: it cannot be read. */
static int check_case(const char *folder) {
    symjac_golden_array x, dy, y, dx;
    char err[8192];
    layer g;
    float *xf, *dyf, *yf, *dxf;
    double *dxd;
    size_t bad_y, bad_dx, i;
    int status = 0;
    if (symjac_golden_load(folder, "x.float32", &x, err, sizeof err) ||
        symjac_golden_load(folder, "dy.float32", &dy, err, sizeof err) ||
        symjac_golden_load(folder, "y.float32", &y, err, sizeof err) ||
        symjac_golden_load(folder, "dx.float32", &dx, err, sizeof err) || build(folder, &x, &y, &g, err, sizeof err)) {
        printf("%s: cannot read: %s\n", folder, err);
        return 2;
    }
    xf = narrow(&x), dyf = narrow(&dy), yf = (float *)calloc(y.count + 1, sizeof(float));
    dxf = (float *)calloc(x.count + 1, sizeof(float)), dxd = (double *)calloc(x.count + 1, sizeof(double));
    run(&g, xf, dyf, yf, dxf);
    bad_y = symjac_golden_check_float(&y, yf, NULL);
    bad_dx = symjac_golden_check_float(&dx, dxf, NULL);
    if (bad_dx) {
        const char *policy;
        for (i = 0; i < x.count; i++) dxd[i] = dxf[i];
        policy = symjac_golden_tie_policy(folder, "float32", dxd, err, sizeof err);
        if (policy != NULL) bad_dx = 0;
    }
    if (bad_y || bad_dx) {
        printf("%s: FAIL%s%s (%zu of %zu y, %zu of %zu dx off)\n", folder, bad_y ? " y" : "", bad_dx ? " dx" : "",
               bad_y, y.count, bad_dx, dx.count);
        status = 1;
    } else {
        printf("%s: ok\n", folder);
    }
    free(xf), free(dyf), free(yf), free(dxf), free(dxd);
    symjac_golden_free(&x), symjac_golden_free(&dy), symjac_golden_free(&y), symjac_golden_free(&dx);
    return status;
}

int main(int argc, char **argv) {
    int i, worst = 0;
    for (i = 1; i < argc; i++) {
        int s = check_case(argv[i]);
        if (s > worst) worst = s;
    }
    return worst;
}
