/* plain MPI_Allreduce timing (in place), THREAD_SINGLE or MULTIPLE by argv[2] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int c, char **v) {
    int want = c > 2 && atoi(v[2]) ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, got;
    MPI_Init_thread(&c, &v, want, &got);
    int r, n; MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);
    size_t count = (size_t)atol(v[1]) / 4;
    float *b = malloc(count * 4); for (size_t i = 0; i < count; i++) b[i] = 1;
    for (int i = 0; i < 3; i++) MPI_Allreduce(MPI_IN_PLACE, b, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int i = 0; i < 5; i++) MPI_Allreduce(MPI_IN_PLACE, b, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    t = (MPI_Wtime() - t) / 5;
    if (r == 0) printf("plain %s: %zu bytes %.1f us busbw %.2f GB/s\n", got == MPI_THREAD_MULTIPLE ? "multiple" : "single", count * 4, t * 1e6, count * 4 / t / 1e9 * 2 * (n - 1) / n);
    MPI_Finalize();
}
