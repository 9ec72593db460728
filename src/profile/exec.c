/* exec.c — `tlm profile --exec`'s parent side (profile_exec.h): run another program with
 * libtlm_inject.so injected (CUDA_INJECTION64_PATH for CUPTI, NVTX_INJECTION64_PATH for its NVTX
 * ranges) and read back the profiles its CUDA processes wrote into a private temporary folder. */
#define _GNU_SOURCE
#include "io/input.h"
#include "profile/profile_exec.h"
#include "tlm/tuning.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tlm/util.h"

tlm_status tlm_profile_find_program(const char *name, char *path, size_t n) {
    struct stat st;
    if (strchr(name, '/')) {
        if (stat(name, &st) != 0 || !S_ISREG(st.st_mode) || access(name, X_OK) != 0)
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "--exec: '%s' is not an executable file", name);
        snprintf(path, n, "%s", name);
        return TLM_OK;
    }
    return tlm_find_program(name, path, n) ? TLM_OK
                                           : tlm_fail(TLM_ERR_INVALID_ARGUMENT, "--exec: '%s' not found in PATH", name);
}

tlm_status tlm_profile_inject_library(char *path, size_t n) {
    char exe[4096];
    const ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return tlm_fail(TLM_ERR_IO, "cannot find tlm's own path (/proc/self/exe)");
    exe[k] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    snprintf(path, n, "%s/libtlm_inject.so", exe);
    if (access(path, R_OK) != 0)
        return tlm_fail(TLM_ERR_UNSUPPORTED, "--exec needs %s (tlm built with CUDA and CUPTI): %s", path,
                        strerror(errno));
    return TLM_OK;
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
            char p[4400];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

tlm_status tlm_profile_exec(char *const argv[], const char *inject_lib, tlm_profile ***out, int *n_out,
                            int *exit_status) {
    *out = NULL;
    *n_out = 0;
    *exit_status = -1;
    char program[4096];
    TLM_TRY(tlm_profile_find_program(argv[0], program, sizeof program));
    const char *tmpdir = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tlm-profile-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(dir)) return tlm_fail(TLM_ERR_IO, "cannot create a temporary folder %s: %s", dir, strerror(errno));
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) {
        rmdir(dir);
        return tlm_fail(TLM_ERR_IO, "--exec: fork: %s", strerror(errno));
    }
    if (pid == 0) {
        setenv("CUDA_INJECTION64_PATH", inject_lib, 1);
        setenv("NVTX_INJECTION64_PATH", inject_lib, 1);
        tlm_knob_set(TLM_KNOB_PROFILE_DIR, dir); /* the injected library's output folder */
        dup2(STDERR_FILENO, STDOUT_FILENO); /* stdout carries tlm's report alone */
        execv(program, argv);
        fprintf(stderr, "tlm profile: --exec: cannot run %s: %s\n", program, strerror(errno));
        _exit(127);
    }
    /* the terminal's Ctrl-C reaches the program too; tlm waits for it to finish and writes nothing */
    struct sigaction ignore = {.sa_handler = SIG_IGN}, old_int, old_term;
    sigaction(SIGINT, &ignore, &old_int);
    sigaction(SIGTERM, &ignore, &old_term);
    int status = 0;
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {}
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (w < 0) {
        remove_dir(dir);
        return tlm_fail(TLM_ERR_IO, "--exec: waitpid: %s", strerror(errno));
    }
    *exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    /* every CUDA process of the program wrote profile-<pid>.bin */
    tlm_status s = TLM_OK;
    tlm_profile **v = NULL;
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; s == TLM_OK && d && (e = readdir(d));) {
        const size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "profile-", 8) != 0 || len < 12 || strcmp(e->d_name + len - 4, ".bin") != 0) continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        FILE *f = NULL;
        uint64_t size;
        tlm_profile *prof = NULL;
        s = tlm_input_open(p, &f, &size); /* a regular file only: a FIFO is refused, not waited on */
        if (s == TLM_OK) s = tlm_profile_read(&prof, f, p);
        if (f) fclose(f);
        tlm_profile **grown = s == TLM_OK ? realloc(v, (size_t)(n + 1) * sizeof *v) : NULL;
        if (s == TLM_OK && !grown) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
        if (s == TLM_OK) {
            v = grown;
            v[n++] = prof;
        } else {
            tlm_profile_free(prof);
        }
    }
    if (d) closedir(d);
    remove_dir(dir);
    if (s == TLM_OK && n == 0)
        s = tlm_fail(TLM_ERR_INVALID_ARGUMENT, "--exec: %s wrote no profile (exit status %d): it made no CUDA call, "
                                               "or it ended without running its exit handlers", argv[0], *exit_status);
    if (s != TLM_OK) {
        for (int i = 0; i < n; i++) tlm_profile_free(v[i]);
        free(v);
        return s;
    }
    *out = v;
    *n_out = n;
    return TLM_OK;
}
