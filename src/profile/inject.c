/* inject.c — libtlm_inject.so, tlm's profiler inside another program (`tlm profile --exec`).
 *
 * The CUDA driver loads the library named by CUDA_INJECTION64_PATH when the program initialises
 * CUDA and calls its InitializeInjection (CUPTI documentation, "CUPTI injection"); the NVTX
 * library loads the one named by NVTX_INJECTION64_PATH at the program's first NVTX call and calls
 * InitializeInjectionNvtx2 with its export table (NVTX 3, nvtxDetail/nvtxInit.h), whose core
 * function table this library fills with its own range push/pop handlers: ranges are recorded
 * here, on CUPTI's clock, with the calling thread's id, whichever comes first.
 *
 * CUPTI collects in foreign mode (cupti_collect.h); at exit the profile is written to
 * $TLM_PROFILE_DIR/profile-<pid>.bin (through a temporary name, renamed when complete), which
 * `tlm profile` reads. A process without TLM_PROFILE_DIR records nothing. Where CUPTI cannot start
 * (no GPU driver: CI) the NVTX ranges are still recorded, on CLOCK_MONOTONIC, so that the whole
 * --exec path but CUPTI can be tested without a GPU. Nothing here may break the program: failures
 * are reported on stderr and profiling stops. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "profile/cupti_collect.h"
#include "tlm/tuning.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_DEPTH 256

static tlm_profile *P;
static pid_t owner;
static bool failed;
static bool host_clock;   /* CUPTI could not start (no GPU driver): NVTX ranges alone, on CLOCK_MONOTONIC */
static int64_t origin_ns;

static int64_t host_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t now(void) { return host_clock ? host_ns() - origin_ns : tlm_cupti_now(); }
static pthread_once_t once = PTHREAD_ONCE_INIT;

static _Thread_local int32_t stack[MAX_DEPTH];
static _Thread_local int depth, overflow;

static void say_failure(const char *what) {
    fprintf(stderr, "tlm profile (injected): %s: %s; the program runs on unprofiled\n", what, tlm_last_error());
    failed = true;
}

/* the program's command line, for the profile's title */
static void command_line(char *out, size_t n) {
    out[0] = '\0';
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f) return;
    size_t k = fread(out, 1, n - 1, f);
    fclose(f);
    out[k] = '\0';
    for (size_t i = 0; i + 1 < k; i++)
        if (out[i] == '\0') out[i] = ' ';
}

static void finish(void);

static void start(void) {
    if (!*tlm_knob_str(TLM_KNOB_PROFILE_DIR)) {
        failed = true;
        return;
    }
    if (tlm_profile_create(&P) != TLM_OK) {
        say_failure("creating the profile");
        return;
    }
    P->foreign = true;
    command_line(P->title, sizeof P->title);
    if (tlm_cupti_begin(P, TLM_CUPTI_FOREIGN) != TLM_OK) {
        fprintf(stderr, "tlm profile (injected): CUPTI did not start (%s): recording NVTX ranges only\n",
                tlm_last_error());
        host_clock = true;
        P->host_clock = true;
        origin_ns = host_ns();
    }
    owner = getpid();
    atexit(finish);
}

static bool ready(void) {
    pthread_once(&once, start);
    return !failed && P;
}

/* the device's name through the driver already loaded in the process (not linked: optional) */
static void device_name(char *out, size_t n) {
    int (*get_name)(char *, int, int) = (int (*)(char *, int, int))dlsym(RTLD_DEFAULT, "cuDeviceGetName");
    char name[200] = "";
    if (get_name && get_name(name, (int)sizeof name, 0) == 0) snprintf(out, n, "cuda: %s, GPU 0 (--exec)", name);
    else snprintf(out, n, "cuda (--exec)");
}

static void finish(void) {
    if (failed || !P || getpid() != owner) return; /* a forked child leaves it to its parent */
    if (host_clock) P->end_ns = now();
    else if (tlm_cupti_end() != TLM_OK) fprintf(stderr, "tlm profile (injected): %s\n", tlm_last_error());
    tlm_cupti_lock();
    for (size_t i = 0; i < P->n_ranges; i++) /* still open at exit: they end there */
        if (P->ranges[i].end_ns < P->ranges[i].begin_ns) P->ranges[i].end_ns = P->end_ns;
    tlm_cupti_unlock();
    if (host_clock) snprintf(P->device, sizeof P->device, "no CUDA device: NVTX ranges only (--exec)");
    else device_name(P->device, sizeof P->device);
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/profile-%d.bin", tlm_knob_str(TLM_KNOB_PROFILE_DIR), (int)owner);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    tlm_status s = f ? tlm_profile_write(P, f) : tlm_fail(TLM_ERR_IO, "cannot create %s", tmp);
    if (f && (fflush(f) != 0 || fsync(fileno(f)) != 0) && s == TLM_OK) s = tlm_fail(TLM_ERR_IO, "cannot write %s", tmp);
    if (f && fclose(f) != 0 && s == TLM_OK) s = tlm_fail(TLM_ERR_IO, "cannot close %s", tmp);
    if (s == TLM_OK && rename(tmp, path) != 0) s = tlm_fail(TLM_ERR_IO, "cannot rename %s", tmp);
    if (s != TLM_OK) {
        fprintf(stderr, "tlm profile (injected): %s\n", tlm_last_error());
        unlink(tmp);
    }
    tlm_profile_free(P);
    P = NULL;
}

EXPORT int InitializeInjection(void) {
    ready();
    return 1; /* never refuse: the program runs either way */
}

/* ---- NVTX: push/pop ranges, per thread ------------------------------------------------------------------ */

static void push(const char *name) {
    if (!ready()) return;
    if (depth == MAX_DEPTH) {
        overflow++;
        return;
    }
    const int64_t t = now();
    tlm_cupti_lock();
    const tlm_prof_range r = {.name = tlm_profile_intern(P, name ? name : "?"), .kind = TLM_PROF_RANGE_NVTX,
                              .begin_ns = t, .end_ns = -1, .thread = (uint32_t)syscall(SYS_gettid),
                              .parent = depth ? stack[depth - 1] : -1, .scope = {.layer = -1, .step = -1}};
    const int64_t i = r.name >= 0 ? tlm_profile_add_range(P, &r) : -1;
    tlm_cupti_unlock();
    if (i < 0) {
        overflow++;
        return;
    }
    stack[depth++] = (int32_t)i;
    tlm_cupti_set_context(-1, (int32_t)i);
}

static void pop(void) {
    if (!ready()) return;
    if (overflow) {
        overflow--;
        return;
    }
    if (!depth) return;
    const int64_t t = now();
    tlm_cupti_lock();
    P->ranges[stack[--depth]].end_ns = t;
    tlm_cupti_unlock();
    tlm_cupti_set_context(-1, depth ? stack[depth - 1] : -1);
}

/* registered strings: the handle is the interned id + 1 */
static const char *message_of(const nvtxEventAttributes_t *a) {
    if (!a) return "?";
    if (a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii) return a->message.ascii;
    if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED && a->message.registered) {
        tlm_cupti_lock();
        const char *s = tlm_profile_str(P, (int32_t)((intptr_t)a->message.registered - 1));
        tlm_cupti_unlock();
        return s;
    }
    return "?";
}

static int NVTX_API h_push_a(const char *message) {
    push(message);
    return depth - 1;
}
static int NVTX_API h_push_ex(const nvtxEventAttributes_t *a) {
    push(ready() ? message_of(a) : "?");
    return depth - 1;
}
static int NVTX_API h_pop(void) {
    pop();
    return depth;
}
static int NVTX_API h_domain_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) { return h_push_ex(a); }
static int NVTX_API h_domain_pop(nvtxDomainHandle_t d) { return h_pop(); }
static nvtxStringHandle_t NVTX_API h_register_a(nvtxDomainHandle_t d, const char *s) {
    if (!ready()) return NULL;
    tlm_cupti_lock();
    const int32_t id = tlm_profile_intern(P, s ? s : "?");
    tlm_cupti_unlock();
    return id >= 0 ? (nvtxStringHandle_t)(intptr_t)(id + 1) : NULL;
}

/* sets slot `id` of an NVTX module's function table */
static void set_slot(NvtxFunctionTable table, unsigned size, unsigned id, NvtxFunctionPointer fn) {
    if (table && id < size && table[id]) *table[id] = fn;
}

EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
    const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get_export_table(NVTX_ETID_CALLBACKS);
    if (!cb || cb->struct_size < sizeof *cb || !cb->GetModuleFunctionTable) return 0;
    NvtxFunctionTable core = NULL, core2 = NULL;
    unsigned n_core = 0, n_core2 = 0;
    if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &n_core)) return 0;
    set_slot(core, n_core, NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)h_push_a);
    set_slot(core, n_core, NVTX_CBID_CORE_RangePushEx, (NvtxFunctionPointer)h_push_ex);
    set_slot(core, n_core, NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)h_pop);
    if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &n_core2)) {
        set_slot(core2, n_core2, NVTX_CBID_CORE2_DomainRangePushEx, (NvtxFunctionPointer)h_domain_push_ex);
        set_slot(core2, n_core2, NVTX_CBID_CORE2_DomainRangePop, (NvtxFunctionPointer)h_domain_pop);
        set_slot(core2, n_core2, NVTX_CBID_CORE2_DomainRegisterStringA, (NvtxFunctionPointer)h_register_a);
    }
    return 1;
}
