/* test_files.h — a test's scratch folder: test_path_in() names a file in it, test_temporaries_in()
 * counts the writer's temporary files (".<name>.XXXXXX", output.h) left in it. */
#ifndef TLM_TESTS_TEST_FILES_H
#define TLM_TESTS_TEST_FILES_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>

/* "dir/name"; the text stays valid for the next 7 calls */
static inline const char *test_path_in(const char *dir, const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

/* the hidden files in dir: temporaries the writer left behind */
static inline int test_temporaries_in(const char *dir) {
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

#endif
