/* input.c — opening a file that tlm reads: regular files only, with their size; whole text files read
 * up to a limit (io/input.h). */
#include "io/input.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* what a file that is not a regular one is, for "PATH: a FIFO, not a regular file" */
static const char *kind_of(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "a special file";
}

tlm_status tlm_input_open(const char *path, FILE **f_out, uint64_t *size) {
    *f_out = NULL;
    *size = 0;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer before it can be refused */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return tlm_fail(TLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    tlm_status s = TLM_OK;
    if (fstat(fd, &st) != 0) s = tlm_fail(TLM_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        s = tlm_fail(TLM_ERR_IO, "%s: %s, not a regular file (tlm reads regular files only)", path, kind_of(st.st_mode));
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

/* a byte count as "N GiB" / "N MiB" / "N KiB" when it is a whole number of them, else "N bytes" */
static void size_words(uint64_t n, char *buf, size_t cap) {
    static const char *const units[] = {"GiB", "MiB", "KiB"};
    for (int i = 0; i < 3; i++) {
        const uint64_t u = (uint64_t)1 << (30 - 10 * i);
        if (n >= u && n % u == 0) {
            snprintf(buf, cap, "%llu %s", (unsigned long long)(n / u), units[i]);
            return;
        }
    }
    snprintf(buf, cap, "%llu bytes", (unsigned long long)n);
}

tlm_status tlm_input_read_text(const char *path, uint64_t max, char **data, size_t *n) {
    *data = NULL;
    *n = 0;
    FILE *f;
    uint64_t size;
    TLM_TRY(tlm_input_open(path, &f, &size));
    if (size > max || size >= SIZE_MAX) {
        fclose(f);
        char limit[48];
        size_words(max, limit, sizeof limit);
        return tlm_fail(TLM_ERR_FORMAT, "%s: %llu bytes, over the limit of %s for this file", path,
                        (unsigned long long)size, limit);
    }
    char *b = malloc((size_t)size + 1);
    if (!b) {
        fclose(f);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory reading %s (%llu bytes)", path,
                        (unsigned long long)size);
    }
    errno = 0;
    const size_t got = fread(b, 1, (size_t)size, f);
    const int err = ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (got != (size_t)size) { /* a read error, or a file cut short since fstat */
        free(b);
        return tlm_fail(TLM_ERR_IO, "%s: %s", path, err ? strerror(err) : "shorter than its size (changed while read)");
    }
    b[got] = '\0';
    *data = b;
    *n = got;
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
