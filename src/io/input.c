/* input.c — opening a file that tlm reads: regular files only, with their size (io/input.h). */
#include "io/input.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

tlm_status tlm_input_open(const char *path, FILE **f_out, uint64_t *size) {
    *f_out = NULL;
    *size = 0;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer before it can be refused */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return tlm_fail(TLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    tlm_status s = TLM_OK;
    if (fstat(fd, &st) != 0) s = tlm_fail(TLM_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (S_ISDIR(st.st_mode)) s = tlm_fail(TLM_ERR_IO, "%s: is a directory, not a file", path);
    else if (!S_ISREG(st.st_mode))
        s = tlm_fail(TLM_ERR_IO, "%s: not a regular file (a pipe or a device): tlm reads regular files only", path);
    FILE *f = NULL;
    if (s == TLM_OK && (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 || !(f = fdopen(fd, "rb"))))
        s = tlm_fail(TLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (s != TLM_OK) {
        close(fd);
        return s;
    }
    *f_out = f;
    *size = (uint64_t)st.st_size;
    return TLM_OK;
}

const char *tlm_input_sniff(const unsigned char *head, size_t n) {
    if (n >= 6 && memcmp(head, "\x93NUMPY", 6) == 0) return "npy";
    if (n >= 4 && memcmp(head, "PK\x03\x04", 4) == 0) return "pytorch";   /* a zip archive: torch.save's */
    if (n >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5) return "pickle"; /* PROTO opcode */
    if (n >= 9 && head[8] == '{') {
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--) len = len << 8 | head[i];
        if (len >= 2 && len < 100000000u) return "safetensors";
    }
    return NULL;
}

tlm_status tlm_input_refuse_pytorch(const char *path, const char *kind, const char *wanted) {
    if (!kind || (strcmp(kind, "pytorch") != 0 && strcmp(kind, "pickle") != 0)) return TLM_OK;
    const char *what = strcmp(kind, "pytorch") == 0 ? "a PyTorch file (torch.save's zip archive of pickles)"
                                                    : "a Python pickle (torch.save's legacy format)";
    if (strcmp(wanted, "safetensors") == 0)
        return tlm_fail(TLM_ERR_FORMAT,
                        "%s: this is %s, not safetensors (tlm reads no pickle). Convert it in Python: "
                        "import torch, safetensors.torch; "
                        "safetensors.torch.save_file(model.state_dict(), \"w.safetensors\"), or for a saved state "
                        "dict: safetensors.torch.save_file(torch.load(\"%s\"), \"w.safetensors\")",
                        path, what, path);
    return tlm_fail(TLM_ERR_FORMAT,
                    "%s: this is %s, not .npy (tlm reads no pickle). Convert it in Python: "
                    "numpy.save(\"x.npy\", torch.load(\"%s\").numpy())",
                    path, what, path);
}
