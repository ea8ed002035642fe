/* symjac_driver.h: let symjac verify a C or C++ pooling or loss kernel, with no Python glue.

   One header, C99 (or C++11), the C standard library only (and on POSIX systems <unistd.h>'s
   dup, dup2 and write). The kernel author writes ONE function, the dispatch, that reads a
   request and calls their kernels:

       #include "symjac_driver.h"

       static int dispatch(symjac_request *r) {
           const symjac_array *x = symjac_input(r, "x");
           if (!symjac_is(r->op, "forward")) return symjac_fail(r, "only the forward here");
           ...  my_pool_forward(x->data, r->output.data, x->shape, r->kernel, r->pads, ...);
           return 0;
       }
       SYMJAC_MAIN(dispatch)

   Built as a program (`cc -o mykernel mykernel.c`), SYMJAC_MAIN is main(): it answers
   symjac's requests on stdin/stdout (`symjac.frameworks.process`, docs/native.md) until
   stdin ends. Built as a shared library (`cc -shared -fPIC -DSYMJAC_SHARED -o libmykernel.so
   mykernel.c`), it exports symjac_call(symjac_request *) and symjac_abi() for
   `symjac.frameworks.ctypes` instead. The same dispatch serves both routes.

   Rules for the dispatch: write the result into r->output.data (allocated for
   r->output_capacity elements of r->output.dtype; r->output's shape is the one symjac
   expects, which the kernel may change within the capacity); write every element of it,
   and nothing past it: the output starts filled with a signalling NaN and every buffer
   sits between guard regions, checked after the call (a kernel that accumulates into its
   output calls symjac_zero_output(r) first, as its framework zeroes it); return 0, or
   symjac_fail(r, "why", ...) for a request the kernel cannot serve. In C++, let no exception
   leave the dispatch: catch it and return symjac_fail(r, "%s", e.what()) (uncaught, it aborts
   the program, or on the ctypes route Python). Inputs may be written to: symjac is told, and
   reports it. Printing to stdout is harmless: symjac_serve moves the protocol to a descriptor
   of its own first and points stdout at stderr (POSIX; docs/native.md, "stdout and the protocol").

   The wire format (docs/native.md): ASCII header lines, an empty line, then the arrays as
   raw little-endian C-order bytes (the golden `bin` layout). */
#ifndef SYMJAC_DRIVER_H
#define SYMJAC_DRIVER_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__unix__) || defined(__unix) || defined(__APPLE__) /* POSIX: the protocol moves off fd 1 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#define SYMJAC__POSIX 1
#else
#define SYMJAC__POSIX 0
#endif

#if defined(__GLIBC__) /* the request's perturb line sets the byte glibc's allocator fills with */
#include <malloc.h>
#define SYMJAC__PERTURB(byte) ((void)mallopt(M_PERTURB, (byte)))
#else
#define SYMJAC__PERTURB(byte) ((void)(byte))
#endif

#define SYMJAC_PROTOCOL 1
#define SYMJAC_MAX_DIMS 8
#define SYMJAC_MAX_INPUTS 4
#define SYMJAC_MAX_RANK 3
#define SYMJAC_NAME 32
#define SYMJAC_SETTINGS 16384
#define SYMJAC_MESSAGE 1024
#define SYMJAC_GUARD 4096 /* bytes of poison before and after every buffer, checked after each call */

typedef struct {
    char name[SYMJAC_NAME];   /* "x", "dy", "pred", "label", "upstream"; output: "y", "dx", "value", "dpred" */
    char dtype[SYMJAC_NAME];  /* NumPy's name: "float16", "bfloat16", "float32", "float64", "int64", ... */
    int32_t ndim;             /* 0 for one number */
    int32_t itemsize;         /* bytes per element */
    int64_t shape[SYMJAC_MAX_DIMS];
    int64_t count;            /* number of elements */
    void *data;               /* C order, host byte order */
} symjac_array;

typedef struct {
    int64_t id;                          /* the request's number (echoed by the driver) */
    char op[SYMJAC_NAME];                /* "forward", "backward" (pools); "loss", "derivative" (losses) */
    char settings[SYMJAC_SETTINGS];      /* the operator's settings, "key value\n" lines (docs/native.md) */
    int32_t n_inputs;
    symjac_array inputs[SYMJAC_MAX_INPUTS];
    symjac_array output;
    int64_t output_capacity;             /* elements allocated at output.data */
    char message[SYMJAC_MESSAGE];        /* symjac_fail's text */
    /* Parsed from settings before the dispatch is called (0 / "" where a setting is absent). */
    char operator_name[SYMJAC_NAME];     /* "pool", "adaptive_pool", "global_pool", "loss" */
    char dtype[SYMJAC_NAME];             /* the first input's dtype */
    char mode[SYMJAC_NAME];              /* pools: "max", "avg", "lp" */
    char layout[SYMJAC_NAME];            /* "channels_first" (N, C, spatial...) or "channels_last" */
    char divisor[SYMJAC_NAME];           /* "exclude_pad", "include_pad", or an integer (divisor_override) */
    int32_t rank;                        /* spatial dimensions */
    int32_t ceil_mode;
    int64_t kernel[SYMJAC_MAX_RANK], stride[SYMJAC_MAX_RANK], dilation[SYMJAC_MAX_RANK];
    int64_t pads[SYMJAC_MAX_RANK][2];    /* resolved (low, high) per spatial axis */
    int64_t output_size[SYMJAC_MAX_RANK];/* adaptive pools */
    char kind[SYMJAC_NAME];              /* losses: "mse", "sigmoid_ce", ... */
    char reduction[SYMJAC_NAME];         /* "mean", "batch_mean", "sum", "none" */
    double scale;                        /* the loss scale S (exactly: the setting "scale", "p" or "p/q") */
} symjac_request;

#define SYMJAC_ABI ((int64_t)SYMJAC_PROTOCOL << 32 | (int64_t)sizeof(symjac_request))

typedef int (*symjac_dispatch_fn)(symjac_request *r);

/* ---------------------------------------------------------------- for the dispatch */

static inline int symjac_is(const char *a, const char *b) { return strcmp(a, b) == 0; }

/* Zero the output (as many elements as symjac expects), as a framework that hands its kernel a
   zeroed buffer does. The output starts filled with poison (docs/native.md): a kernel that
   accumulates into it (`+=`) calls this first. */
static inline void symjac_zero_output(symjac_request *r) {
    memset(r->output.data, 0, (size_t)(r->output.count * r->output.itemsize));
}

/* The input called name, or NULL (label is absent for losses without one, upstream unless reduction "none"). */
static inline const symjac_array *symjac_input(const symjac_request *r, const char *name) {
    int i;
    for (i = 0; i < r->n_inputs; i++)
        if (symjac_is(r->inputs[i].name, name)) return &r->inputs[i];
    return NULL;
}

/* Refuse a request: the message reaches symjac's report. Returns 1 (return it from the dispatch). */
static inline int symjac_fail(symjac_request *r, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(r->message, sizeof r->message, format, args);
    va_end(args);
    return 1;
}

/* Where the value of setting key starts in r->settings (it runs to the '\n' ending its line), or NULL. */
static inline const char *symjac__setting_at(const symjac_request *r, const char *key) {
    size_t n = strlen(key);
    const char *p = r->settings;
    while (*p) {
        if (strncmp(p, key, n) == 0 && p[n] == ' ') return p + n + 1;
        p = strchr(p, '\n');
        if (p == NULL) break;
        p++;
    }
    return NULL;
}

/* The text of setting key, up to the end of its line, as snprintf gives it: copied into out
   (at most size - 1 characters and a '\0'; out may be NULL when size is 0). Returns the text's
   length (size or more: it was cut), or -1 when the request has no such setting, e.g.

       char kind[32];
       if (symjac_setting(r, "kind", kind, sizeof kind) < 0) ...     absent
       if (symjac_setting(r, "weight", NULL, 0) >= 0) ...            present */
static inline int symjac_setting(const symjac_request *r, const char *key, char *out, size_t size) {
    const char *p = symjac__setting_at(r, key);
    size_t n = 0;
    if (p == NULL) {
        if (size) out[0] = '\0';
        return -1;
    }
    while (p[n] != '\0' && p[n] != '\n') n++;
    if (size) {
        size_t k = n < size - 1 ? n : size - 1;
        memcpy(out, p, k);
        out[k] = '\0';
    }
    return (int)n;
}

/* Setting key as a number ("2", "0.25", "1/3" exactly as p/q), or fallback when absent. */
static inline double symjac_setting_number(const symjac_request *r, const char *key, double fallback) {
    const char *p = symjac__setting_at(r, key);
    char *end;
    double value;
    if (p == NULL) return fallback;
    value = strtod(p, &end);
    if (*end == '/') value /= strtod(end + 1, NULL);
    return value;
}

/* Up to max numbers of setting key (a list: "0 1 7/2 -5/2 2") into out, each as
   symjac_setting_number reads one (p/q as p divided by q: the double nearest p/q where p and q
   are exact in a double); returns how many were read. A RoI operator's boxes, a loss's weights. */
static inline int symjac_setting_numbers(const symjac_request *r, const char *key, double *out, int max) {
    const char *p = symjac__setting_at(r, key);
    int n = 0;
    while (p != NULL && n < max && *p != '\n' && *p != '\0') {
        char *end;
        double v = strtod(p, &end);
        if (end == p) break;
        if (*end == '/') {
            const char *q = end + 1;
            v /= strtod(q, &end);
            if (end == q) break;
        }
        out[n++] = v;
        p = end;
    }
    return n;
}

/* Up to max integers of setting key into out; returns how many were read. */
static inline int symjac_setting_ints(const symjac_request *r, const char *key, int64_t *out, int max) {
    const char *p = symjac__setting_at(r, key);
    int n = 0;
    while (p != NULL && n < max && *p != '\n' && *p != '\0') {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p) break;
        out[n++] = (int64_t)v;
        p = end;
    }
    return n;
}

/* ---------------------------------------------------------------- the driver */

static inline int symjac__itemsize(const char *dtype) {
    static const char *const names[] = {"float16", "bfloat16", "float32", "float64", "int64", "int32", "int8",
                                        "uint8", "bool", NULL};
    static const int sizes[] = {2, 2, 4, 8, 8, 4, 1, 1, 1};
    int i;
    for (i = 0; names[i] != NULL; i++)
        if (symjac_is(dtype, names[i])) return sizes[i];
    return 0;
}

static inline void symjac__word(const char *p, char *out) {
    size_t i = 0;
    while (p != NULL && p[i] != '\0' && p[i] != '\n' && p[i] != ' ' && i + 1 < SYMJAC_NAME) {
        out[i] = p[i];
        i++;
    }
    out[i] = '\0';
}

/* Fill the parsed fields of r from r->settings and r->inputs (both routes call this). */
static inline void symjac_parse_settings(symjac_request *r) {
    int64_t pads[2 * SYMJAC_MAX_RANK] = {0}, v = 0;
    int i, n;
    symjac__word(symjac__setting_at(r, "operator"), r->operator_name);
    symjac__word(r->n_inputs ? r->inputs[0].dtype : "", r->dtype);
    symjac__word(symjac__setting_at(r, "mode"), r->mode);
    symjac__word(symjac__setting_at(r, "layout"), r->layout);
    symjac__word(symjac__setting_at(r, "divisor"), r->divisor);
    symjac__word(symjac__setting_at(r, "kind"), r->kind);
    symjac__word(symjac__setting_at(r, "reduction"), r->reduction);
    r->rank = symjac_setting_ints(r, "rank", &v, 1) ? (int32_t)v : 0;
    r->ceil_mode = symjac_setting_ints(r, "ceil_mode", &v, 1) ? (int32_t)v : 0;
    symjac_setting_ints(r, "kernel", r->kernel, SYMJAC_MAX_RANK);
    symjac_setting_ints(r, "stride", r->stride, SYMJAC_MAX_RANK);
    symjac_setting_ints(r, "dilation", r->dilation, SYMJAC_MAX_RANK);
    symjac_setting_ints(r, "output_size", r->output_size, SYMJAC_MAX_RANK);
    n = symjac_setting_ints(r, "pads", pads, 2 * SYMJAC_MAX_RANK);
    for (i = 0; 2 * i + 1 < n; i++) {
        r->pads[i][0] = pads[2 * i];
        r->pads[i][1] = pads[2 * i + 1];
    }
    r->scale = symjac_setting_number(r, "scale", 1.0);
}

/* Route of a shared library: symjac.frameworks.ctypes fills op, settings, inputs and output. */
static inline int symjac_call_dispatch(symjac_dispatch_fn dispatch, symjac_request *r) {
    r->message[0] = '\0';
    symjac_parse_settings(r);
    return dispatch(r);
}

static inline int symjac__little_endian(void) {
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

/* The wire is little-endian: swap each element in place on a big-endian host. */
static inline void symjac__to_host(void *data, int64_t count, int itemsize) {
    unsigned char *p = (unsigned char *)data, t;
    int64_t i;
    int k;
    if (symjac__little_endian() || itemsize == 1) return;
    for (i = 0; i < count; i++, p += itemsize)
        for (k = 0; k < itemsize / 2; k++) {
            t = p[k];
            p[k] = p[itemsize - 1 - k];
            p[itemsize - 1 - k] = t;
        }
}

/* Parse "NAME DTYPE NDIM D0 D1 ..." into a; 0 on success. */
static inline int symjac__array_line(const char *p, symjac_array *a) {
    char *end;
    int i;
    memset(a, 0, sizeof *a);
    symjac__word(p, a->name);
    p += strlen(a->name);
    while (*p == ' ') p++;
    symjac__word(p, a->dtype);
    p += strlen(a->dtype);
    a->itemsize = symjac__itemsize(a->dtype);
    a->ndim = (int32_t)strtol(p, &end, 10);
    if (end == p || a->ndim < 0 || a->ndim > SYMJAC_MAX_DIMS) return 1;
    a->count = 1;
    for (i = 0; i < a->ndim; i++) {
        p = end;
        a->shape[i] = (int64_t)strtoll(p, &end, 10);
        if (end == p || a->shape[i] < 0) return 1;
        a->count *= a->shape[i];
    }
    return 0;
}

/* ---------------------------------------------------------------- the protocol's stream */

/* Where responses go: stdout, until symjac_serve moves the protocol to a descriptor of its own
   (fd >= 0, written through buf) and points fd 1 at stderr (symjac__move_protocol). */
typedef struct {
    int fd;
    size_t used;
    char buf[1 << 16];
} symjac__stream;

static symjac__stream symjac__protocol = {-1, 0, {0}};

static inline void symjac__flush(void) {
#if SYMJAC__POSIX
    size_t done = 0;
    while (symjac__protocol.fd >= 0 && done < symjac__protocol.used) {
        ssize_t n = write(symjac__protocol.fd, symjac__protocol.buf + done, symjac__protocol.used - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break; /* symjac has gone: nothing to answer */
        done += (size_t)n;
    }
    symjac__protocol.used = 0;
#endif
    fflush(stdout); /* a response, or what the kernel printed (on stderr once the protocol moved) */
}

static inline void symjac__put(const void *data, size_t n) {
    const char *p = (const char *)data;
    if (symjac__protocol.fd < 0) {
        fwrite(p, 1, n, stdout);
        return;
    }
    while (n > 0) {
        size_t k = sizeof symjac__protocol.buf - symjac__protocol.used;
        if (k == 0) {
            symjac__flush();
            continue;
        }
        if (k > n) k = n;
        memcpy(symjac__protocol.buf + symjac__protocol.used, p, k);
        symjac__protocol.used += k, p += k, n -= k;
    }
}

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static inline void symjac__say(const char *format, ...) {
    char text[SYMJAC_MESSAGE + 512]; /* the longest: a message line */
    va_list args;
    int n;
    va_start(args, format);
    n = vsnprintf(text, sizeof text, format, args);
    va_end(args);
    if (n > 0) symjac__put(text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
}

/* Keep the protocol off stdout (POSIX): fd 1, the pipe symjac reads responses from, is copied to
   a new descriptor the driver writes to (closed in programs the kernel runs), and fd 1 becomes a
   copy of stderr. What the kernel or a library it calls prints to stdout (printf, std::cout,
   write(1, ...)) then reaches stderr, line by line, where symjac drains it and quotes its end in
   messages, instead of corrupting a response. Called by symjac_serve before the first request. */
static inline void symjac__move_protocol(void) {
#if SYMJAC__POSIX
    int fd;
    if (symjac__protocol.fd >= 0) return;
    setvbuf(stdout, NULL, _IOLBF, BUFSIZ); /* before any output: the kernel's lines reach stderr as written */
    fd = dup(1);
    if (fd < 0) return;
    if (dup2(2, 1) < 0) {
        close(fd);
        return;
    }
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    symjac__protocol.fd = fd;
#endif
}

static inline void symjac__array_text(const char *role, const symjac_array *a) {
    int i;
    symjac__say("%s %s %s %d", role, a->name, a->dtype, (int)a->ndim);
    for (i = 0; i < a->ndim; i++) symjac__say(" %lld", (long long)a->shape[i]);
    symjac__put("\n", 1);
}

static inline int symjac__read_line(char *line, size_t size) {
    size_t n;
    if (fgets(line, (int)size, stdin) == NULL) return 1;
    n = strlen(line);
    if (n == 0 || line[n - 1] != '\n') return 2; /* too long, or no newline before EOF */
    line[n - 1] = '\0';
    return 0;
}

/* The buffers of one request: each input and the output between two guard regions of
   SYMJAC_GUARD bytes holding the poison element (docs/native.md): after the call, a guard
   byte (or an output byte past the shape symjac expects) that changed is reported. */
typedef struct {
    unsigned char pattern[8]; /* the poison element in host order (the request's poison line), else 0xA5 */
    int width;                /* its bytes */
    int poisoned;             /* the request named a poison: the output starts as it, not zeroed */
    char hex[20];             /* the poison line's value, echoed in the response */
    int perturb;              /* the request's perturb byte for the allocator, or -1 */
    int n;                    /* buffers allocated: the inputs, then the output */
    unsigned char *data[SYMJAC_MAX_INPUTS + 1], *saved[SYMJAC_MAX_INPUTS];
    long long size[SYMJAC_MAX_INPUTS + 1]; /* bytes the kernel may write (the output: as symjac expects it) */
    long long room[SYMJAC_MAX_INPUTS + 1]; /* bytes between the guards */
} symjac__buffers;

static inline unsigned char symjac__expected(const symjac__buffers *b, long long k) {
    /* the pattern as if it began at the data (widths are powers of two: k mod width, k < 0 too) */
    return b->pattern[(size_t)k & (size_t)(b->width - 1)];
}

static inline void symjac__fill(const symjac__buffers *b, unsigned char *data, long long from, long long to) {
    for (; from < to; from++) data[from] = symjac__expected(b, from);
}

static inline void symjac__set_poison(symjac__buffers *b, const char *hex) {
    size_t n = strlen(hex);
    unsigned long long v = strtoull(hex, NULL, 16);
    uint8_t b1 = (uint8_t)v;
    uint16_t b2 = (uint16_t)v;
    uint32_t b4 = (uint32_t)v;
    uint64_t b8 = (uint64_t)v;
    if ((n != 2 && n != 4 && n != 8 && n != 16) || n >= sizeof b->hex) return; /* no element: ignored */
    b->width = (int)(n / 2);
    memcpy(b->pattern, b->width == 1 ? (void *)&b1 : b->width == 2 ? (void *)&b2 : b->width == 4 ? (void *)&b4
                                                                                               : (void *)&b8,
           (size_t)b->width);
    memcpy(b->hex, hex, n + 1);
    b->poisoned = 1;
}

/* Buffer i: size bytes for the kernel, room bytes between the guards; 0 on success. */
static inline int symjac__alloc(symjac__buffers *b, int i, long long size, long long room) {
    unsigned char *base = (unsigned char *)malloc((size_t)(room + 2 * SYMJAC_GUARD));
    if (base == NULL) return 1;
    b->data[i] = base + SYMJAC_GUARD;
    b->size[i] = size;
    b->room[i] = room;
    b->n = i + 1;
    symjac__fill(b, b->data[i], -SYMJAC_GUARD, 0);
    symjac__fill(b, b->data[i], size, room + SYMJAC_GUARD);
    return 0;
}

/* "outside NAME FIRST LAST" for the changed bytes in [from, to) around buffer i (offsets from its start). */
static inline void symjac__outside(const symjac__buffers *b, int i, const char *name, long long from, long long to) {
    long long first = 0, last = 0, k;
    int found = 0;
    for (k = from; k < to; k++)
        if (b->data[i][k] != symjac__expected(b, k)) {
            if (!found) first = k;
            last = k;
            found = 1;
        }
    if (found) symjac__say("outside %s %lld %lld\n", name, first, last);
}

static inline void symjac__guards(const symjac__buffers *b, const symjac_request *r) {
    int i;
    for (i = 0; i < b->n; i++) {
        const char *name = i < r->n_inputs ? r->inputs[i].name : r->output.name;
        symjac__outside(b, i, name, -SYMJAC_GUARD, 0);
        symjac__outside(b, i, name, b->size[i], b->room[i] + SYMJAC_GUARD);
    }
}

/* Read a request's header into r and b: 0, or 2 for a malformed one. */
static inline int symjac__header(symjac_request *r, symjac__buffers *b, char *line, size_t size, long long *bytes) {
    size_t used = 0;
    for (;;) {
        char *value;
        if (symjac__read_line(line, size)) return 2;
        if (line[0] == '\0') return 0;
        value = strchr(line, ' ');
        value = value ? value + 1 : line + strlen(line);
        if (strncmp(line, "id ", 3) == 0) r->id = strtoll(value, NULL, 10);
        else if (strncmp(line, "op ", 3) == 0) symjac__word(value, r->op);
        else if (strncmp(line, "bytes ", 6) == 0) *bytes = strtoll(value, NULL, 10);
        else if (strncmp(line, "poison ", 7) == 0) symjac__set_poison(b, value);
        else if (strncmp(line, "perturb ", 8) == 0) b->perturb = (int)strtol(value, NULL, 10);
        else if (strncmp(line, "repeat ", 7) == 0) continue; /* a repeated run: served as any other */
        else if (strncmp(line, "output ", 7) == 0) {
            if (symjac__array_line(value, &r->output)) return 2;
        } else if (strncmp(line, "input ", 6) == 0) {
            if (r->n_inputs == SYMJAC_MAX_INPUTS || symjac__array_line(value, &r->inputs[r->n_inputs])) return 2;
            r->n_inputs++;
        } else {
            size_t n = strlen(line);
            if (used + n + 2 > sizeof r->settings) return 2;
            memcpy(r->settings + used, line, n);
            r->settings[used + n] = '\n';
            used += n + 1;
        }
    }
}

/* Read the inputs into guarded buffers, poison the output (zero it when the request names no
   poison) and call the dispatch; its status, or -1 when memory or the input ran out. */
static inline int symjac__call(symjac_dispatch_fn dispatch, symjac_request *r, symjac__buffers *b) {
    int i;
    long long expected;
    if (b->perturb >= 0) SYMJAC__PERTURB(b->perturb);
    for (i = 0; i < r->n_inputs; i++) {
        symjac_array *a = &r->inputs[i];
        size_t n = (size_t)(a->count * a->itemsize);
        b->saved[i] = (unsigned char *)malloc(n ? n : 1);
        if (symjac__alloc(b, i, (long long)n, (long long)n) || b->saved[i] == NULL) return -1;
        a->data = b->data[i];
        if (fread(a->data, 1, n, stdin) != n) return -1;
        symjac__to_host(a->data, a->count, a->itemsize);
        memcpy(b->saved[i], a->data, n);
    }
    r->output.itemsize = symjac__itemsize(r->output.dtype);
    r->output_capacity = r->output.count;
    for (i = 0; i < r->n_inputs; i++)
        if (r->inputs[i].count > r->output_capacity) r->output_capacity = r->inputs[i].count;
    if (b->poisoned && b->width != r->output.itemsize) { /* a poison of another width: none */
        b->poisoned = 0;
        b->pattern[0] = 0xA5;
        b->width = 1;
    }
    expected = r->output.count * r->output.itemsize;
    if (symjac__alloc(b, r->n_inputs, expected, r->output_capacity * r->output.itemsize)) return -1;
    if (b->poisoned) symjac__fill(b, b->data[r->n_inputs], 0, expected);
    else memset(b->data[r->n_inputs], 0, (size_t)expected);
    r->output.data = b->data[r->n_inputs];
    return symjac_call_dispatch(dispatch, r);
}

static inline void symjac__answer(symjac_request *r, const symjac__buffers *b, int status) {
    symjac_array *o = &r->output;
    const unsigned char *out = b->data[r->n_inputs];
    long long need;
    int i, same;
    symjac__say("symjac 1 response\nid %lld\nop %s\n", (long long)r->id, r->op);
    o->count = 1;
    for (i = 0; i < o->ndim; i++) o->count *= o->shape[i];
    if (!status && o->count > r->output_capacity) {
        status = symjac_fail(r, "the kernel set an output of %lld elements, %lld allocated", (long long)o->count,
                             (long long)r->output_capacity);
    }
    if (status) {
        for (i = 0; r->message[i]; i++)
            if (r->message[i] == '\n') r->message[i] = ' ';
        symjac__say("status error\nmessage %s\n", r->message[0] ? r->message : "the kernel refused");
        symjac__guards(b, r);
        symjac__say("bytes 0\n\n");
        return;
    }
    need = o->count * o->itemsize;
    symjac__say("status ok\n");
    symjac__array_text("output", o);
    for (i = 0; i < r->n_inputs; i++) {
        symjac_array *a = &r->inputs[i];
        same = memcmp(b->saved[i], b->data[i], (size_t)(a->count * a->itemsize)) == 0;
        if (same) symjac__say("input %s same\n", a->name);
        else symjac__array_text("input", a);
        if (!same) need += a->count * a->itemsize;
    }
    if (b->poisoned) symjac__say("poison %s\n", b->hex);
    symjac__guards(b, r);
    symjac__say("bytes %lld\n\n", need);
    symjac__to_host((void *)out, o->count, o->itemsize); /* host to little-endian: the same swap */
    symjac__put(out, (size_t)(o->itemsize * o->count));
    for (i = 0; i < r->n_inputs; i++) {
        symjac_array *a = &r->inputs[i];
        if (memcmp(b->saved[i], b->data[i], (size_t)(a->count * a->itemsize)) == 0) continue;
        symjac__to_host(b->data[i], a->count, a->itemsize);
        symjac__put(b->data[i], (size_t)(a->itemsize * a->count));
    }
}

/* Answer one request: 0 served (or refused), 1 end of input, 2 a malformed request. */
static inline int symjac__serve_one(symjac_dispatch_fn dispatch, symjac_request *r, char *line, size_t size) {
    symjac__buffers b;
    long long bytes = -1, need = 0;
    int i, status, unknown;
    memset(r, 0, sizeof *r);
    memset(&b, 0, sizeof b);
    b.pattern[0] = 0xA5, b.width = 1, b.perturb = -1;
    status = symjac__read_line(line, size);
    if (status) return status == 1 && feof(stdin) ? 1 : 2;
    if (strcmp(line, "symjac 1 request") != 0) {
        fprintf(stderr, "symjac_driver: expected \"symjac 1 request\", got \"%.60s\"\n", line);
        return 2;
    }
    if (symjac__header(r, &b, line, size, &bytes)) return 2;
    unknown = symjac__itemsize(r->output.dtype) == 0;
    for (i = 0; i < r->n_inputs; i++) {
        need += r->inputs[i].count * r->inputs[i].itemsize;
        unknown |= r->inputs[i].itemsize == 0;
    }
    if (bytes < 0 || (!unknown && bytes != need)) return 2;
    if (unknown) { /* skip the payload and refuse: the stream stays in step */
        for (; bytes > 0; bytes--)
            if (getchar() == EOF) return 2;
        symjac__say("symjac 1 response\nid %lld\nop %s\nstatus error\nmessage an array of this request has a dtype "
                    "the driver does not know (docs/native.md lists them)\nbytes 0\n\n", (long long)r->id, r->op);
    } else {
        status = symjac__call(dispatch, r, &b);
        if (status == -1) return 2;
        symjac__answer(r, &b, status);
    }
    symjac__flush();
    for (i = 0; i < b.n; i++) free(b.data[i] - SYMJAC_GUARD);
    for (i = 0; i < r->n_inputs; i++) free(b.saved[i]);
    return 0;
}

/* The request loop: answer every request on stdin until it ends. Returns main's exit code.
   First it moves the protocol off stdout (POSIX; symjac__move_protocol): the kernel's printf
   goes to stderr. */
static inline int symjac_serve(symjac_dispatch_fn dispatch) {
    static symjac_request request;
    static char line[SYMJAC_SETTINGS];
    int status;
    symjac__move_protocol();
    while ((status = symjac__serve_one(dispatch, &request, line, sizeof line)) == 0) {
    }
    if (status == 2) fprintf(stderr, "symjac_driver: malformed request (see docs/native.md); stopping\n");
    return status == 1 ? 0 : 2;
}

#if defined(__GNUC__)
#define SYMJAC_VISIBLE __attribute__((visibility("default")))
#else
#define SYMJAC_VISIBLE
#endif
#ifdef __cplusplus
#define SYMJAC_EXPORT extern "C" SYMJAC_VISIBLE /* unmangled names, for ctypes */
#else
#define SYMJAC_EXPORT SYMJAC_VISIBLE
#endif

/* SYMJAC_MAIN(dispatch) (no semicolon after it): main() for a program, the ctypes entry
   points symjac_call and symjac_abi when built with -DSYMJAC_SHARED. */
#ifdef SYMJAC_SHARED
#define SYMJAC_MAIN(dispatch)                                                                          \
    SYMJAC_EXPORT int symjac_call(symjac_request *r) { return symjac_call_dispatch(dispatch, r); }    \
    SYMJAC_EXPORT int64_t symjac_abi(void) { return SYMJAC_ABI; }
#else
#define SYMJAC_MAIN(dispatch) \
    int main(void) { return symjac_serve(dispatch); }
#endif

#endif /* SYMJAC_DRIVER_H */
