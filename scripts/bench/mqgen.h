/* What the compiled benchmark clients share (gen.c: the load generator, consume.c: the consumer): growable
 * buffers, non-blocking connections, clocks, the few fields of a JSON answer header they read, and the JSON
 * report's latency distributions. Header-only (static functions): each client is one translation unit. */
#ifndef MQGEN_H
#define MQGEN_H
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

typedef struct { char *p; size_t len, cap, off; } buf_t;

static inline double now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline double now_real(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline void die(const char *msg) { fprintf(stderr, "mqgen: %s (%s)\n", msg, strerror(errno)); exit(2); }

static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory");
    return p;
}

static inline void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) die("out of memory");
    return p;
}

static inline void buf_reserve(buf_t *b, size_t extra) {
    if (b->len + extra <= b->cap) return;
    if (b->off) { memmove(b->p, b->p + b->off, b->len - b->off); b->len -= b->off; b->off = 0; }
    if (b->len + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < b->len + extra) cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

static inline void put_be32(char *p, uint32_t v) { v = htonl(v); memcpy(p, &v, 4); }

static inline uint32_t get_be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline int64_t get_be64(const unsigned char *p) {
    return (int64_t)(((uint64_t)get_be32(p) << 32) | get_be32(p + 4));
}

/* "host:port" split into host and port; exits on a malformed address */
static inline void split_addr(const char *addr, char *host, size_t hcap, char *port, size_t pcap) {
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= hcap || strlen(colon + 1) >= pcap) {
        fprintf(stderr, "mqgen: bad address %s\n", addr);
        exit(2);
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    strcpy(port, colon + 1);
}

static inline int connect_to(const char *addr) {
    char host[256], port[16];
    split_addr(addr, host, sizeof host, port, sizeof port);
    struct addrinfo hints = {0}, *res;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res) != 0) { fprintf(stderr, "mqgen: cannot resolve %s\n", host); exit(2); }
    int fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0) die("connect");
    freeaddrinfo(res);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* write what `b` holds; 1 all written, 0 the socket is full (wait for EPOLLOUT) */
static inline int write_out(int fd, buf_t *b) {
    while (b->off < b->len) {
        ssize_t w = write(fd, b->p + b->off, b->len - b->off);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            if (errno == EINTR) continue;
            die("write");
        }
        b->off += (size_t)w;
    }
    b->off = b->len = 0;
    return 1;
}

/* One connection of a client: its socket, output and input buffers, the generator's sends in flight on it, and
 * whether epoll also waits for it to be writable. */
typedef struct { int fd; buf_t out, in; long inflight; int want_out; } conn_t;

/* epoll waits for `c` to be writable too (want_out) or not: changed only when it changes (no epoll_ctl per send) */
static inline void set_events(int ep, conn_t *c, int want_out) {
    if (c->want_out == want_out) return;
    c->want_out = want_out;
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* write what c holds; wait for EPOLLOUT when the socket is full */
static inline void flush_out(int ep, conn_t *c) { set_events(ep, c, !write_out(c->fd, &c->out)); }

/* read what the socket has into `b`; 0 when the peer closed it */
static inline int read_in(int fd, buf_t *b) {
    for (;;) {
        buf_reserve(b, 65536);
        ssize_t r = read(fd, b->p + b->len, b->cap - b->len);
        if (r > 0) { b->len += (size_t)r; continue; }
        if (r == 0) return 0;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 1;
        if (errno == EINTR) continue;
        die("read");
    }
}

/* The next whole frame in `b`: its header [*h, *h + *hlen) and body [*body, *body + *blen); 0 when incomplete.
 * *json: the header is JSON (serialize type 0). */
static inline int next_frame(buf_t *b, const char **h, size_t *hlen, const char **body, size_t *blen, int *json) {
    size_t avail = b->len - b->off;
    if (avail < 8) return 0;
    const unsigned char *p = (const unsigned char *)b->p + b->off;
    uint32_t total = get_be32(p);
    if (avail < 4 + (size_t)total) return 0;
    uint32_t hl = get_be32(p + 4) & 0xFFFFFF;
    if (hl + 4 > total) hl = total - 4;
    *json = p[4] == 0;
    *h = (const char *)p + 8;
    *hlen = hl;
    *body = (const char *)p + 8 + hl;
    *blen = total - 4 - hl;
    b->off += 4 + total;
    return 1;
}

static inline void frames_done(buf_t *b) { if (b->off == b->len) b->off = b->len = 0; }

/* the integer after `key` in the header [h, h+n) (plain or quoted), or `dflt` */
static long long find_int(const char *h, size_t n, const char *key, long long dflt) {
    const char *p = memmem(h, n, key, strlen(key));
    if (!p) return dflt;
    p += strlen(key);
    const char *end = h + n;
    while (p < end && (*p == ' ' || *p == '"')) p++;
    int neg = 0;
    if (p < end && *p == '-') { neg = 1; p++; }
    if (p >= end || *p < '0' || *p > '9') return dflt;
    long long v = 0;
    while (p < end && *p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
    return neg ? -v : v;
}

/* `n` connections to `addr`, each registered for EPOLLIN with the epoll instance made here (*ep) */
static inline conn_t *connect_all(const char *addr, int n, int *ep) {
    *ep = epoll_create1(0);
    if (*ep < 0) die("epoll_create1");
    conn_t *cs = calloc((size_t)n, sizeof *cs);
    if (!cs) die("out of memory");
    for (int i = 0; i < n; i++) {
        cs[i].fd = connect_to(addr);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &cs[i]};
        if (epoll_ctl(*ep, EPOLL_CTL_ADD, cs[i].fd, &ev) != 0) die("epoll_ctl");
    }
    return cs;
}

/* A consumer's one wait (up to 100 ms) and what it reported: writable connections flushed, readable ones read and
 * their frames handed to `answers` (which queues the next requests: flushed after). 0, or -1 once the broker
 * closed a connection (said on stderr by `who`). */
static inline int pump(int ep, void (*answers)(conn_t *), const char *who) {
    struct epoll_event evs[64];
    int n = epoll_wait(ep, evs, 64, 100);
    if (n < 0 && errno != EINTR) die("epoll_wait");
    for (int k = 0; k < n; k++) {
        conn_t *c = evs[k].data.ptr;
        if (evs[k].events & EPOLLOUT) flush_out(ep, c);
        if (evs[k].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
            int alive = read_in(c->fd, &c->in);
            answers(c);
            if (c->out.len > c->out.off) flush_out(ep, c);
            if (!alive) { fprintf(stderr, "%s: the broker closed a connection\n", who); return -1; }
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ per-request series and the report */

typedef struct { double *v; long long n, cap; } series_t;

static inline void series_put(series_t *s, long long i, double x) {
    if (i >= s->cap) {
        long long cap = s->cap ? s->cap : 65536;
        while (cap <= i) cap *= 2;
        s->v = xrealloc(s->v, sizeof(double) * (size_t)cap);
        for (long long k = s->cap; k < cap; k++) s->v[k] = -1;
        s->cap = cap;
    }
    s->v[i] = x;
    if (i >= s->n) s->n = i + 1;
}

static inline int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline double pct(const double *xs, long long n, double p) {
    if (n <= 0) return 0;
    long long k = (long long)(n * p / 100.0);
    return xs[k < n ? k : n - 1] * 1e3;
}

/* the values >= 0 of `xs[0..n)` sorted into a new array (*out_n of them) */
static inline double *present_sorted(const double *xs, long long n, long long *out_n) {
    double *v = xmalloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    long long k = 0;
    for (long long i = 0; i < n; i++) if (xs[i] >= 0) v[k++] = xs[i];
    qsort(v, (size_t)k, sizeof *v, cmp_d);
    *out_n = k;
    return v;
}

/* "name":{count, p50 .. p99.99, max} (full) or {p99, max}, of the values >= 0 */
static inline void print_dist(const char *name, const double *xs, long long n, int full) {
    long long k;
    double *v = present_sorted(xs, n, &k);
    if (full)
        printf("\"%s\":{\"count\":%lld,\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"p99.9_ms\":%.3f,"
               "\"p99.99_ms\":%.3f,\"max_ms\":%.3f}", name, k, pct(v, k, 50), pct(v, k, 90), pct(v, k, 99),
               pct(v, k, 99.9), pct(v, k, 99.99), k ? v[k - 1] * 1e3 : 0.0);
    else
        printf("\"%s\":{\"p99_ms\":%.3f,\"max_ms\":%.3f}", name, pct(v, k, 99), k ? v[k - 1] * 1e3 : 0.0);
    free(v);
}

/* every value >= 0 as native doubles, in order */
static inline void write_series(const char *path, const series_t *s) {
    FILE *f = fopen(path, "wb");
    if (!f) die("open --lat-out");
    for (long long i = 0; i < s->n; i++) if (s->v[i] >= 0) fwrite(&s->v[i], sizeof(double), 1, f);
    fclose(f);
}

#endif
