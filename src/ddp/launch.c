/* launch.c — one process of a data-parallel run (ddp.h): the world the launcher made, this rank's
 * backend (a GPU per rank, or a share of the CPU's cores) and the communicator over it. */
#include <string.h>
#include <unistd.h>

#include "tlm/ddp.h"

tlm_status tlm_ddp_join(tlm_ddp_process *p, const char *device, int gpu, int threads, double timeout_s) {
    memset(p, 0, sizeof *p);
    p->world = (tlm_comm_world){.rank = 0, .world_size = 1, .local_rank = 0, .local_size = 1, .num_hosts = 1};
    if (!tlm_comm_launched()) return TLM_OK;
    TLM_TRY(tlm_comm_init(&p->world, timeout_s));
    if (p->world.world_size == 1) return TLM_OK;
    const bool cuda = device ? strcmp(device, "cuda") == 0 : tlm_cuda_available();
    tlm_status s;
    if (cuda) {
        s = tlm_backend_cuda_create(&p->be, gpu + (tlm_cuda_device_count() == 1 ? 0 : p->world.local_rank));
    } else {
        const long cores = sysconf(_SC_NPROCESSORS_ONLN);
        const int share = (int)(cores / p->world.local_size);
        s = tlm_backend_cpu_create(&p->be, threads > 0 ? threads : share > 0 ? share : 1);
    }
    if (s == TLM_OK) s = tlm_comm_create(&p->comm, cuda ? TLM_COMM_NCCL : TLM_COMM_MPI, p->be, timeout_s);
    if (s != TLM_OK) {
        tlm_backend_destroy(p->be);
        p->be = NULL;
    }
    return s;
}

tlm_status tlm_ddp_leave(tlm_ddp_process *p, bool finalize) {
    tlm_comm_destroy(p->comm);
    tlm_backend_destroy(p->be);
    p->comm = NULL;
    p->be = NULL;
    return finalize ? tlm_comm_finalize() : TLM_OK;
}
