/* golden_layer.c: a C test that builds its pooling layer from a golden case's index.json
   (symjac golden --format bin) and runs the contrib reference kernels against the golden arrays.
   usage: golden_layer FOLDER [float32|float64] [ties]   runs the kernels in that dtype (default
   float64) on the golden arrays of that dtype, prints "y: N bad, dx: M bad" and exits 0 when both
   are 0; with "ties", also the tie policy the kernel's dx follows (symjac_golden_tie_policy) */
#include <stdio.h>
#include <string.h>
#include "symjac_golden.h"
#include "pool_kernels.h"

int main(int argc, char **argv) {
    const char *folder = argc > 1 ? argv[1] : ".", *dtype = "float64";
    char err[512], type[32], mode[16], divisor[32], layout[32], name[64];
    int ties = 0, single;
    long long kernel[2], stride[2], dilation[2], pads[4], in[4], out[4];
    int n_in, n_out, i;
    symjac_golden_array x, dy, y, dx;
    double *got_y, *got_dx;
    size_t bad_y, bad_dx, first = 0;
    long long planes;
    pool_nd p;
    for (i = 2; i < argc; i++) {
        if (strcmp(argv[i], "ties") == 0) ties = 1;
        else if (strcmp(argv[i], "float32") == 0 || strcmp(argv[i], "float64") == 0) dtype = argv[i];
        else {
            fprintf(stderr, "usage: %s FOLDER [float32|float64] [ties]\n", argv[0]);
            return 2;
        }
    }
    single = strcmp(dtype, "float32") == 0;
    if (symjac_golden_meta_string(folder, "operator.operator", type, sizeof type, err, sizeof err) ||
        symjac_golden_meta_string(folder, "operator.mode", mode, sizeof mode, err, sizeof err) ||
        symjac_golden_meta_string(folder, "operator.layout", layout, sizeof layout, err, sizeof err) ||
        symjac_golden_meta_ints(folder, "operator.kernel", kernel, 2, err, sizeof err) != 2 ||
        symjac_golden_meta_ints(folder, "operator.stride", stride, 2, err, sizeof err) != 2 ||
        symjac_golden_meta_ints(folder, "operator.dilation", dilation, 2, err, sizeof err) != 2 ||
        symjac_golden_meta_ints(folder, "operator.pads", pads, 4, err, sizeof err) != 4 ||
        (n_in = symjac_golden_meta_ints(folder, "input_shape", in, 4, err, sizeof err)) < 2 || n_in > 4 ||
        (n_out = symjac_golden_meta_ints(folder, "output_shape", out, 4, err, sizeof err)) != n_in) {
        fprintf(stderr, "%s: not a 2-D NCHW pool case: %s\n", folder, err);
        return 2;
    }
    if (symjac_golden_meta_string(folder, "operator.divisor", divisor, sizeof divisor, err, sizeof err))
        strcpy(divisor, "integer");
    if (strcmp(type, "pool") || strcmp(layout, "channels_first") || dilation[0] != 1 || dilation[1] != 1 ||
        (strcmp(mode, "max") && strcmp(mode, "avg")) || (strcmp(divisor, "exclude_pad") && strcmp(divisor, "include_pad"))) {
        fprintf(stderr, "%s: the reference kernels do not compute %s %s (divisor %s, layout %s)\n", folder, type, mode,
                divisor, layout);
        return 2;
    }
    /* (N, C,) H, W: every leading dimension is a batch of planes */
    for (planes = 1, i = 0; i < n_in - 2; i++) planes *= in[i];
    p = pool_nd_2d(mode[0] == 'a' ? POOL_AVG : POOL_MAX, single, planes, in[n_in - 2], in[n_in - 1], out[n_in - 2],
                   out[n_in - 1], kernel[0], kernel[1], stride[0], stride[1], pads[0], pads[1], pads[2], pads[3],
                   strcmp(divisor, "include_pad") == 0 ? POOL_INCLUDE_PAD : POOL_EXCLUDE_PAD);
    if ((snprintf(name, sizeof name, "x.%s", dtype), symjac_golden_load(folder, name, &x, err, sizeof err)) ||
        (snprintf(name, sizeof name, "dy.%s", dtype), symjac_golden_load(folder, name, &dy, err, sizeof err)) ||
        (snprintf(name, sizeof name, "y.%s", dtype), symjac_golden_load(folder, name, &y, err, sizeof err)) ||
        (snprintf(name, sizeof name, "dx.%s", dtype), symjac_golden_load(folder, name, &dx, err, sizeof err))) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    got_y = (double *)malloc(y.count * sizeof(double) + 1);
    got_dx = (double *)malloc(dx.count * sizeof(double) + 1);
    if (single) { /* the float kernels on the float32 arrays (exact as floats), results widened exactly */
        size_t k;
        float *xf = (float *)malloc(x.count * sizeof(float) + 1), *dyf = (float *)malloc(dy.count * sizeof(float) + 1);
        float *yf = (float *)malloc(y.count * sizeof(float) + 1), *dxf = (float *)malloc(dx.count * sizeof(float) + 1);
        for (k = 0; k < x.count; k++) xf[k] = (float)x.values[k];
        for (k = 0; k < dy.count; k++) dyf[k] = (float)dy.values[k];
        pool_forward(&p, xf, yf);
        pool_backward(&p, xf, dyf, dxf);
        for (k = 0; k < y.count; k++) got_y[k] = yf[k];
        for (k = 0; k < dx.count; k++) got_dx[k] = dxf[k];
        free(xf), free(dyf), free(yf), free(dxf);
    } else {
        pool_forward(&p, x.values, got_y);
        pool_backward(&p, x.values, dy.values, got_dx);
    }
    bad_y = symjac_golden_check(&y, got_y, &first);
    bad_dx = symjac_golden_check(&dx, got_dx, &first);
    printf("y: %lu bad, dx: %lu bad\n", (unsigned long)bad_y, (unsigned long)bad_dx);
    if (ties) { /* say which valid tie policy the kernel's dx follows */
        const char *policy = symjac_golden_tie_policy(folder, dtype, got_dx, err, sizeof err);
        printf("tie policy: %s\n", policy ? policy : err);
    }
    return bad_y || bad_dx;
}
