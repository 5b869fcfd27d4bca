/* A pipeline stage in a process of its own (backend_pipeline_join,
 * docs/decisions/0036): the CUDA backend's link to the other stages'
 * processes, an NCCL communicator of one rank a process.
 *
 * NCCL is loaded at run time (dlopen of libnccl.so.2; MEMRA_NCCL names
 * another path), so no memra binary needs it to start, as with
 * cuBLASLt: only a process that joins a pipeline loads it, and fails
 * naming it when it cannot.
 *
 * The processes meet through NCCL's unique id: rank 0 makes it
 * (ncclGetUniqueId, which opens the listener the others connect to) and
 * writes it, as hex, into the id file (a temporary name renamed into
 * place, so a reader never sees half of it); the others wait for the file
 * and read it. Rank 0 removes the file when its backend is destroyed, so
 * a stale id does not outlive its run. Without a file, NCCL_COMM_ID
 * (HOST:PORT) gives every process the same id, rank 0 listening there.
 *
 * Send, receive and share run on the backend's stream, in order with its
 * ops; share (host bytes from one rank to all: the logits, the sampled
 * tokens) goes through a device buffer, NCCL's broadcast, and waits. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The header has old-style declarations (ncclGroupStart() and others). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "backend/cuda/cuda_internal.h"
#include "core/check.h"

/* How long a rank waits for rank 0's id file. */
enum { LINK_ID_WAIT_S = 300 };

struct cuda_link {
    void *lib;
    ncclComm_t comm;
    int n, rank;
    int aborted;    /* the communicator was aborted (a peer gone): nothing to destroy */
    char *id_file;  /* rank 0's, removed at the end */
    void *buf;      /* device staging of link_share */
    size_t cap;
    __typeof__(&ncclGetUniqueId) get_id;
    __typeof__(&ncclCommInitRank) init;
    __typeof__(&ncclCommDestroy) destroy;
    __typeof__(&ncclSend) send;
    __typeof__(&ncclRecv) recv;
    __typeof__(&ncclBroadcast) bcast;
    __typeof__(&ncclGetErrorString) errstr;
    __typeof__(&ncclCommGetAsyncError) async_error;
    __typeof__(&ncclCommAbort) abort;
};

#define LOAD(l, field, name)                                                  \
    do {                                                                      \
        void *sym = dlsym((l)->lib, name);                                    \
        if (!sym)                                                             \
            return memra_fail(err, "NCCL: %s is missing from the library", name); \
        memcpy(&(l)->field, &sym, sizeof sym);                                \
    } while (0)

static int load_symbols(cuda_link *l, memra_err *err)
{
    LOAD(l, get_id, "ncclGetUniqueId");
    LOAD(l, init, "ncclCommInitRank");
    LOAD(l, destroy, "ncclCommDestroy");
    LOAD(l, send, "ncclSend");
    LOAD(l, recv, "ncclRecv");
    LOAD(l, bcast, "ncclBroadcast");
    LOAD(l, errstr, "ncclGetErrorString");
    LOAD(l, async_error, "ncclCommGetAsyncError");
    LOAD(l, abort, "ncclCommAbort");
    return 0;
}

static int write_id(const char *path, const ncclUniqueId *id, memra_err *err)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >= (int)sizeof tmp)
        return memra_fail(err, "--nccl-id %s: the path is too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return memra_fail(err, "--nccl-id %s: cannot write %s: %s", path, tmp, strerror(errno));
    const unsigned char *b = (const unsigned char *)id->internal;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
        fprintf(f, "%02x", b[i]);
    fputc('\n', f);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return memra_fail(err, "--nccl-id %s: cannot write it: %s", path, strerror(e));
    }
    return 0;
}

static int hex_digit(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Wait for rank 0's file (it appears whole: renamed into place). */
static int read_id(const char *path, ncclUniqueId *id, memra_err *err)
{
    struct timespec nap = {0, 50 * 1000 * 1000};
    FILE *f = NULL;
    for (int i = 0; i < LINK_ID_WAIT_S * 20 && !(f = fopen(path, "r")); i++)
        nanosleep(&nap, NULL);
    if (!f)
        return memra_fail(err, "--nccl-id %s: rank 0 did not write it within %d s (start rank "
                          "0 with the same path)", path, LINK_ID_WAIT_S);
    char hex[2 * NCCL_UNIQUE_ID_BYTES + 2];
    size_t got = fread(hex, 1, sizeof hex, f);
    fclose(f);
    if (got < 2 * NCCL_UNIQUE_ID_BYTES)
        return memra_fail(err, "--nccl-id %s: %zu bytes, not an NCCL id (%d hex digits)", path,
                          got, 2 * NCCL_UNIQUE_ID_BYTES);
    unsigned char *b = (unsigned char *)id->internal;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
        int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return memra_fail(err, "--nccl-id %s: byte %d is not hex: not an NCCL id", path,
                              2 * i);
        b[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

static int nccl_ok(cuda_backend *cb, ncclResult_t r, const char *what)
{
    if (r == ncclSuccess)
        return 0;
    return cuda_failf(cb, "NCCL %s failed: %s", what, cb->link->errstr(r));
}

int cuda_link_join(backend *b, const char *id_file, int n_ranks, int rank, memra_err *err)
{
    cuda_backend *cb = cuda_of(b);
    if (cb->link)
        return memra_fail(err, "NCCL: this backend has joined a pipeline already");
    cuda_link *l = xcalloc(1, sizeof *l);
    l->n = n_ranks;
    l->rank = rank;
    l->lib = cuda_dlopen("MEMRA_NCCL", "libnccl.so.2");
    if (!l->lib) {
        free(l);
        return memra_fail(err, "NCCL: cannot load libnccl.so.2 (%s; MEMRA_NCCL names the "
                          "library)", dlerror());
    }
    if (load_symbols(l, err) != 0) {
        dlclose(l->lib);
        free(l);
        return -1;
    }
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    int rc = 0;
    if (!id_file || rank == 0) {
        ncclResult_t r = l->get_id(&id);
        if (r != ncclSuccess)
            rc = memra_fail(err, "NCCL: ncclGetUniqueId failed: %s", l->errstr(r));
        else if (id_file && write_id(id_file, &id, err) == 0)
            l->id_file = xstrdup(id_file);
        else if (id_file)
            rc = -1;
    } else {
        rc = read_id(id_file, &id, err);
    }
    if (rc == 0) {
        ncclResult_t r = l->init(&l->comm, n_ranks, id, rank);
        if (r != ncclSuccess)
            rc = memra_fail(err, "NCCL: joining as rank %d of %d failed: %s", rank, n_ranks,
                            l->errstr(r));
    }
    if (rc != 0) {
        if (l->id_file)
            remove(l->id_file);
        free(l->id_file);
        dlclose(l->lib);
        free(l);
        return -1;
    }
    cb->link = l;
    return 0;
}

void cuda_link_free(cuda_backend *cb)
{
    cuda_link *l = cb->link;
    if (!l)
        return;
    if (!l->aborted)
        l->destroy(l->comm);
    if (l->id_file)
        remove(l->id_file);
    free(l->id_file);
    cudaFree(l->buf);
    dlclose(l->lib);
    free(l);
    cb->link = NULL;
}

int cuda_link_send(backend *b, const float *src, size_t n, int peer)
{
    cuda_backend *cb = cuda_of(b);
    if (cb->failed || !cb->link)
        return -1;
    cuda_flush_pending(cb); /* a held-back add into src goes first */
    return nccl_ok(cb, cb->link->send(src, n, ncclFloat32, peer, cb->link->comm, cb->stream),
                   "send");
}

int cuda_link_recv(backend *b, float *dst, size_t n, int peer)
{
    cuda_backend *cb = cuda_of(b);
    if (cb->failed || !cb->link)
        return -1;
    cuda_xshadow_drop(cb);
    cuda_flush_pending(cb);
    return nccl_ok(cb, cb->link->recv(dst, n, ncclFloat32, peer, cb->link->comm, cb->stream),
                   "receive");
}

/* Wait for the stream's work, watching the communicator: a process of the
 * pipeline that stopped, or a network that failed, shows as NCCL's
 * asynchronous error while the stream would wait for its data forever.
 * Then the communicator is aborted (its kernels return) and the failure
 * recorded, naming it. */
static int link_wait(cuda_backend *cb)
{
    cuda_link *l = cb->link;
    const struct timespec nap = {0, 50 * 1000};
    for (unsigned i = 0;; i++) {
        cudaError_t rc = cudaStreamQuery(cb->stream);
        if (rc == cudaSuccess)
            return 0;
        if (rc != cudaErrorNotReady)
            return CU_OK(cb, rc);
        cudaGetLastError(); /* (not ready is no error) */
        if (i % 64 == 63) {
            ncclResult_t e = ncclSuccess;
            if (l->async_error(l->comm, &e) == ncclSuccess && e != ncclSuccess &&
                e != ncclInProgress) {
                l->abort(l->comm);
                l->aborted = 1;
                return cuda_failf(cb, "NCCL: the link to the pipeline's other processes failed "
                                  "(%s): one of them stopped, or the network between them failed",
                                  l->errstr(e));
            }
        }
        if (i >= 16)
            nanosleep(&nap, NULL);
    }
}

int cuda_link_share(backend *b, void *host, size_t bytes, int root)
{
    cuda_backend *cb = cuda_of(b);
    cuda_link *l = cb->link;
    if (cb->failed || !l)
        return -1;
    if (bytes == 0)
        return link_wait(cb);
    if (bytes > l->cap) {
        if (link_wait(cb) != 0)
            return -1;
        cudaFree(l->buf);
        l->buf = NULL;
        l->cap = 0;
        if (cuda_alloc(cb, &l->buf, bytes, "the pipeline's shared outputs", 1, NULL) != 0)
            return -1;
        l->cap = bytes;
    }
    if (l->rank == root &&
        CU_OK(cb, cudaMemcpyAsync(l->buf, host, bytes, cudaMemcpyHostToDevice, cb->stream)))
        return -1;
    if (nccl_ok(cb, l->bcast(l->buf, l->buf, bytes, ncclUint8, root, l->comm, cb->stream),
                "broadcast"))
        return -1;
    if (l->rank != root &&
        CU_OK(cb, cudaMemcpyAsync(host, l->buf, bytes, cudaMemcpyDeviceToHost, cb->stream)))
        return -1;
    return link_wait(cb);
}
