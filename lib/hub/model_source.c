#include "hub/model_source.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "hub/hub.h"

int model_source_resolve(const char *spec, char **out_path, memra_err *err)
{
    *out_path = NULL;
    if (!spec || !spec[0])
        return memra_fail(err, "empty model path");
    struct stat st;
    /* An existing path wins, so a local file that happens to be named
     * "hf:..." can still be read as ./hf:... or as itself. */
    if (stat(spec, &st) == 0) {
        if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
            return memra_fail(err, "%s: not a file or directory", spec);
        *out_path = xstrdup(spec);
        return 0;
    }
    int e = errno;
    if (hub_is_spec(spec))
        return hub_resolve(spec, out_path, err);
    if (e == ENOENT)
        return memra_fail(err, "%s: no such file or directory", spec);
    return memra_fail(err, "%s: %s", spec, strerror(e));
}
