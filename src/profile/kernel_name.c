/* kernel_name.c — a kernel's name as the tables show it (profile.h, tlm_kernel_name_short):
 * demangled by the C++ ABI's __cxa_demangle (the Itanium ABI's, which CUDA's names follow), found
 * at run time so that tlm stays C (libstdc++ is loaded in every CUDA build: cuBLASLt needs it),
 * then shortened to what tells kernels apart. No CUDA here: the injection library compiles it. */
#define _GNU_SOURCE /* qsort_r, RTLD_DEFAULT */
#include "tlm/profile.h"

#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef char *(*demangle_fn)(const char *mangled, char *buf, size_t *n, int *status);

static demangle_fn demangler;
static pthread_once_t demangler_once = PTHREAD_ONCE_INIT;

static void find_demangler(void) {
    demangler = (demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
    if (!demangler) {
        void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
        if (h) demangler = (demangle_fn)dlsym(h, "__cxa_demangle"); /* h stays open for the process */
    }
}

/* Without a demangler: the last <length><identifier> of a mangled name's (nested) name, e.g.
 * _ZN2at6native29vectorized_elementwise_kernelILi4E... -> vectorized_elementwise_kernel. */
static bool last_identifier(const char *m, char *out, size_t n) {
    const char *s = m + 2, *best = NULL;
    size_t best_len = 0;
    if (*s == 'N') s++;
    while (isdigit((unsigned char)*s)) {
        char *end;
        const unsigned long len = strtoul(s, &end, 10);
        if (len == 0 || strnlen(end, len) < len) break;
        best = end;
        best_len = len;
        s = end + len;
    }
    if (!best) return false;
    snprintf(out, n, "%.*s", (int)best_len, best);
    return true;
}

/* removes every occurrence of `what` from s, in place */
static void erase_all(char *s, const char *what) {
    const size_t k = strlen(what);
    for (char *p; (p = strstr(s, what));) memmove(p, p + k, strlen(p + k) + 1);
}

static bool ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

void tlm_kernel_name_short(const char *raw, char *out, size_t n, size_t max_chars) {
    if (!n) return;
    char *buf = NULL;
    if (strncmp(raw, "_Z", 2) == 0) {
        pthread_once(&demangler_once, find_demangler);
        int status = -1;
        if (demangler) buf = demangler(raw, NULL, NULL, &status);
        if (status != 0) {
            free(buf);
            buf = NULL;
            char id[256];
            if (last_identifier(raw, id, sizeof id)) buf = strdup(id);
        }
    }
    if (!buf) buf = strdup(raw);
    if (!buf) {
        snprintf(out, n, "%s", raw);
        return;
    }
    char *s = buf;
    if (strncmp(s, "void ", 5) == 0) s += 5;
    erase_all(s, "(anonymous namespace)::");
    /* the parameter list: the first '(' outside template brackets */
    int depth = 0;
    for (char *p = s; *p; p++) {
        if (*p == '<') depth++;
        else if (*p == '>' && depth > 0) depth--;
        else if (*p == '(' && depth == 0 && p > s) {
            *p = '\0';
            break;
        }
    }
    /* namespace and class qualifiers: "at::native::f<std::array<int>>" -> "f<array<int>>" */
    for (char *p; (p = strstr(s, "::"));) {
        char *q = p;
        while (q > s && ident_char(q[-1])) q--;
        memmove(q, p + 2, strlen(p + 2) + 1);
    }
    /* CUTLASS launches every kernel through a wrapper: name it by what it wraps */
    static const char *const wrappers[] = {"Kernel<", "Kernel2<", "device_kernel<"};
    for (size_t w = 0; w < sizeof wrappers / sizeof wrappers[0]; w++) {
        const size_t k = strlen(wrappers[w]), len = strlen(s);
        if (strncmp(s, wrappers[w], k) == 0 && len > k + 1 && s[len - 1] == '>') {
            s[len - 1] = '\0';
            s += k;
            while (*s == ' ') s++;
            break;
        }
    }
    size_t len = strlen(s);
    while (len && s[len - 1] == ' ') s[--len] = '\0';
    if (max_chars >= 4 && len > max_chars) snprintf(out, n, "%.*s...", (int)(max_chars - 3), s);
    else snprintf(out, n, "%s", s);
    free(buf);
}
