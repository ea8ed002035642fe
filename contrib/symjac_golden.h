/* symjac_golden.h: read symjac golden data (`symjac golden --format bin`) from C or C++.

   One header, no library beyond the C standard library; C99 or C++11 and later.
   A case folder holds index.json and one raw little-endian, C-order file per array
   ("dx.float32", "jac_rows", ...). Each float array has a per-element rounding bound
   ("dx.float32.max_abs_error"): a correct implementation computing in that dtype
   stays within it, so a test needs no threshold of its own.

       symjac_golden_array dx;
       char err[256];
       size_t first;
       if (symjac_golden_load("golden/mycase", "dx.float32", &dx, err, sizeof err)) { puts(err); return 1; }
       if (symjac_golden_check_float(&dx, my_dx, &first))          // number of elements out of bounds
           printf("dx[%zu] = %g, golden %g +- %g\n", first, my_dx[first], dx.values[first], dx.max_abs_error[first]);
       symjac_golden_free(&dx);

   The layer's settings come from index.json too: symjac_golden_meta_ints(folder,
   "operator.pads", ...) and symjac_golden_meta_string(folder, "operator.mode", ...) read
   any key (docs/golden-data.md, "The operator object"); symjac_golden_tie_policy says
   which valid tie policy a max-pooling dx follows where windows are tied.

   Byte order is handled here (the files are little-endian on any host); float16
   ("<f2") is converted exactly. The JSON reader understands exactly what symjac
   writes into index.json; it is not a general JSON parser. */
#ifndef SYMJAC_GOLDEN_H
#define SYMJAC_GOLDEN_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SYMJAC_GOLDEN_MAX_DIMS 8

typedef struct {
    char dtype[8];          /* "<f2", "<f4", "<f8" or "<i8", as index.json says */
    size_t count;           /* number of elements */
    int ndim;               /* 0 for a scalar */
    size_t shape[SYMJAC_GOLDEN_MAX_DIMS];
    double *values;         /* every element as a double: exact for f2/f4/f8, and for i8 below 2^53 */
    double *max_abs_error;  /* per-element bound, or NULL (integer arrays) */
    double max_ulp;         /* the worst bound in ULPs of a golden value that is not 0, or -1 without a bound */
} symjac_golden_array;

#if defined(__GNUC__)
#define SYMJAC_GOLDEN__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define SYMJAC_GOLDEN__PRINTF(f, a)
#endif

/* err = "WHERE: REASON" (REASON formatted as printf does), cut to errlen bytes with its NUL. Where
   both do not fit, WHERE (a path) keeps its end, after "...", so that its file name and the reason
   stay whole; a reason too long for err is cut at its end. */
SYMJAC_GOLDEN__PRINTF(4, 5)
static inline void symjac_golden__error(char *err, size_t errlen, const char *where, const char *format, ...) {
    char reason[512];
    size_t room, n = strlen(where), r, skip = 0, at = 0;
    va_list args;
    if (err == NULL || errlen == 0) return;
    va_start(args, format);
    vsnprintf(reason, sizeof reason, format, args);
    va_end(args);
    r = strlen(reason);
    room = errlen - 1; /* characters err holds */
    if (n + 2 + r > room && room >= r + 2 + 3 + 8) { /* at least "..." and 8 characters of WHERE */
        skip = n - (room - r - 2 - 3);
        memcpy(err, "...", 3);
        at = 3;
    }
    for (; skip < n && at < room; skip++) err[at++] = where[skip];
    for (skip = 0; skip < 2 && at < room; skip++) err[at++] = ": "[skip];
    for (skip = 0; skip < r && at < room; skip++) err[at++] = reason[skip];
    err[at] = '\0';
}

/* ---------------------------------------------------------------- index.json */

static inline const char *symjac_golden__ws(const char *p) {
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
    return p;
}

/* The end of the JSON value starting at p (after whitespace), or NULL if malformed. */
static inline const char *symjac_golden__skip(const char *p) {
    int depth = 0;
    p = symjac_golden__ws(p);
    do {
        if (*p == '\0') return NULL;
        if (*p == '"') {
            for (p++; *p != '"'; p++) {
                if (*p == '\0') return NULL;
                if (*p == '\\' && p[1] != '\0') p++;
            }
            p++;
        } else if (*p == '{' || *p == '[') {
            depth++;
            p++;
        } else if (*p == '}' || *p == ']') {
            depth--;
            p++;
        } else if (depth == 0) {
            while (*p != '\0' && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n') p++;
        } else {
            p++;
        }
    } while (depth > 0);
    return p;
}

/* The value of key in the object starting at obj ('{'), or NULL. */
static inline const char *symjac_golden__get(const char *obj, const char *key) {
    size_t n = strlen(key);
    const char *p = symjac_golden__ws(obj);
    if (*p != '{') return NULL;
    p = symjac_golden__ws(p + 1);
    while (*p == '"') {
        const char *k = p + 1, *end = symjac_golden__skip(p);
        if (end == NULL) return NULL;
        p = symjac_golden__ws(end);
        if (*p != ':') return NULL;
        p = symjac_golden__ws(p + 1);
        if ((size_t)(end - 1 - k) == n && strncmp(k, key, n) == 0) return p;
        p = symjac_golden__skip(p);
        if (p == NULL) return NULL;
        p = symjac_golden__ws(p);
        if (*p == ',') p = symjac_golden__ws(p + 1);
    }
    return NULL;
}

/* Copy the JSON string at p (no escapes expected) into out; 0 on success. */
static inline int symjac_golden__string(const char *p, char *out, size_t size) {
    size_t i = 0;
    if (p == NULL || *p != '"') return 1;
    for (p++; *p != '"'; p++) {
        if (*p == '\0' || *p == '\\' || i + 1 >= size) return 1;
        out[i++] = *p;
    }
    out[i] = '\0';
    return 0;
}

static inline char *symjac_golden__read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    char *buf;
    long size;
    if (f == NULL) return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    buf = (char *)malloc((size_t)size + 1);
    if (buf != NULL && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    if (buf != NULL) buf[size] = '\0';
    fclose(f);
    return buf;
}

/* ---------------------------------------------------------------- the .bin files */

/* float16 bits -> double, exactly (no libm needed). */
static inline double symjac_golden_half(uint16_t h) {
    int exponent = (h >> 10) & 0x1f;
    double mantissa = (double)(h & 0x3ff), value, scale = 1.0;
    int e;
    if (exponent == 31) {
        value = (h & 0x3ff) ? NAN : HUGE_VAL;
    } else {
        if (exponent == 0) {
            e = -24; /* subnormal: mantissa * 2^-24 */
        } else {
            mantissa += 1024.0;
            e = exponent - 25; /* (1024 + mantissa) * 2^(exponent - 25) */
        }
        for (; e < 0; e++) scale *= 0.5;
        for (; e > 0; e--) scale *= 2.0;
        value = mantissa * scale;
    }
    return (h & 0x8000) ? -value : value;
}

/* Read count little-endian elements of dtype from path into doubles; 0 on success. */
static inline int symjac_golden__read_bin(const char *path, const char *dtype, size_t count, double *out, char *err,
                                   size_t errlen) {
    size_t size = strcmp(dtype, "<f2") == 0 ? 2 : strcmp(dtype, "<f4") == 0 ? 4 : 8, i;
    unsigned char b[8];
    FILE *f = fopen(path, "rb");
    if (strcmp(dtype, "<f2") && strcmp(dtype, "<f4") && strcmp(dtype, "<f8") && strcmp(dtype, "<i8")) {
        symjac_golden__error(err, errlen, path, "dtype %s is not one of <f2, <f4, <f8, <i8", dtype);
        if (f != NULL) fclose(f);
        return 1;
    }
    if (f == NULL) {
        symjac_golden__error(err, errlen, path, "cannot open");
        return 1;
    }
    for (i = 0; i < count; i++) {
        uint64_t bits = 0;
        int k;
        if (fread(b, size, 1, f) != 1) {
            symjac_golden__error(err, errlen, path, "holds fewer than the %lu elements index.json lists",
                                 (unsigned long)count);
            fclose(f);
            return 1;
        }
        for (k = (int)size - 1; k >= 0; k--) bits = (bits << 8) | b[k];
        if (size == 2) {
            out[i] = symjac_golden_half((uint16_t)bits);
        } else if (size == 4) {
            uint32_t u = (uint32_t)bits;
            float v;
            memcpy(&v, &u, 4);
            out[i] = v;
        } else if (dtype[1] == 'i') {
            int64_t v;
            memcpy(&v, &bits, 8);
            out[i] = (double)v;
        } else {
            double v;
            memcpy(&v, &bits, 8);
            out[i] = v;
        }
    }
    if (fgetc(f) != EOF) {
        symjac_golden__error(err, errlen, path, "holds more than the %lu elements index.json lists",
                             (unsigned long)count);
        fclose(f);
        return 1;
    }
    fclose(f);
    return 0;
}

/* ---------------------------------------------------------------- the operator and other metadata */

/* The value at a dotted path of index.json's text ("operator.kernel", "input_shape"), or NULL. */
static inline const char *symjac_golden__path(const char *index, const char *path) {
    char key[128];
    const char *p = index;
    while (p != NULL && *path != '\0') {
        size_t n = strcspn(path, ".");
        if (n >= sizeof key) return NULL;
        memcpy(key, path, n);
        key[n] = '\0';
        p = symjac_golden__get(p, key);
        path += n + (path[n] == '.');
    }
    return p;
}

/* The text of folder/index.json (path gets its name, size >= 16), or NULL (err says why). */
static inline char *symjac_golden__index(const char *folder, char *path, size_t size, char *err, size_t errlen) {
    char *index;
    size_t n = strlen(folder);
    if (n + sizeof "/index.json" > size) {
        symjac_golden__error(err, errlen, folder, "a folder name longer than %lu characters",
                             (unsigned long)(size - sizeof "/index.json"));
        memcpy(path, "index.json", sizeof "index.json");
        return NULL;
    }
    memcpy(path, folder, n);
    memcpy(path + n, "/index.json", sizeof "/index.json");
    index = symjac_golden__read_text(path);
    if (index == NULL) symjac_golden__error(err, errlen, path, "cannot read");
    return index;
}

/* The integers of index.json's value at path: a number, true/false (1/0), or a list, nested
   lists flattened in order ("operator.pads" gives low, high of each spatial axis;
   "operator.kernel", "operator.stride", "operator.divisors", "input_shape", ...). Stores at
   most max of them in out and returns how many there are, or -1 (err says why: no such key,
   or a value that is not integers, such as the divisor rule "exclude_pad"). */
static inline int symjac_golden_meta_ints(const char *folder, const char *path, long long *out, int max, char *err,
                                          size_t errlen) {
    char file[4096];
    char *index = symjac_golden__index(folder, file, sizeof file, err, errlen);
    const char *p, *end;
    int n = 0;
    if (index == NULL) return -1;
    p = symjac_golden__path(index, path);
    end = p ? symjac_golden__skip(p) : NULL;
    if (end == NULL) {
        symjac_golden__error(err, errlen, file, "no \"%s\"", path);
        free(index);
        return -1;
    }
    for (p = symjac_golden__ws(p); p < end; p++) {
        long long v;
        if (*p == '[' || *p == ']' || *p == ',' || *p == ' ' || *p == '\n') continue;
        if (strncmp(p, "true", 4) == 0 || strncmp(p, "false", 5) == 0) {
            v = *p == 't';
            p += v ? 3 : 4;
        } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
            char *stop;
            v = strtoll(p, &stop, 10);
            if (*stop == '.' || *stop == 'e' || *stop == 'E') break;
            p = stop - 1;
        } else {
            break;
        }
        if (n < max) out[n] = v;
        n++;
    }
    if (p < end) {
        symjac_golden__error(err, errlen, file, "\"%s\" is not integers", path);
        n = -1;
    }
    free(index);
    return n;
}

/* The string at path ("operator.mode", "operator.divisor", "operator.tie") into out; 0 on
   success, else 1 (err says why: no such key, not a string, or longer than size - 1). */
static inline int symjac_golden_meta_string(const char *folder, const char *path, char *out, size_t size, char *err,
                                            size_t errlen) {
    char file[4096];
    char *index = symjac_golden__index(folder, file, sizeof file, err, errlen);
    int status;
    if (index == NULL) return 1;
    status = symjac_golden__string(symjac_golden__path(index, path), out, size);
    if (status)
        symjac_golden__error(err, errlen, file, "\"%s\" is no string of fewer than %lu characters", path,
                             (unsigned long)size);
    free(index);
    return status;
}

/* ---------------------------------------------------------------- the API */

static inline void symjac_golden_free(symjac_golden_array *a) {
    free(a->values);
    free(a->max_abs_error);
    a->values = a->max_abs_error = NULL;
}

/* Load array `name` of the case folder (where index.json is). Returns 0 on success;
   otherwise writes a one-line reason into err and leaves *a empty. */
static inline int symjac_golden_load(const char *folder, const char *name, symjac_golden_array *a, char *err, size_t errlen) {
    char path[4096], file[512], bound_file[512];
    char *index;
    const char *entry, *p;
    int status = 1;
    memset(a, 0, sizeof *a);
    a->max_ulp = -1;
    index = symjac_golden__index(folder, path, sizeof path, err, errlen);
    if (index == NULL) return 1;
    entry = symjac_golden__get(index, "arrays");
    entry = entry ? symjac_golden__get(entry, name) : NULL;
    if (entry == NULL) {
        symjac_golden__error(err, errlen, path, "no array \"%s\" (see its \"arrays\")", name);
        goto done;
    }
    if (symjac_golden__string(symjac_golden__get(entry, "file"), file, sizeof file) ||
        symjac_golden__string(symjac_golden__get(entry, "dtype"), a->dtype, sizeof a->dtype) ||
        (p = symjac_golden__get(entry, "count")) == NULL) {
        symjac_golden__error(err, errlen, path, "array \"%s\" lacks file, dtype or count", name);
        goto done;
    }
    a->count = (size_t)strtoul(p, NULL, 10);
    p = symjac_golden__get(entry, "shape");
    for (p = p ? symjac_golden__ws(p + 1) : ""; *p != ']' && *p != '\0'; p = symjac_golden__ws(p)) {
        char *end;
        if (a->ndim == SYMJAC_GOLDEN_MAX_DIMS) break;
        a->shape[a->ndim++] = (size_t)strtoul(p, &end, 10);
        p = symjac_golden__ws(end);
        if (*p == ',') p++;
    }
    if ((p = symjac_golden__get(entry, "max_ulp")) != NULL) a->max_ulp = strtod(p, NULL);
    a->values = (double *)malloc((a->count ? a->count : 1) * sizeof(double));
    if (a->values == NULL) {
        symjac_golden__error(err, errlen, name, "out of memory");
        goto done;
    }
    snprintf(path, sizeof path, "%s/%s", folder, file);
    if (symjac_golden__read_bin(path, a->dtype, a->count, a->values, err, errlen)) goto done;
    if (symjac_golden__string(symjac_golden__get(entry, "max_abs_error_file"), bound_file, sizeof bound_file) == 0) {
        a->max_abs_error = (double *)malloc((a->count ? a->count : 1) * sizeof(double));
        snprintf(path, sizeof path, "%s/%s", folder, bound_file);
        if (a->max_abs_error == NULL || symjac_golden__read_bin(path, "<f8", a->count, a->max_abs_error, err, errlen))
            goto done;
    }
    status = 0;
done:
    free(index);
    if (status) symjac_golden_free(a);
    return status;
}

/* How many got[i] differ from the golden values by more than their bound (exactly,
   for arrays without one); NaN counts. *first_bad (if not NULL) gets the first index. */
static inline size_t symjac_golden_check(const symjac_golden_array *a, const double *got, size_t *first_bad) {
    size_t i, bad = 0;
    for (i = 0; i < a->count; i++) {
        double bound = a->max_abs_error ? a->max_abs_error[i] : 0.0, d = got[i] - a->values[i];
        if (!((d < 0 ? -d : d) <= bound)) {
            if (bad == 0 && first_bad != NULL) *first_bad = i;
            bad++;
        }
    }
    return bad;
}

/* The same for float results (each widened to double exactly). */
static inline size_t symjac_golden_check_float(const symjac_golden_array *a, const float *got, size_t *first_bad) {
    size_t i, bad = 0;
    for (i = 0; i < a->count; i++) {
        double bound = a->max_abs_error ? a->max_abs_error[i] : 0.0, d = (double)got[i] - a->values[i];
        if (!((d < 0 ? -d : d) <= bound)) {
            if (bad == 0 && first_bad != NULL) *first_bad = i;
            bad++;
        }
    }
    return bad;
}

/* Which tie policy a max-pooling backward follows, from got (its dx, as doubles) and the
   golden dx of each valid policy ("dx_first.DTYPE", "dx_last.DTYPE", "dx_split.DTYPE",
   written for cases with tied windows): "first", "last" or "split", the first whose every
   element is within its bound; NULL when none is, or the case has no tied windows (err says
   which). dtype is "float32", "float64", ... */
static inline const char *symjac_golden_tie_policy(const char *folder, const char *dtype, const double *got, char *err,
                                                   size_t errlen) {
    static const char *const policies[] = {"first", "last", "split"};
    char name[64];
    int i;
    for (i = 0; i < 3; i++) {
        symjac_golden_array a;
        size_t bad;
        snprintf(name, sizeof name, "dx_%s.%s", policies[i], dtype);
        if (symjac_golden_load(folder, name, &a, err, errlen)) {
            symjac_golden__error(err, errlen, folder, "no %s: the case has no tied windows (or no dtype %s)", name,
                                 dtype);
            return NULL;
        }
        bad = symjac_golden_check(&a, got, NULL);
        symjac_golden_free(&a);
        if (bad == 0) return policies[i];
    }
    symjac_golden__error(err, errlen, folder, "dx follows none of the tie policies first, last, split");
    return NULL;
}

#endif /* SYMJAC_GOLDEN_H */
