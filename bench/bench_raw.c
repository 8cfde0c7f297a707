/* bench_raw: the physical baselines the transfer-engine benchmark compares against,
 * measured on this box in the same run (driven by bench/bench_transfer.py).
 *   bench_raw tcp BLOCK SECONDS [SPAN] [STREAMS]
 *       STREAMS (default 1) loopback TCP streams between two processes, one thread per
 *       stream on each side: each sender send()s BLOCK bytes at a time, each receiver
 *       recv()s BLOCK bytes at a time (MSG_WAITALL); together they walk through SPAN
 *       bytes of memory on each side (default BLOCK: one cache-hot buffer), so the memory
 *       footprint can match the engine run it is compared with. Throughput is measured
 *       at the receivers (all bytes over the longest receiver's time); "threads" in the
 *       output is STREAMS.
 *   bench_raw pingpong BLOCK SECONDS [POLL]
 *       One loopback TCP connection between two processes: BLOCK bytes go one way and
 *       come back, one round trip at a time, for SECONDS. POLL 0 (default): both sides
 *       block in recv(); 1: both sides poll with recv(MSG_DONTWAIT). The difference is
 *       what a sleeping thread's wakeup costs on this box (common/spin.h, issue 17);
 *       meaningful on an otherwise idle box (a busy one never lets a CPU sleep).
 *       Prints {"kind": "pingpong", "block", "poll", "round_trips", "us_per_round_trip"}.
 *   bench_raw memcpy BLOCK SECONDS [SPAN] [THREADS]
 *       THREADS threads (default 1) each memcpy BLOCK-byte pieces walking through SPAN
 *       bytes (default 256 MiB) of their own source and destination.
 * Prints one JSON line: {"kind": ..., "block": B, "span": S, "threads": T, "seconds": s,
 * "bytes": N, "GBps": X} (GB = 1e9 bytes). */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void report(const char *kind, size_t block, size_t span, int threads, double secs,
                   uint64_t bytes)
{
    printf("{\"kind\": \"%s\", \"block\": %zu, \"span\": %zu, \"threads\": %d, "
           "\"seconds\": %.3f, \"bytes\": %llu, \"GBps\": %.4f}\n",
           kind, block, span, threads, secs, (unsigned long long)bytes,
           (double)bytes / secs / 1e9);
}

typedef struct tstream {
    pthread_t th;
    int fd;
    size_t block, span;
    double seconds, el;
    uint64_t got;
    int failed;
} tstream;

/* Receiver of one stream: recv(MSG_WAITALL) one block at a time until EOF. */
static void *tcp_recv_thread(void *arg)
{
    tstream *t = arg;
    char *buf = malloc(t->span);
    memset(buf, 0, t->span);
    size_t nblk = t->span / t->block, i = 0;
    double t0 = 0;
    for (;;) {
        ssize_t k = recv(t->fd, buf + (i++ % nblk) * t->block, t->block, MSG_WAITALL);
        if (k <= 0)
            break;
        if (!t0)
            t0 = now_s();
        t->got += (uint64_t)k;
    }
    t->el = t0 ? now_s() - t0 : 0;
    free(buf);
    return NULL;
}

/* Sender of one stream: send() one block at a time for t->seconds, then close. */
static void *tcp_send_thread(void *arg)
{
    tstream *t = arg;
    char *buf = malloc(t->span);
    memset(buf, 1, t->span);
    size_t nblk = t->span / t->block, j = 0;
    double end = now_s() + t->seconds;
    while (!t->failed && now_s() < end) {
        for (int i = 0; i < 16 && !t->failed; i++) {
            size_t off = 0;
            char *p = buf + (j++ % nblk) * t->block;
            while (off < t->block) {
                ssize_t k = send(t->fd, p + off, t->block - off, MSG_NOSIGNAL);
                if (k <= 0) {
                    t->failed = 1;
                    break;
                }
                off += (size_t)k;
            }
        }
    }
    close(t->fd);
    free(buf);
    return NULL;
}

/* STREAMS loopback TCP streams between two processes, one thread per stream on each
 * side; each stream walks span/STREAMS bytes. Throughput: all bytes received over the
 * longest receiver's time. */
static int run_tcp(size_t block, double seconds, size_t span, int streams)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
        listen(lfd, streams) < 0 || getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0)
        return 1;
    size_t per = span / (size_t)streams;
    if (per < block)
        per = block;
    int res[2];
    if (pipe(res) < 0)
        return 1;
    pid_t pid = fork();
    if (pid == 0) { /* receivers */
        close(res[0]);
        tstream *ts = calloc((size_t)streams, sizeof *ts);
        for (int i = 0; i < streams; i++) {
            ts[i] = (tstream){.fd = socket(AF_INET, SOCK_STREAM, 0), .block = block,
                              .span = per};
            if (connect(ts[i].fd, (struct sockaddr *)&sa, sizeof sa) < 0)
                _exit(1);
        }
        for (int i = 0; i < streams; i++)
            pthread_create(&ts[i].th, NULL, tcp_recv_thread, &ts[i]);
        uint64_t got = 0;
        double el = 0;
        for (int i = 0; i < streams; i++) {
            pthread_join(ts[i].th, NULL);
            got += ts[i].got;
            if (ts[i].el > el)
                el = ts[i].el;
        }
        char line[128];
        int n = snprintf(line, sizeof line, "%llu %.9f", (unsigned long long)got, el);
        if (write(res[1], line, (size_t)n) < 0)
            _exit(1);
        _exit(0);
    }
    close(res[1]);
    tstream *ts = calloc((size_t)streams, sizeof *ts);
    for (int i = 0; i < streams; i++) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            return 1;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        ts[i] = (tstream){.fd = fd, .block = block, .span = per, .seconds = seconds};
    }
    for (int i = 0; i < streams; i++)
        pthread_create(&ts[i].th, NULL, tcp_send_thread, &ts[i]);
    int failed = 0;
    for (int i = 0; i < streams; i++) {
        pthread_join(ts[i].th, NULL);
        failed |= ts[i].failed;
    }
    free(ts);
    char line[128] = {0};
    if (failed || read(res[0], line, sizeof line - 1) <= 0)
        return 1;
    waitpid(pid, NULL, 0);
    unsigned long long got;
    double el;
    if (sscanf(line, "%llu %lf", &got, &el) != 2)
        return 1;
    report("raw_tcp", block, span, streams, el, got);
    return 0;
}

typedef struct mthr {
    pthread_t th;
    size_t block, span;
    double seconds, secs;
    uint64_t bytes;
} mthr;

static void *memcpy_thread(void *arg)
{
    mthr *m = arg;
    char *a = malloc(m->span), *b = malloc(m->span);
    memset(a, 1, m->span);
    memset(b, 2, m->span);
    size_t nblk = m->span / m->block, i = 0;
    double t0 = now_s(), end = t0 + m->seconds, t;
    do {
        for (int k = 0; k < 64; k++) {
            size_t off = (i++ % nblk) * m->block;
            memcpy(b + off, a + off, m->block);
            m->bytes += m->block;
        }
        t = now_s();
    } while (t < end);
    m->secs = t - t0;
    free(a);
    free(b);
    return NULL;
}

static int run_memcpy(size_t block, double seconds, size_t span, int threads)
{
    mthr *ms = calloc((size_t)threads, sizeof *ms);
    for (int i = 0; i < threads; i++) {
        ms[i] = (mthr){.block = block, .span = span, .seconds = seconds};
        pthread_create(&ms[i].th, NULL, memcpy_thread, &ms[i]);
    }
    uint64_t bytes = 0;
    double secs = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(ms[i].th, NULL);
        bytes += ms[i].bytes;
        if (ms[i].secs > secs)
            secs = ms[i].secs;
    }
    report("memcpy", block, span, threads, secs, bytes);
    free(ms);
    return 0;
}

/* Receives exactly n bytes, blocking or polling; 0 or -1 (EOF, error). */
static int recv_exact(int fd, char *p, size_t n, int poll)
{
    unsigned tries = 0;
    while (n) {
        ssize_t k = recv(fd, p, n, poll ? MSG_DONTWAIT : 0);
        if (k < 0 && poll && ++tries % 64 == 0)
            sched_yield(); /* as common/spin.c: the core goes to whoever else wants it */
        if (k > 0) {
            p += k;
            n -= (size_t)k;
        } else if (k == 0 || !poll || (errno != EAGAIN && errno != EWOULDBLOCK)) {
            return -1;
        }
    }
    return 0;
}

static int send_exact(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* see the header: round trips of BLOCK bytes over one loopback connection */
static int run_pingpong(size_t block, double seconds, int polling)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 1) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0)
        return 1;
    int one = 1;
    char *buf = calloc(1, block);
    if (!buf) {
        close(lfd);
        return 1;
    }
    pid_t pid = fork();
    if (pid == 0) { /* the echo side */
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (c < 0 || connect(c, (struct sockaddr *)&sa, sizeof sa) < 0)
            _exit(1);
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        while (recv_exact(c, buf, block, polling) == 0 && send_exact(c, buf, block) == 0) {
        }
        _exit(0);
    }
    struct pollfd pf = {.fd = lfd, .events = POLLIN}; /* a child that failed: no hang */
    int fd = poll(&pf, 1, 10000) == 1 ? accept(lfd, NULL, NULL) : -1;
    close(lfd);
    if (fd < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        free(buf);
        return 1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    uint64_t n = 0;
    double t0 = now_s(), end = t0 + seconds, el;
    int rc = 0;
    do {
        for (int i = 0; i < 64 && !rc; i++, n++)
            rc = send_exact(fd, buf, block) < 0 || recv_exact(fd, buf, block, polling) < 0;
        el = now_s() - t0;
    } while (!rc && t0 + el < end);
    close(fd); /* the echo side sees EOF and exits */
    waitpid(pid, NULL, 0);
    free(buf);
    if (rc)
        return 1;
    printf("{\"kind\": \"pingpong\", \"block\": %zu, \"poll\": %d, \"round_trips\": %llu, "
           "\"us_per_round_trip\": %.2f}\n",
           block, polling, (unsigned long long)n, el / (double)n * 1e6);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 6) {
        fprintf(stderr, "usage: %s tcp|memcpy BLOCK SECONDS [SPAN] [THREADS] | pingpong BLOCK SECONDS [POLL]\n", argv[0]);
        return 2;
    }
    size_t block = strtoull(argv[2], NULL, 0);
    double secs = atof(argv[3]);
    if (strcmp(argv[1], "pingpong") == 0)
        return block && secs > 0 ? run_pingpong(block, secs, argc > 4 && atoi(argv[4])) : 2;
    int tcp = strcmp(argv[1], "tcp") == 0;
    size_t span = argc > 4 ? strtoull(argv[4], NULL, 0) : tcp ? block : (256u << 20);
    int threads = argc > 5 ? atoi(argv[5]) : 1;
    if (!block || secs <= 0 || threads < 1 || threads > 256)
        return 2;
    if (span < block)
        span = block;
    if (tcp)
        return run_tcp(block, secs, span, threads);
    if (strcmp(argv[1], "memcpy") == 0)
        return run_memcpy(block, secs, span, threads);
    return 2;
}
