// NCCL for the CUDA emulation (tests/gpu/emulate.sh): the calls memra's
// pipeline link makes (lib/backend/cuda/cuda_link.c), between processes on
// one machine, over Unix sockets. Built as a shared library that the link
// loads in place of libnccl.so.2 (MEMRA_NCCL).
//
// The emulated device's memory is host memory and its streams run each
// launch and copy when it is made, so a send writes the buffer's bytes at
// once and a receive reads them at once; every process makes its calls in
// the same order (the pipeline's contract), so each blocking write meets
// its read. The unique id names a rendezvous directory (a fresh one, or
// one from NCCL_COMM_ID); rank r listens on its socket r there and every
// pair of ranks is connected once at ncclCommInitRank.
#include <nccl.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct ncclComm {
    int n, rank;
    int fd[64];
    char dir[92]; // with "/r<rank>", within a socket path's 108 bytes
};

static const char prefix[] = "memra-emu-nccl:";

static ncclResult_t sys_fail(const char *what)
{
    fprintf(stderr, "emu nccl: %s: %s\n", what, strerror(errno));
    return ncclSystemError;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = static_cast<const char *>(p);
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL); // a peer gone is an error, not a signal
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
{
    char *c = static_cast<char *>(p);
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static void sock_path(const ncclComm *c, int r, sockaddr_un *a)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    snprintf(a->sun_path, sizeof a->sun_path, "%.91s/r%d", c->dir, r);
}

static size_t type_bytes(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    const char *env = getenv("NCCL_COMM_ID");
    char dir[100];
    if (env && *env) {
        snprintf(dir, sizeof dir, "/tmp/memra-emu-nccl-%s", env);
        for (char *p = dir + 5; *p; p++)
            if (*p == '/' || *p == ':')
                *p = '_';
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(dir, sizeof dir, "/tmp/memra-emu-nccl-%ld-%ld", (long)getpid(), (long)ts.tv_nsec);
    }
    snprintf(id->internal, sizeof id->internal, "%s%s", prefix, dir);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int n, ncclUniqueId id, int rank)
{
    if (n < 1 || n > 64 || rank < 0 || rank >= n ||
        strncmp(id.internal, prefix, sizeof prefix - 1) != 0)
        return ncclInvalidArgument;
    ncclComm *c = new ncclComm();
    c->n = n;
    c->rank = rank;
    const char *dir = id.internal + sizeof prefix - 1;
    size_t len = strnlen(dir, sizeof id.internal - (sizeof prefix - 1));
    if (len >= sizeof c->dir)
        return ncclInvalidArgument;
    memcpy(c->dir, dir, len);
    c->dir[len] = 0;
    if (mkdir(c->dir, 0700) != 0 && errno != EEXIST)
        return sys_fail("mkdir");
    int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a;
    sock_path(c, rank, &a);
    unlink(a.sun_path);
    if (lfd < 0 || bind(lfd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 ||
        listen(lfd, 64) != 0)
        return sys_fail("listen");
    // the lower ranks are connected to, the higher ones accepted
    for (int r = 0; r < rank; r++) {
        sockaddr_un p;
        sock_path(c, r, &p);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        int tries = 0;
        while (connect(fd, reinterpret_cast<sockaddr *>(&p), sizeof p) != 0) {
            if (++tries > 6000)
                return sys_fail("connect");
            usleep(10000);
        }
        if (write_all(fd, &rank, sizeof rank) != 0)
            return sys_fail("hello");
        c->fd[r] = fd;
    }
    for (int k = rank + 1; k < n; k++) {
        int fd = accept(lfd, NULL, NULL);
        int who = -1;
        if (fd < 0 || read_all(fd, &who, sizeof who) != 0 || who <= rank || who >= n)
            return sys_fail("accept");
        c->fd[who] = fd;
    }
    close(lfd);
    *out = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    for (int r = 0; r < c->n; r++)
        if (r != c->rank)
            close(c->fd[r]);
    sockaddr_un a;
    sock_path(c, c->rank, &a);
    unlink(a.sun_path);
    rmdir(c->dir); // the last one out removes it
    delete c;
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                      cudaStream_t)
{
    if (peer < 0 || peer >= c->n || peer == c->rank)
        return ncclInvalidArgument;
    return write_all(c->fd[peer], buf, count * type_bytes(t)) ? sys_fail("send") : ncclSuccess;
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                      cudaStream_t)
{
    if (peer < 0 || peer >= c->n || peer == c->rank)
        return ncclInvalidArgument;
    return read_all(c->fd[peer], buf, count * type_bytes(t)) ? sys_fail("recv") : ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t c, cudaStream_t)
{
    size_t n = count * type_bytes(t);
    if (root < 0 || root >= c->n)
        return ncclInvalidArgument;
    if (c->rank != root)
        return read_all(c->fd[root], recv, n) ? sys_fail("broadcast") : ncclSuccess;
    if (recv != send)
        memmove(recv, send, n);
    for (int r = 0; r < c->n; r++)
        if (r != root && write_all(c->fd[r], send, n) != 0)
            return sys_fail("broadcast");
    return ncclSuccess;
}

// A broken socket fails the call that meets it (above): nothing is left
// to report later.
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *err)
{
    *err = ncclSuccess;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) { return ncclCommDestroy(c); }

const char *ncclGetErrorString(ncclResult_t r)
{
    return r == ncclSuccess ? "no error" : r == ncclSystemError ? "system error (emulated)"
                                                                : "invalid argument (emulated)";
}

} // extern "C"
