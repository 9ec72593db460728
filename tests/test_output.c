/* test_output.c — the one file writer (output.h): a committed file holds exactly what was
 * written and no temporary is left; an existing destination survives an aborted or failed write;
 * a symlink, a directory or an input of the command is refused as a destination, untouched; a
 * path too long for a temporary beside it is refused; a batch commits all its outputs or none; a
 * write that fails (a file-size limit standing in for a full disk) reports the file and leaves the
 * old one; SIGTERM or SIGPIPE while a file is open removes the temporary. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_check.h"
#include "test_files.h"
#include "tlm/output.h"

static char dir[64];

static const char *at(const char *name) { return test_path_in(dir, name); }

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/* the file's text ("" when absent) */
static const char *content(const char *path) {
    static char buf[256];
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return buf;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int temporaries(void) { return test_temporaries_in(dir); }

static tlm_status write_text(const char *path, const char *text) {
    tlm_output *o;
    TLM_TRY(tlm_output_open(&o, path));
    fputs(text, tlm_output_file(o));
    return tlm_output_commit(o);
}

/* A child that opens `name` for writing, writes part of it and dies of signal `sig`: true when it died of
 * it and left no file and no temporary (the output layer removes its temporary on the way out). */
static bool killed_while_writing(const char *name, int sig) {
    const pid_t pid = fork();
    if (pid == 0) {
        tlm_output *w;
        if (tlm_output_open(&w, at(name)) != TLM_OK) _exit(3);
        fputs("partial", tlm_output_file(w));
        fflush(tlm_output_file(w));
        raise(sig);
        _exit(5);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == sig && access(at(name), F_OK) != 0 && temporaries() == 0;
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/tlm_output_XXXXXX");
    TLM_ASSERT(mkdtemp(dir));

    /* a plain write, and a replacement */
    check_status(write_text(at("a.txt"), "first"), TLM_OK, NULL, "write a new file");
    struct stat st;
    stat(at("a.txt"), &st);
    const mode_t mask = umask(0);
    umask(mask);
    check(!strcmp(content(at("a.txt")), "first") && temporaries() == 0 && (st.st_mode & 0777) == (0666 & ~mask),
          "the file holds what was written, mode %o (0666 less the umask), no temporary left", st.st_mode & 0777);
    check_status(write_text(at("a.txt"), "second"), TLM_OK, NULL, "replace it");
    check(!strcmp(content(at("a.txt")), "second") && temporaries() == 0, "replaced whole, no temporary left");

    /* abort: the old file stays */
    tlm_output *o;
    die_on(tlm_output_open(&o, at("a.txt")), "open");
    fputs("half", tlm_output_file(o));
    check(temporaries() == 1, "while open, one temporary beside the destination");
    tlm_output_abort(o);
    check(!strcmp(content(at("a.txt")), "second") && temporaries() == 0, "abort: the old file as it was, no temporary");

    /* refused destinations, left as they were */
    put(at("target.txt"), "target");
    TLM_ASSERT(symlink(at("target.txt"), at("link.txt")) == 0);
    check_status(write_text(at("link.txt"), "x"), TLM_ERR_INVALID_ARGUMENT, "symbolic link", "a symlink destination");
    struct stat ls;
    lstat(at("link.txt"), &ls);
    check(S_ISLNK(ls.st_mode) && !strcmp(content(at("target.txt")), "target"), "the symlink and its target untouched");
    mkdir(at("d"), 0700);
    check_status(write_text(at("d"), "x"), TLM_ERR_INVALID_ARGUMENT, "is a directory", "a directory destination");
    check_status(write_text("/dev/null", "x"), TLM_ERR_INVALID_ARGUMENT, "device node", "a device node destination");
    put(at("in.txt"), "input");
    tlm_output_input(at("in.txt"));
    check_status(write_text(at("in.txt"), "x"), TLM_ERR_INVALID_ARGUMENT, "is the input", "an input of the command");
    check(!strcmp(content(at("in.txt")), "input") && temporaries() == 0, "the input untouched, no temporary");
    char longp[4200];
    memset(longp, 'x', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    memcpy(longp, dir, strlen(dir));
    longp[strlen(dir)] = '/';
    check_status(write_text(longp, "x"), TLM_ERR_INVALID_ARGUMENT, "too long", "a 4199-character path");
    check_status(write_text(at("no/such/dir/f"), "x"), TLM_ERR_IO, "no/such/dir", "a missing directory");

    /* a batch: all or nothing */
    put(at("b1.txt"), "old1");
    tlm_output_batch_begin();
    check_status(write_text(at("b1.txt"), "new1"), TLM_OK, NULL, "batch: the first output staged");
    check(!strcmp(content(at("b1.txt")), "old1"), "batch: staged, not yet in place");
    check_status(write_text(at("d"), "new2"), TLM_ERR_INVALID_ARGUMENT, NULL, "batch: the second output refused");
    tlm_output_batch_end(false);
    check(!strcmp(content(at("b1.txt")), "old1") && temporaries() == 0,
          "batch given up: the first destination as it was, no temporary");
    tlm_output_batch_begin();
    write_text(at("b1.txt"), "new1");
    write_text(at("b2.txt"), "new2");
    check_status(tlm_output_batch_end(true), TLM_OK, NULL, "batch committed");
    check(!strcmp(content(at("b1.txt")), "new1") && !strcmp(content(at("b2.txt")), "new2") && temporaries() == 0,
          "batch committed: both in place, no temporary");

    /* a write that fails: a file-size limit of 4 KiB makes the writes fail as a full disk would */
    put(at("big.txt"), "old");
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {4096, 4096};
        setrlimit(RLIMIT_FSIZE, &rl);
        tlm_output *w;
        if (tlm_output_open(&w, at("big.txt")) != TLM_OK) _exit(3);
        for (int i = 0; i < 4000; i++) fputs("0123456789", tlm_output_file(w));
        const tlm_status s = tlm_output_commit(w);
        _exit(s == TLM_ERR_IO && strstr(tlm_last_error(), "big.txt") ? 0 : 4);
    }
    int status;
    waitpid(pid, &status, 0);
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0 && !strcmp(content(at("big.txt")), "old") && temporaries() == 0,
          "a failed write: reported naming the file (child exit %d), the old file kept, no temporary",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);

    /* SIGTERM while writing removes the temporary; SIGPIPE (stdout into a pipe whose reader left) too */
    check(killed_while_writing("sig.txt", SIGTERM),
          "SIGTERM while a file is open: the process dies of it, no file, no temporary");
    check(killed_while_writing("pipe.txt", SIGPIPE),
          "SIGPIPE while a file is open: the process dies of it, no file, no temporary");

    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    TLM_ASSERT(system(cmd) == 0);
    return test_finish();
}
