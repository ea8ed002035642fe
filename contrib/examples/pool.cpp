/* pool.cpp: a C++ kernel for symjac: 2-D average and max pooling (NCHW, float and double) as
   templates that report what they cannot do by throwing, and the dispatch that connects them.

   c++ -std=c++11 -O2 -I contrib -o pool_cpp contrib/examples/pool.cpp          (symjac --exec / process route)
   c++ -std=c++11 -O2 -I contrib -shared -fPIC -DSYMJAC_SHARED -o libpool_cpp.so contrib/examples/pool.cpp   (ctypes)
   add -DVERBOSE for a log line on std::cout per request.

   Two rules for C++ (docs/native.md, "C++ kernels"):
   - no exception leaves the dispatch: one that does calls std::terminate, the program dies
     with SIGABRT (on the ctypes route it takes Python with it). The dispatch catches every
     exception and refuses the request with its what(), which reaches symjac's report;
   - stdout is free: symjac_serve moved the protocol off it before the first request, so a
     log line on std::cout (or a library's printf) goes to stderr, where symjac keeps it. */
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include "symjac_driver.h"

namespace {

struct Pool2d {
    int64_t planes, h, w, oh, ow, kh, kw, sh, sw, top, bottom, left, right;
    bool avg, include_pad;

    // The window of output (oi, oj): rows [a, b) and columns [c, d) inside the input; its divisor.
    int64_t window(int64_t oi, int64_t oj, int64_t &a, int64_t &b, int64_t &c, int64_t &d) const {
        const int64_t i = oi * sh - top, j = oj * sw - left;
        const int64_t pa = i < -top ? -top : i, pb = i + kh > h + bottom ? h + bottom : i + kh;
        const int64_t pc = j < -left ? -left : j, pd = j + kw > w + right ? w + right : j + kw;
        a = i < 0 ? 0 : i, b = i + kh > h ? h : i + kh;
        c = j < 0 ? 0 : j, d = j + kw > w ? w : j + kw;
        if (a >= b || c >= d) throw std::domain_error("a window lies wholly in the padding");
        return include_pad ? (pb - pa) * (pd - pc) : (b - a) * (d - c);
    }

    // Max: the first maximum of the window (a NaN above every number: it propagates).
    template <typename T>
    int64_t argmax(const T *x, int64_t n, int64_t oi, int64_t oj) const {
        int64_t a, b, c, d, best = -1;
        window(oi, oj, a, b, c, d);
        for (int64_t i = a; i < b; i++)
            for (int64_t j = c; j < d; j++) {
                const int64_t at = (n * h + i) * w + j;
                if (best < 0 || x[at] > x[best] || (x[at] != x[at] && x[best] == x[best])) best = at;
            }
        return best;
    }

    template <typename T>
    void forward(const T *x, T *y) const {
        for (int64_t n = 0; n < planes; n++)
            for (int64_t oi = 0; oi < oh; oi++)
                for (int64_t oj = 0; oj < ow; oj++) {
                    T &out = y[(n * oh + oi) * ow + oj];
                    if (!avg) {
                        out = x[argmax(x, n, oi, oj)];
                        continue;
                    }
                    int64_t a, b, c, d;
                    const int64_t count = window(oi, oj, a, b, c, d);
                    T sum = 0;
                    for (int64_t i = a; i < b; i++)
                        for (int64_t j = c; j < d; j++) sum += x[(n * h + i) * w + j];
                    out = sum / static_cast<T>(count);
                }
    }

    template <typename T>
    void backward(const T *x, const T *dy, T *dx) const {
        for (int64_t i = 0; i < planes * h * w; i++) dx[i] = 0;
        for (int64_t n = 0; n < planes; n++)
            for (int64_t oi = 0; oi < oh; oi++)
                for (int64_t oj = 0; oj < ow; oj++) {
                    const T g = dy[(n * oh + oi) * ow + oj];
                    if (!avg) {
                        dx[argmax(x, n, oi, oj)] += g;
                        continue;
                    }
                    int64_t a, b, c, d;
                    const T share = g / static_cast<T>(window(oi, oj, a, b, c, d));
                    for (int64_t i = a; i < b; i++)
                        for (int64_t j = c; j < d; j++) dx[(n * h + i) * w + j] += share;
                }
    }
};

// The request as a Pool2d; throws std::invalid_argument for what this kernel does not implement.
Pool2d geometry(const symjac_request &r, const symjac_array *x, const symjac_array *grid) {
    if (!symjac_is(r.operator_name, "pool") || r.rank != 2 || !symjac_is(r.layout, "channels_first"))
        throw std::invalid_argument("this kernel is 2-D NCHW pooling only");
    if (!symjac_is(r.mode, "avg") && !symjac_is(r.mode, "max"))
        throw std::invalid_argument(std::string("mode ") + r.mode + " is not implemented");
    if (r.dilation[0] != 1 || r.dilation[1] != 1 || symjac_setting(&r, "pad_value", NULL, 0) >= 0)
        throw std::invalid_argument("dilation and pad_value are not implemented");
    if (symjac_is(r.mode, "avg") && !symjac_is(r.divisor, "exclude_pad") && !symjac_is(r.divisor, "include_pad"))
        throw std::invalid_argument(std::string("divisor ") + r.divisor + " is not implemented");
    if (x == NULL || x->ndim < 2 || grid == NULL || grid->ndim != x->ndim)
        throw std::invalid_argument("x (and dy) must have H and W");
    Pool2d p;
    p.h = x->shape[x->ndim - 2], p.w = x->shape[x->ndim - 1];
    p.planes = p.h * p.w > 0 ? x->count / (p.h * p.w) : 0;
    p.oh = grid->shape[grid->ndim - 2], p.ow = grid->shape[grid->ndim - 1];
    p.kh = r.kernel[0], p.kw = r.kernel[1], p.sh = r.stride[0], p.sw = r.stride[1];
    p.top = r.pads[0][0], p.bottom = r.pads[0][1], p.left = r.pads[1][0], p.right = r.pads[1][1];
    p.avg = symjac_is(r.mode, "avg");
    p.include_pad = symjac_is(r.divisor, "include_pad");
    return p;
}

template <typename T>
void run(const symjac_request &r, const Pool2d &p, const symjac_array *x, const symjac_array *dy) {
    T *out = static_cast<T *>(r.output.data);
    if (dy == NULL) p.forward(static_cast<const T *>(x->data), out);
    else p.backward(static_cast<const T *>(x->data), static_cast<const T *>(dy->data), out);
}

}  // namespace

static int dispatch(symjac_request *r) {
    try {
        const symjac_array *x = symjac_input(r, "x"), *dy = symjac_input(r, "dy");
        const bool backward = symjac_is(r->op, "backward");
        if (!backward && !symjac_is(r->op, "forward")) throw std::invalid_argument("op is not forward or backward");
        if (backward && dy == NULL) throw std::invalid_argument("backward without dy");
        const Pool2d p = geometry(*r, x, backward ? dy : &r->output);
#ifdef VERBOSE
        char padding[64];
        symjac_setting(r, "padding", padding, sizeof padding);
        std::cout << "[pool.cpp] " << r->op << " " << r->mode << " " << r->dtype << " padding " << padding << std::endl;
#endif
        if (symjac_is(r->dtype, "float32")) run<float>(*r, p, x, backward ? dy : NULL);
        else if (symjac_is(r->dtype, "float64")) run<double>(*r, p, x, backward ? dy : NULL);
        else throw std::invalid_argument(std::string("dtype ") + r->dtype + " is not implemented");
        return 0;
    } catch (const std::exception &e) {  // std::bad_alloc included: refused, the program keeps serving
        return symjac_fail(r, "%s", e.what());
    } catch (...) {
        return symjac_fail(r, "an exception that is no std::exception");
    }
}

SYMJAC_MAIN(dispatch)
