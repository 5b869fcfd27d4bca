#include "core/memstat.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* "VmHWM:\t    1712 kB" -> bytes. */
static int kb_field(const char *line, const char *name, uint64_t *out)
{
    size_t n = strlen(name);
    if (strncmp(line, name, n) != 0 || line[n] != ':')
        return 0;
    uint64_t kb;
    if (sscanf(line + n + 1, " %" SCNu64 " kB", &kb) != 1)
        return 0;
    *out = kb * 1024;
    return 1;
}

int memstat_rss(uint64_t *current, uint64_t *peak, memra_err *err)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return memra_fail(err, "/proc/self/status: %s", strerror(errno));
    char line[256];
    int got_rss = 0, got_hwm = 0;
    while (fgets(line, sizeof line, f)) {
        got_rss |= kb_field(line, "VmRSS", current);
        got_hwm |= kb_field(line, "VmHWM", peak);
    }
    fclose(f);
    if (!got_rss || !got_hwm)
        return memra_fail(err, "/proc/self/status: no VmRSS/VmHWM lines");
    return 0;
}

int memstat_reset_peak(memra_err *err)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return memra_fail(err, "/proc/self/clear_refs: %s", strerror(errno));
    ssize_t w = write(fd, "5", 1);
    int e = errno;
    close(fd);
    if (w != 1)
        return memra_fail(err, "/proc/self/clear_refs: %s", strerror(e));
    return 0;
}
