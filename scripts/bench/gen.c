/* mqgen: a compiled RocketMQ remoting load generator (SEND_MESSAGE_V2, code 310, JSON headers).
 *
 * The frames are the ones scripts/bench/loadgen.py sends for its default "json_uniq" shape (extFields a..m,
 * properties TAGS, WAIT, a unique UNIQ_KEY per message), pre-built once per queue: per send only the opaque
 * (10 fixed-width digits), the UNIQ_KEY's counter (8 hex digits) and the body's first 8 bytes (the due time,
 * epoch ns, big endian: openloop.py's end-to-end consumer reads it) are patched. Answers are parsed only far
 * enough to find "opaque":N and "code":N in their JSON header.
 *
 * closed loop: --conns C --inflight K --total N (each answer frees its slot for the next send on that conn)
 * open loop:   --rate R --seconds S [--start EPOCH] (send i is due at start + i/R; a late send goes out at once
 *              and its latency still counts from its due time; lateness = actual send - due is reported)
 * Prints one JSON line. --lat-out FILE writes every latency (seconds, native doubles) in send order.
 * Build: gcc -O2 -o build/mqgen scripts/bench/gen.c (scripts/bench/cgen.py does it).
 */
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
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define OPAQUE_BASE 1000000000LL /* opaques are 10 digits wide: a frame's length never changes */
#define MAX_CODES 64

typedef struct { char *p; size_t len, cap, off; } buf_t;
typedef struct { int fd; buf_t out, in; long inflight; int want_out; } conn_t;
typedef struct { char *data; size_t len; size_t opq_at, uniq_at, ts_at; } tmpl_t;

static double now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double now_real(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *msg) { fprintf(stderr, "mqgen: %s (%s)\n", msg, strerror(errno)); exit(2); }

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory");
    return p;
}

static void buf_reserve(buf_t *b, size_t extra) {
    if (b->len + extra <= b->cap) return;
    if (b->off) { memmove(b->p, b->p + b->off, b->len - b->off); b->len -= b->off; b->off = 0; }
    if (b->len + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < b->len + extra) cap *= 2;
    b->p = realloc(b->p, cap);
    if (!b->p) die("out of memory");
    b->cap = cap;
}

/* ------------------------------------------------------------------ frames */

static void put_be32(char *p, uint32_t v) { v = htonl(v); memcpy(p, &v, 4); }

static tmpl_t build_tmpl(const char *topic, int queues, int queue, const char *uniq_prefix, int body_size,
                         const char *born_ms) {
    char header[2048];
    int n = snprintf(header, sizeof header,
        "{\"code\":310,\"extFields\":{\"a\":\"bench_pg\",\"b\":\"%s\",\"c\":\"TBW102\",\"d\":\"%d\",\"e\":\"%d\","
        "\"f\":\"0\",\"g\":\"%s\",\"h\":\"0\",\"i\":\"TAGS\\u0001bench\\u0002WAIT\\u0001true\\u0002"
        "UNIQ_KEY\\u0001%s########\\u0002\",\"j\":\"0\",\"k\":\"false\",\"l\":\"16\",\"m\":\"false\"},"
        "\"flag\":0,\"language\":\"JAVA\",\"opaque\":@@@@@@@@@@,\"serializeTypeCurrentRPC\":\"JSON\","
        "\"version\":479}", topic, queues, queue, born_ms, uniq_prefix);
    if (n <= 0 || n >= (int)sizeof header) { fprintf(stderr, "mqgen: topic too long\n"); exit(2); }
    tmpl_t t;
    int bsize = body_size < 8 ? 8 : body_size;
    t.len = 8 + (size_t)n + (size_t)bsize;
    t.data = xmalloc(t.len);
    put_be32(t.data, (uint32_t)(t.len - 4));
    put_be32(t.data + 4, (uint32_t)n); /* high byte 0: JSON */
    memcpy(t.data + 8, header, (size_t)n);
    memset(t.data + 8 + n, 'x', (size_t)bsize);
    t.opq_at = 8 + (size_t)(strstr(header, "@@@@@@@@@@") - header);
    t.uniq_at = 8 + (size_t)(strstr(header, "########") - header);
    t.ts_at = 8 + (size_t)n;
    return t;
}

static const char HEX[] = "0123456789ABCDEF";

static void patch(char *f, const tmpl_t *t, long long opaque, uint32_t uniq, int64_t due_ns) {
    char *o = f + t->opq_at;
    for (int k = 9; k >= 0; k--) { o[k] = (char)('0' + opaque % 10); opaque /= 10; }
    char *u = f + t->uniq_at;
    for (int k = 7; k >= 0; k--) { u[k] = HEX[uniq & 15]; uniq >>= 4; }
    char *b = f + t->ts_at;
    uint64_t v = (uint64_t)due_ns;
    for (int k = 7; k >= 0; k--) { b[k] = (char)(v & 0xFF); v >>= 8; }
}

/* the integer after `key` in the header [h, h+n), or -1 */
static long long find_int(const char *h, size_t n, const char *key) {
    const char *p = memmem(h, n, key, strlen(key));
    if (!p) return -1;
    p += strlen(key);
    const char *end = h + n;
    while (p < end && *p == ' ') p++;
    int neg = 0;
    if (p < end && *p == '-') { neg = 1; p++; }
    if (p >= end || *p < '0' || *p > '9') return -1;
    long long v = 0;
    while (p < end && *p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
    return neg ? -v : v;
}

/* ------------------------------------------------------------------ state */

static struct {
    long long total, issued, answered, acked;
    double *lat;      /* per send: answer - (due or sent) time, seconds */
    double *late;     /* open loop: actual send - due, seconds */
    double *t0;       /* per send: due time (open) or send time (closed), monotonic */
    int code_val[MAX_CODES]; long long code_cnt[MAX_CODES]; int ncodes;
    long long unmatched;
} S;

static void count_code(int code) {
    for (int i = 0; i < S.ncodes; i++) if (S.code_val[i] == code) { S.code_cnt[i]++; return; }
    if (S.ncodes < MAX_CODES) { S.code_val[S.ncodes] = code; S.code_cnt[S.ncodes++] = 1; }
}

static int connect_to(const char *host, const char *port) {
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

static void set_events(int ep, conn_t *c, int want_out) {
    if (c->want_out == want_out) return; /* no epoll_ctl per send batch */
    c->want_out = want_out;
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void flush_out(int ep, conn_t *c) {
    while (c->out.off < c->out.len) {
        ssize_t w = write(c->fd, c->out.p + c->out.off, c->out.len - c->out.off);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) { set_events(ep, c, 1); return; }
            if (errno == EINTR) continue;
            die("write");
        }
        c->out.off += (size_t)w;
    }
    c->out.off = c->out.len = 0;
    set_events(ep, c, 0);
}

/* append send number i (0-based) to c's output */
static tmpl_t *T; static int NQ; static int64_t EPOCH_NS; static double RATE;
static void queue_send(conn_t *c, long long i, double t0) {
    const tmpl_t *t = &T[i % NQ];
    buf_reserve(&c->out, t->len);
    char *f = c->out.p + c->out.len;
    memcpy(f, t->data, t->len);
    patch(f, t, OPAQUE_BASE + i, (uint32_t)i, RATE > 0 ? EPOCH_NS + (int64_t)(i * 1e9 / RATE) : 0);
    c->out.len += t->len;
    S.t0[i] = t0;
    c->inflight++;
}

/* parse whole answers in c's input; returns how many were parsed */
static long parse_in(conn_t *c) {
    long n = 0;
    buf_t *b = &c->in;
    for (;;) {
        size_t avail = b->len - b->off;
        if (avail < 8) break;
        const unsigned char *p = (const unsigned char *)b->p + b->off;
        uint32_t total = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
        if (avail < 4 + (size_t)total) break;
        uint32_t hlen = ((uint32_t)p[5] << 16) | ((uint32_t)p[6] << 8) | p[7];
        double now = now_mono();
        if (p[4] != 0 || hlen + 4 > total) { count_code(-1); S.unmatched++; } /* not a JSON header */
        else {
            long long opq = find_int((const char *)p + 8, hlen, "\"opaque\":");
            long long code = find_int((const char *)p + 8, hlen, "\"code\":");
            long long i = opq - OPAQUE_BASE;
            if (i < 0 || i >= S.issued || S.lat[i] >= 0) S.unmatched++;
            else {
                S.lat[i] = now - S.t0[i];
                if (code == 0) S.acked++; else count_code((int)code);
                S.answered++;
                c->inflight--;
                n++;
            }
        }
        b->off += 4 + total;
    }
    if (b->off == b->len) b->off = b->len = 0;
    return n;
}

static int read_in(conn_t *c) { /* 0: eof */
    for (;;) {
        buf_reserve(&c->in, 65536);
        ssize_t r = read(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len);
        if (r > 0) { c->in.len += (size_t)r; continue; }
        if (r == 0) return 0;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 1;
        if (errno == EINTR) continue;
        die("read");
    }
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *xs, long long n, double p) {
    if (n <= 0) return 0;
    long long k = (long long)(n * p / 100.0);
    return xs[k < n ? k : n - 1] * 1e3;
}

static void print_dist(const char *name, double *xs, long long n, int full) {
    qsort(xs, (size_t)n, sizeof *xs, cmp_d);
    if (full)
        printf("\"%s\":{\"count\":%lld,\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"p99.9_ms\":%.3f,"
               "\"p99.99_ms\":%.3f,\"max_ms\":%.3f}", name, n, pct(xs, n, 50), pct(xs, n, 90), pct(xs, n, 99),
               pct(xs, n, 99.9), pct(xs, n, 99.99), n ? xs[n - 1] * 1e3 : 0.0);
    else
        printf("\"%s\":{\"p99_ms\":%.3f,\"max_ms\":%.3f}", name, pct(xs, n, 99), n ? xs[n - 1] * 1e3 : 0.0);
}

static void usage(void) {
    fprintf(stderr, "usage: mqgen --addr HOST:PORT [--topic T] [--queues Q] [--body B] [--conns C]\n"
                    "  closed loop: --inflight K --total N\n"
                    "  open loop:   --rate R --seconds S [--start EPOCH_SECONDS]\n"
                    "  [--lat-out FILE] [--timeout SECONDS]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *addr = NULL, *topic = "BenchTopic", *lat_out = NULL;
    int conns = 4, queues = 8, body = 1024;
    long inflight = 64;
    long long total = 100000;
    double rate = 0, seconds = 0, start = 0, timeout = 600;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) usage();
        if (!strcmp(a, "--addr")) addr = v;
        else if (!strcmp(a, "--topic")) topic = v;
        else if (!strcmp(a, "--queues")) queues = atoi(v);
        else if (!strcmp(a, "--body")) body = atoi(v);
        else if (!strcmp(a, "--conns")) conns = atoi(v);
        else if (!strcmp(a, "--inflight")) inflight = atol(v);
        else if (!strcmp(a, "--total")) total = atoll(v);
        else if (!strcmp(a, "--rate")) rate = atof(v);
        else if (!strcmp(a, "--seconds")) seconds = atof(v);
        else if (!strcmp(a, "--start")) start = atof(v);
        else if (!strcmp(a, "--lat-out")) lat_out = v;
        else if (!strcmp(a, "--timeout")) timeout = atof(v);
        else usage();
        i++;
    }
    if (!addr || conns < 1 || queues < 1 || queues > 1000 || inflight < 1 || body < 0) usage();
    int open_loop = rate > 0;
    if (open_loop) { if (seconds <= 0) usage(); total = (long long)(rate * seconds); }
    if (total < 1 || total > 1000000000LL) usage();

    char host[256], port[16];
    const char *colon = strrchr(addr, ':');
    if (!colon || colon - addr >= (long)sizeof host || strlen(colon + 1) >= sizeof port) usage();
    memcpy(host, addr, (size_t)(colon - addr)); host[colon - addr] = 0;
    strcpy(port, colon + 1);

    char uniq_prefix[32], born[32];
    snprintf(uniq_prefix, sizeof uniq_prefix, "7F000001%04X%08X", getpid() & 0xFFFF, (unsigned)time(NULL));
    snprintf(born, sizeof born, "%lld", (long long)(now_real() * 1000));
    NQ = queues;
    T = xmalloc(sizeof *T * (size_t)queues);
    for (int q = 0; q < queues; q++) T[q] = build_tmpl(topic, queues, q, uniq_prefix, body, born);
    S.total = total;
    S.lat = xmalloc(sizeof(double) * (size_t)total);
    S.t0 = xmalloc(sizeof(double) * (size_t)total);
    S.late = open_loop ? xmalloc(sizeof(double) * (size_t)total) : NULL;
    for (long long i = 0; i < total; i++) S.lat[i] = -1;

    int ep = epoll_create1(0);
    if (ep < 0) die("epoll_create1");
    conn_t *cs = calloc((size_t)conns, sizeof *cs);
    for (int i = 0; i < conns; i++) {
        cs[i].fd = connect_to(host, port);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &cs[i]};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev) != 0) die("epoll_ctl");
    }
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    if (tfd < 0) die("timerfd_create");
    struct epoll_event tev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev);

    double base = now_mono();
    if (open_loop) {
        RATE = rate;
        if (start > 0) base += start - now_real();
        else { start = now_real(); }
        EPOCH_NS = (int64_t)(start * 1e9);
    }
    double t_begin = open_loop ? base : now_mono();
    if (!open_loop)
        for (long k = 0; k < inflight && S.issued < total; k++)
            for (int i = 0; i < conns && S.issued < total; i++) { queue_send(&cs[i], S.issued, now_mono()); S.issued++; }
    for (int i = 0; i < conns; i++) flush_out(ep, &cs[i]);

    struct epoll_event evs[64];
    double deadline = (open_loop ? base + seconds : now_mono()) + timeout;
    int timed_out = 0, rr = 0;
    while (S.answered < total) {
        double now = now_mono();
        if (now > deadline) { timed_out = 1; break; }
        int wait_ms = 100;
        if (open_loop && S.issued < total) {
            long long due = (long long)((now - base) * rate) + 1;
            if (due > total) due = total;
            if (now < base) due = 0;
            int touched = 0;
            while (S.issued < due) {
                double t_due = base + S.issued / rate;
                S.late[S.issued] = now - t_due;
                queue_send(&cs[rr], S.issued, t_due);
                rr = (rr + 1) % conns;
                S.issued++;
                touched = 1;
            }
            if (touched) for (int i = 0; i < conns; i++) if (cs[i].out.len > cs[i].out.off) flush_out(ep, &cs[i]);
            if (S.issued < total) { /* wake at the next send's due time */
                double next = base + S.issued / rate;
                struct itimerspec its = {0};
                its.it_value.tv_sec = (time_t)next;
                its.it_value.tv_nsec = (long)((next - (double)(time_t)next) * 1e9);
                if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
                timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
            }
        }
        int n = epoll_wait(ep, evs, 64, wait_ms);
        if (n < 0 && errno != EINTR) die("epoll_wait");
        for (int k = 0; k < n; k++) {
            conn_t *c = evs[k].data.ptr;
            if (!c) { uint64_t x; if (read(tfd, &x, sizeof x) < 0) { /* not yet due */ } continue; }
            if (evs[k].events & EPOLLOUT) flush_out(ep, c);
            if (evs[k].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
                int alive = read_in(c);
                long got = parse_in(c);
                if (!open_loop && got > 0) {
                    for (long j = 0; j < got && S.issued < total; j++) { queue_send(c, S.issued, now_mono()); S.issued++; }
                    flush_out(ep, c);
                }
                if (!alive) { fprintf(stderr, "mqgen: the broker closed a connection\n"); timed_out = 1; goto done; }
            }
        }
    }
done:;
    double elapsed = now_mono() - t_begin;
    if (lat_out) {
        FILE *f = fopen(lat_out, "wb");
        if (!f) die("open --lat-out");
        for (long long i = 0; i < S.issued; i++) if (S.lat[i] >= 0) fwrite(&S.lat[i], sizeof(double), 1, f);
        fclose(f);
    }
    long long nlat = 0;
    for (long long i = 0; i < S.issued; i++) if (S.lat[i] >= 0) S.lat[nlat++] = S.lat[i];
    printf("{\"gen\":\"c\",\"mode\":\"%s\",\"conns\":%d,", open_loop ? "open" : "closed", conns);
    if (open_loop) printf("\"rate\":%.1f,\"seconds_scheduled\":%.3f,", rate, seconds);
    else printf("\"inflight_per_conn\":%ld,", inflight);
    printf("\"body\":%d,\"sent\":%lld,\"answered\":%lld,\"acked\":%lld,\"errors\":{", body, S.issued, S.answered, S.acked);
    for (int i = 0; i < S.ncodes; i++) printf("%s\"%d\":%lld", i ? "," : "", S.code_val[i], S.code_cnt[i]);
    printf("},\"unmatched\":%lld,\"timed_out\":%s,\"seconds\":%.3f,\"msg_per_s\":%.0f,", S.unmatched,
           timed_out ? "true" : "false", elapsed, elapsed > 0 ? S.answered / elapsed : 0.0);
    print_dist("latency", S.lat, nlat, 1);
    if (open_loop) { printf(","); print_dist("gen_late", S.late, S.issued, 0); }
    printf("}\n");
    return timed_out ? 1 : 0;
}
