#include "core/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"

int map_file(const char *path, mapped_file *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return memra_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return memra_fail(err, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return memra_fail(err, "%s: not a regular file", path);
    }
    out->size = (size_t)st.st_size;
    if (out->size > 0) {
        void *p = mmap(NULL, out->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return memra_fail(err, "%s: cannot mmap %zu bytes: %s", path, out->size, strerror(e));
        }
        out->data = p;
    }
    close(fd);
    out->path = xstrdup(path);
    return 0;
}

void unmap_file(mapped_file *mf)
{
    if (mf->data)
        munmap((void *)mf->data, mf->size);
    free(mf->path);
    memset(mf, 0, sizeof *mf);
}

int read_small_file(const char *path, size_t max_bytes, char **out, size_t *out_len,
                    memra_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return memra_fail(err, "%s: cannot open: %s", path, strerror(errno));
    /* Read up to one byte past the limit: seeing that byte means too large. */
    size_t cap = max_bytes < 4096 ? max_bytes + 1 : 4096, len = 0;
    char *buf = xmalloc(cap + 1);
    for (;;) {
        if (len == cap) {
            if (cap > max_bytes)
                break;
            cap = cap * 2 > max_bytes + 1 ? max_bytes + 1 : cap * 2;
            buf = xrealloc(buf, cap + 1);
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return memra_fail(err, "%s: read error", path);
    }
    if (len > max_bytes) {
        free(buf);
        return memra_fail(err, "%s: larger than the %zu-byte limit", path, max_bytes);
    }
    buf[len] = '\0';
    *out = buf;
    if (out_len)
        *out_len = len;
    return 0;
}

int write_file_atomic(const char *path, const void *data, size_t len, memra_err *err)
{
    size_t n = strlen(path) + 8;
    char *tmp = xmalloc(n);
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int e = errno;
        free(tmp);
        return memra_fail(err, "%s: cannot create: %s", path, strerror(e));
    }
    int ok = fwrite(data, 1, len, f) == len;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        free(tmp);
        return memra_fail(err, "%s: write failed: %s", path, strerror(e));
    }
    free(tmp);
    return 0;
}
