/* disk/io.c: the two I/O engines behind mc__disk_op (internal.h).
 *
 * io_uring (MC_DISK_HAVE_URING, liburing): one ring thread owns the ring. Submitters
 * append to a pending list and bump an eventfd; the ring keeps one read of that eventfd
 * armed, so a single io_uring_submit_and_wait sleeps until either an I/O or new work
 * completes. Up to queue_depth ops are in flight; a short transfer is resubmitted for the
 * rest; start() and done() run on the ring thread.
 *
 * Thread pool: nthreads workers pop the pending list and run start(), then
 * pread/pwrite in a loop until done or error, then done().
 *
 * Both drain the pending list before they stop (mc__disk_io_destroy). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#ifdef MC_DISK_HAVE_URING
#include <liburing.h>
#endif

#include "common/xalloc.h"
#include "disk/internal.h"
#include "mooncake/log.h"

#define TAG "disk"

struct mc__disk_io {
    bool uring;
    pthread_mutex_t lock;
    pthread_cond_t cv;          /* pool: work or stop (lock) */
    mc_list pending;            /* (lock) */
    bool stop;                  /* (lock) */
    unsigned nthreads;
    pthread_t *threads;
#ifdef MC_DISK_HAVE_URING
    struct io_uring ring;       /* ring thread only */
    int efd;
    uint64_t efd_val;           /* target of the armed eventfd read (ring thread) */
    unsigned depth;
#endif
};

bool mc__disk_io_uring_built(void)
{
#ifdef MC_DISK_HAVE_URING
    return true;
#else
    return false;
#endif
}

const char *mc__disk_io_name(const mc__disk_io *io) { return io->uring ? "io_uring" : "threads"; }

/* ------------------------------------------------------------------ thread pool */
static int64_t sync_io(mc__disk_op *op)
{
    uint64_t done = 0;
    while (done < op->len) {
        ssize_t r = op->write
                        ? pwrite(op->fd, (char *)op->buf + done, op->len - done, (off_t)(op->off + done))
                        : pread(op->fd, (char *)op->buf + done, op->len - done, (off_t)(op->off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0) {
            if (op->write)
                return -EIO;   /* a zero-byte write makes no progress */
            break;             /* end of file: a short read */
        }
        done += (uint64_t)r;
    }
    return (int64_t)done;
}

static void *pool_main(void *arg)
{
    mc__disk_io *io = arg;
    pthread_mutex_lock(&io->lock);
    for (;;) {
        while (mc_list_empty(&io->pending) && !io->stop)
            pthread_cond_wait(&io->cv, &io->lock);
        mc_list *n = mc_list_pop_front(&io->pending);
        if (!n)
            break; /* stop, and nothing left */
        pthread_mutex_unlock(&io->lock);
        mc__disk_op *op = MC_CONTAINER_OF(n, mc__disk_op, link);
        if (op->start(op))
            op->done(op, sync_io(op));
        pthread_mutex_lock(&io->lock);
    }
    pthread_mutex_unlock(&io->lock);
    return NULL;
}

/* ------------------------------------------------------------------ io_uring */
#ifdef MC_DISK_HAVE_URING
#define EFD_TAG ((uint64_t)1)

static void arm_efd(mc__disk_io *io)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
    MC_ASSERT(sqe != NULL);
    io_uring_prep_read(sqe, io->efd, &io->efd_val, sizeof io->efd_val, 0);
    io_uring_sqe_set_data64(sqe, EFD_TAG);
}

static void queue_op(mc__disk_io *io, mc__disk_op *op)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
    MC_ASSERT(sqe != NULL); /* in flight <= depth, the ring has depth + 2 entries */
    char *p = (char *)op->buf + op->xfer;
    unsigned n = (unsigned)(op->len - op->xfer > (1u << 30) ? (1u << 30) : op->len - op->xfer);
    if (op->write)
        io_uring_prep_write(sqe, op->fd, p, n, op->off + op->xfer);
    else
        io_uring_prep_read(sqe, op->fd, p, n, op->off + op->xfer);
    io_uring_sqe_set_data(sqe, op);
}

static void *ring_main(void *arg)
{
    mc__disk_io *io = arg;
    unsigned inflight = 0;
    arm_efd(io);
    for (;;) {
        mc_list grabbed;
        mc_list_init(&grabbed);
        pthread_mutex_lock(&io->lock);
        bool stop = io->stop;
        while (inflight < io->depth && !mc_list_empty(&io->pending)) {
            mc_list_push_back(&grabbed, mc_list_pop_front(&io->pending));
            inflight++;
        }
        bool more = !mc_list_empty(&io->pending);
        pthread_mutex_unlock(&io->lock);
        for (mc_list *n; (n = mc_list_pop_front(&grabbed));) {
            mc__disk_op *op = MC_CONTAINER_OF(n, mc__disk_op, link);
            op->xfer = 0;
            if (!op->start(op)) {
                inflight--;
                continue;
            }
            if (op->len == 0) {
                inflight--;
                op->done(op, 0);
                continue;
            }
            queue_op(io, op);
        }
        if (stop && inflight == 0 && !more) {
            pthread_mutex_lock(&io->lock);
            bool empty = mc_list_empty(&io->pending);
            pthread_mutex_unlock(&io->lock);
            if (empty)
                break;
            continue;
        }
        if (more && inflight < io->depth)
            continue; /* ops were completed inside start(): take more before waiting */
        int rc = io_uring_submit_and_wait(&io->ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            mc_log(MC_LOG_ERROR, TAG, "io_uring_submit_and_wait: %s", strerror(-rc));
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        bool rearm = false;
        mc_list finished;
        mc_list_init(&finished);
        io_uring_for_each_cqe(&io->ring, head, cqe)
        {
            seen++;
            uint64_t tag = io_uring_cqe_get_data64(cqe);
            if (tag == EFD_TAG) {
                rearm = true;
                continue;
            }
            mc__disk_op *op = io_uring_cqe_get_data(cqe);
            int res = cqe->res;
            if (res == -EINTR || res == -EAGAIN) {
                queue_op(io, op);
                continue;
            }
            if (res > 0) {
                op->xfer += (uint64_t)res;
                if (op->xfer < op->len) {
                    queue_op(io, op); /* short: the rest */
                    continue;
                }
            } else if (res == 0 && op->write) {
                op->xfer = 0;
                res = -EIO;
            }
            /* res < 0: an error; res == 0 on a read: end of file (short) */
            op->err = res < 0 ? res : 0;
            mc_list_push_back(&finished, &op->link);
        }
        io_uring_cq_advance(&io->ring, seen);
        if (rearm)
            arm_efd(io);
        for (mc_list *n; (n = mc_list_pop_front(&finished));) {
            mc__disk_op *op = MC_CONTAINER_OF(n, mc__disk_op, link);
            inflight--;
            int64_t res = op->err < 0 ? op->err : (int64_t)op->xfer;
            op->done(op, res);
        }
    }
    return NULL;
}
#endif

/* ------------------------------------------------------------------ common */
int mc__disk_io_create(mc_disk_io_kind kind, unsigned nthreads, unsigned queue_depth,
                       mc__disk_io **out)
{
    mc__disk_io *io = mc_xcalloc(1, sizeof *io);
    pthread_mutex_init(&io->lock, NULL);
    pthread_cond_init(&io->cv, NULL);
    mc_list_init(&io->pending);
#ifdef MC_DISK_HAVE_URING
    io->efd = -1;
    if (kind != MC_DISK_IO_THREADS) {
        io->depth = queue_depth ? queue_depth : 64;
        int rc = io_uring_queue_init(io->depth + 2, &io->ring, 0);
        if (rc == 0) {
            io->efd = eventfd(0, EFD_CLOEXEC);
            if (io->efd < 0) {
                rc = -errno;
                io_uring_queue_exit(&io->ring);
            }
        }
        if (rc == 0) {
            io->uring = true;
        } else {
            mc_log(kind == MC_DISK_IO_URING ? MC_LOG_WARN : MC_LOG_INFO, TAG,
                   "io_uring unavailable (%s): using the pread/pwrite thread pool",
                   strerror(-rc));
        }
    }
#else
    (void)queue_depth;
    if (kind == MC_DISK_IO_URING)
        mc_log(MC_LOG_WARN, TAG, "built without liburing: using the pread/pwrite thread pool");
#endif
    io->nthreads = io->uring ? 1 : (nthreads ? nthreads : 4);
    io->threads = mc_xcalloc(io->nthreads, sizeof *io->threads);
    for (unsigned i = 0; i < io->nthreads; i++) {
        int rc;
#ifdef MC_DISK_HAVE_URING
        if (io->uring)
            rc = pthread_create(&io->threads[i], NULL, ring_main, io);
        else
#endif
            rc = pthread_create(&io->threads[i], NULL, pool_main, io);
        if (rc != 0) {
            io->nthreads = i;
            mc__disk_io_destroy(io);
            return -rc;
        }
    }
    *out = io;
    return 0;
}

void mc__disk_io_submit(mc__disk_io *io, mc__disk_op *op)
{
    pthread_mutex_lock(&io->lock);
    mc_list_push_back(&io->pending, &op->link);
    pthread_mutex_unlock(&io->lock);
#ifdef MC_DISK_HAVE_URING
    if (io->uring) {
        uint64_t one = 1;
        ssize_t w = write(io->efd, &one, sizeof one);
        (void)w; /* the counter can only overflow after 2^64 - 1 wakes */
        return;
    }
#endif
    pthread_cond_signal(&io->cv);
}

void mc__disk_io_destroy(mc__disk_io *io)
{
    if (!io)
        return;
    pthread_mutex_lock(&io->lock);
    io->stop = true;
    pthread_mutex_unlock(&io->lock);
#ifdef MC_DISK_HAVE_URING
    if (io->uring) {
        uint64_t one = 1;
        ssize_t w = write(io->efd, &one, sizeof one);
        (void)w;
    }
#endif
    pthread_cond_broadcast(&io->cv);
    for (unsigned i = 0; i < io->nthreads; i++)
        pthread_join(io->threads[i], NULL);
#ifdef MC_DISK_HAVE_URING
    if (io->uring)
        io_uring_queue_exit(&io->ring);
    if (io->efd >= 0)
        close(io->efd);
#endif
    free(io->threads);
    pthread_cond_destroy(&io->cv);
    pthread_mutex_destroy(&io->lock);
    free(io);
}
