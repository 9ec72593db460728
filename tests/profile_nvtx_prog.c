/* profile_nvtx_prog.c — a program that only writes NVTX ranges, for tests/cli/profile.sh: `tlm profile
 * --exec` of it tests the injection path (NVTX_INJECTION64_PATH, tlm's NVTX handler, the profile file
 * handed back, the ranges in the tables and the trace) without a GPU. Ranges, as the PyTorch peer
 * writes them: "warmup step 0", then "step 0" and "step 1", each with "forward" (the first holding
 * "computing softmax", written with nvtxRangePushEx) and "backward"; a second thread writes a
 * domain range with a registered string ("worker"). Prints "done". */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

static void spin(long us) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
}

static void *worker(void *arg) {
    nvtxDomainHandle_t d = nvtxDomainCreateA("tlm-test");
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = nvtxDomainRegisterStringA(d, "worker");
    nvtxDomainRangePushEx(d, &a);
    spin(200);
    nvtxDomainRangePop(d);
    return arg;
}

int main(void) {
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, i == 0 ? "warmup step %d" : "step %d", i == 0 ? 0 : i - 1);
        nvtxRangePushA(name);
        nvtxRangePushA("forward");
        if (i == 1) {
            nvtxEventAttributes_t a = {0};
            a.version = NVTX_VERSION;
            a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
            a.messageType = NVTX_MESSAGE_TYPE_ASCII;
            a.message.ascii = "computing softmax";
            nvtxRangePushEx(&a);
            spin(100);
            nvtxRangePop();
        }
        spin(100);
        nvtxRangePop();
        nvtxRangePushA("backward");
        if (i == 2) {
            pthread_t t;
            pthread_create(&t, NULL, worker, NULL);
            pthread_join(t, NULL);
        }
        spin(100);
        nvtxRangePop();
        nvtxRangePop();
    }
    printf("done\n");
    return 0;
}
