/* disk/io.c: the I/O engine behind mc__disk_op (internal.h).
 *
 * Workers (nthreads) take ops from the work list and run their CPU stages: start()
 * (the put's copy and checksum, the reservation) and, once the I/O is over, done() (the
 * get's verification and copy, the index update, the caller's callback).
 *
 * With io_uring (MC_DISK_HAVE_URING, and io_uring_queue_init succeeded) a started op
 * goes to the ring thread, which owns the ring: up to queue_depth ops in flight, a short
 * transfer resubmitted for the rest, a finished op handed back to the workers. New work
 * wakes the ring through an eventfd whose read is kept armed in the ring, so a single
 * io_uring_submit_and_wait sleeps until an I/O completes or new work arrives. The ring
 * thread runs no callbacks, so checksums and copies never leave the device idle.
 *
 * Without io_uring the workers do the I/O themselves with pread/pwrite (the thread
 * pool): nthreads requests in flight. */
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
    bool uring;                 /* the ring thread does the I/O */
    pthread_mutex_t lock;
    pthread_cond_t work_cv;     /* work listed, or stop (lock) */
    pthread_cond_t idle_cv;     /* live reached 0 (lock) */
    mc_list work;               /* ops to start, or whose I/O finished (lock) */
    uint64_t live;              /* ops submitted and not yet completed (lock) */
    bool stop;                  /* (lock) */
    unsigned nworkers;
    pthread_t *workers;
#ifdef MC_DISK_HAVE_URING
    mc_list ring_pending;       /* started ops waiting for the ring (lock) */
    pthread_t ring_thread;
    bool ring_running;
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

const char *mc__disk_io_name(const mc__disk_io *io)
{
    return io->uring ? "io_uring" : "threads";
}

static void op_complete(mc__disk_io *io)
{
    pthread_mutex_lock(&io->lock);
    if (--io->live == 0)
        pthread_cond_broadcast(&io->idle_cv);
    pthread_mutex_unlock(&io->lock);
}

static int64_t sync_io(mc__disk_op *op)
{
    uint64_t done = 0;
    while (done < op->len) {
        char *p = (char *)op->buf + done;
        off_t at = (off_t)(op->off + done);
        ssize_t r = op->write ? pwrite(op->fd, p, op->len - done, at)
                              : pread(op->fd, p, op->len - done, at);
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

#ifdef MC_DISK_HAVE_URING
static void ring_wake(mc__disk_io *io)
{
    uint64_t one = 1;
    ssize_t w = write(io->efd, &one, sizeof one);
    (void)w; /* the counter only overflows after 2^64 - 1 wakes */
}
#endif

static void *worker_main(void *arg)
{
    mc__disk_io *io = arg;
    pthread_mutex_lock(&io->lock);
    for (;;) {
        while (mc_list_empty(&io->work) && !io->stop)
            pthread_cond_wait(&io->work_cv, &io->lock);
        mc_list *n = mc_list_pop_front(&io->work);
        if (!n)
            break; /* stop, and nothing left */
        pthread_mutex_unlock(&io->lock);
        mc__disk_op *op = MC_CONTAINER_OF(n, mc__disk_op, link);
        if (op->io_done) {
            op->done(op, op->res);
            op_complete(io);
        } else if (!op->started && !op->start(op)) {
            op_complete(io);
#ifdef MC_DISK_HAVE_URING
        } else if (io->uring && op->len > 0) {
            op->xfer = 0;
            pthread_mutex_lock(&io->lock);
            mc_list_push_back(&io->ring_pending, &op->link);
            pthread_mutex_unlock(&io->lock);
            ring_wake(io);
#endif
        } else {
            op->done(op, op->len ? sync_io(op) : 0);
            op_complete(io);
        }
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
    uint64_t left = op->len - op->xfer;
    unsigned n = (unsigned)(left > (1u << 30) ? (1u << 30) : left);
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
        pthread_mutex_lock(&io->lock);
        while (inflight < io->depth && !mc_list_empty(&io->ring_pending)) {
            mc_list *n = mc_list_pop_front(&io->ring_pending);
            mc__disk_op *op = MC_CONTAINER_OF(n, mc__disk_op, link);
            queue_op(io, op);
            inflight++;
        }
        bool stop = io->stop && inflight == 0 && mc_list_empty(&io->ring_pending);
        pthread_mutex_unlock(&io->lock);
        if (stop)
            break;
        int rc = io_uring_submit_and_wait(&io->ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
            mc_log(MC_LOG_ERROR, TAG, "io_uring_submit_and_wait: %s", strerror(-rc));
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        bool rearm = false;
        mc_list finished;
        mc_list_init(&finished);
        io_uring_for_each_cqe(&io->ring, head, cqe)
        {
            seen++;
            if (io_uring_cqe_get_data64(cqe) == EFD_TAG) {
                rearm = true;
                continue;
            }
            mc__disk_op *op = io_uring_cqe_get_data(cqe);
            int res = cqe->res;
            if (res == -EINTR || res == -EAGAIN) {
                queue_op(io, op); /* again, as it was */
                continue;
            }
            if (res > 0) {
                op->xfer += (uint64_t)res;
                if (op->xfer < op->len) {
                    queue_op(io, op); /* short: the rest */
                    continue;
                }
                op->res = (int64_t)op->xfer;
            } else if (res == 0) {
                op->res = op->write ? -EIO : (int64_t)op->xfer; /* read: end of file */
            } else {
                op->res = res;
            }
            op->io_done = true;
            inflight--;
            mc_list_push_back(&finished, &op->link);
        }
        io_uring_cq_advance(&io->ring, seen);
        if (rearm)
            arm_efd(io);
        if (!mc_list_empty(&finished)) {
            /* finished I/O first: it frees staging memory and ends a caller's wait */
            pthread_mutex_lock(&io->lock);
            for (mc_list *n; (n = mc_list_back(&finished));) {
                mc_list_remove(n);
                mc_list_push_front(&io->work, n);
            }
            pthread_mutex_unlock(&io->lock);
            pthread_cond_broadcast(&io->work_cv);
        }
    }
    return NULL;
}

static bool ring_init(mc__disk_io *io, mc_disk_io_kind kind, unsigned queue_depth)
{
    io->depth = queue_depth ? queue_depth : 32;
    int rc = io_uring_queue_init(io->depth + 2, &io->ring, 0);
    if (rc == 0) {
        io->efd = eventfd(0, EFD_CLOEXEC);
        if (io->efd < 0) {
            rc = -errno;
            io_uring_queue_exit(&io->ring);
        }
    }
    if (rc != 0) {
        mc_log(kind == MC_DISK_IO_URING ? MC_LOG_WARN : MC_LOG_INFO, TAG,
               "io_uring unavailable (io_uring_queue_init(%u): %s): using the pread/pwrite "
               "thread pool", io->depth + 2, strerror(-rc));
        return false;
    }
    return true;
}
#endif

/* ------------------------------------------------------------------ common */
int mc__disk_io_create(mc_disk_io_kind kind, unsigned nthreads, unsigned queue_depth,
                       mc__disk_io **out)
{
    mc__disk_io *io = mc_xcalloc(1, sizeof *io);
    pthread_mutex_init(&io->lock, NULL);
    pthread_cond_init(&io->work_cv, NULL);
    pthread_cond_init(&io->idle_cv, NULL);
    mc_list_init(&io->work);
#ifdef MC_DISK_HAVE_URING
    mc_list_init(&io->ring_pending);
    io->efd = -1;
    if (kind != MC_DISK_IO_THREADS)
        io->uring = ring_init(io, kind, queue_depth);
    if (io->uring) {
        int rc = pthread_create(&io->ring_thread, NULL, ring_main, io);
        if (rc != 0) {
            mc__disk_io_destroy(io);
            return -rc;
        }
        io->ring_running = true;
    }
#else
    (void)queue_depth;
    if (kind == MC_DISK_IO_URING)
        mc_log(MC_LOG_WARN, TAG, "built without liburing: using the pread/pwrite thread pool");
#endif
    unsigned n = nthreads ? nthreads : 4;
    io->workers = mc_xcalloc(n, sizeof *io->workers);
    for (unsigned i = 0; i < n; i++) {
        int rc = pthread_create(&io->workers[i], NULL, worker_main, io);
        if (rc != 0) {
            mc__disk_io_destroy(io);
            return -rc;
        }
        io->nworkers++;
    }
    *out = io;
    return 0;
}

void mc__disk_io_submit_started(mc__disk_io *io, mc__disk_op *op)
{
    op->io_done = false;
    op->started = true;
#ifdef MC_DISK_HAVE_URING
    if (io->uring && op->len > 0) {
        op->xfer = 0;
        pthread_mutex_lock(&io->lock);
        io->live++;
        mc_list_push_back(&io->ring_pending, &op->link);
        pthread_mutex_unlock(&io->lock);
        ring_wake(io);
        return;
    }
#endif
    pthread_mutex_lock(&io->lock);
    io->live++;
    mc_list_push_back(&io->work, &op->link);
    pthread_mutex_unlock(&io->lock);
    pthread_cond_signal(&io->work_cv);
}

void mc__disk_io_submit(mc__disk_io *io, mc__disk_op *op)
{
    op->io_done = false;
    op->started = false;
    pthread_mutex_lock(&io->lock);
    io->live++;
    mc_list_push_back(&io->work, &op->link);
    pthread_mutex_unlock(&io->lock);
    pthread_cond_signal(&io->work_cv);
}

void mc__disk_io_destroy(mc__disk_io *io)
{
    if (!io)
        return;
    pthread_mutex_lock(&io->lock);
    while (io->live > 0)
        pthread_cond_wait(&io->idle_cv, &io->lock);
    io->stop = true;
    pthread_mutex_unlock(&io->lock);
    pthread_cond_broadcast(&io->work_cv);
    for (unsigned i = 0; i < io->nworkers; i++)
        pthread_join(io->workers[i], NULL);
#ifdef MC_DISK_HAVE_URING
    if (io->ring_running) {
        ring_wake(io);
        pthread_join(io->ring_thread, NULL);
    }
    if (io->uring)
        io_uring_queue_exit(&io->ring);
    if (io->efd >= 0)
        close(io->efd);
#endif
    free(io->workers);
    pthread_cond_destroy(&io->work_cv);
    pthread_cond_destroy(&io->idle_cv);
    pthread_mutex_destroy(&io->lock);
    free(io);
}
