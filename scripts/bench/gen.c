/* mqgen: a compiled RocketMQ remoting load generator.
 *
 * It sends the frames of a frames file (written by scripts/bench/shapes.py: one template per queue of any send
 * shape, JSON or binary header, single or batch) and patches per send only the opaque, the UNIQ_KEY tails and
 * the body's first 8 bytes (the due time, epoch ns, big endian: the end-to-end consumer reads it), so it spends
 * next to nothing per message. Send i uses template i % count. Answers are parsed only far enough to find the
 * opaque, the code and, for SYSTEM_BUSY (2), the bracketed reason of the remark.
 *
 * closed loop: --inflight K --total N (each answer frees its slot for the next send on that connection)
 * flood:       --inflight K --seconds S (closed loop for S seconds, then the answers still due are awaited)
 * open loop:   --rate R --seconds S [--start EPOCH] (send i is due at start + i/R; a late send goes out at once
 *              and its latency still counts from its due time; lateness = actual send - due is reported;
 *              --tick-us US: wake at most every US microseconds, sending every send due by then)
 * Prints one JSON line. --lat-out FILE writes every latency (seconds, native doubles) in send order.
 * Build: gcc -O2 -o build/mqgen scripts/bench/gen.c (scripts/bench/cgen.py does it).
 */
#include "mqgen.h"

#define OPAQUE_BASE 1000000000LL /* JSON opaques are 10 digits wide: a frame's length never changes */
#define MAX_CODES 64
#define NONE 0xFFFFFFFFu

typedef struct { char *data; uint32_t len, opq_at, opq_bin, ts_at, nuniq; uint32_t *uniq_at; } tmpl_t;

static struct {
    tmpl_t *t; uint32_t n, per;   /* templates, messages per frame */
    uint64_t salt;                /* this process's share of every UNIQ_KEY tail */
    int64_t epoch_ns; double rate, tick;
    long long issued, answered, acked;
    series_t lat, ok_lat, t0, late;  /* per send: answer - (due or sent); the same for successes; start; lateness */
    int code_val[MAX_CODES]; long long code_cnt[MAX_CODES]; int ncodes;
    char busy_val[8][40]; long long busy_cnt[8]; int nbusy;
    long long unmatched;
    long long *ok_half_s; long nhalf;  /* flood: successes per 0.5 s */
    double began;
} S;

/* ------------------------------------------------------------------ frames */

static uint32_t rd32(FILE *f) {
    unsigned char b[4];
    if (fread(b, 1, 4, f) != 4) { fprintf(stderr, "mqgen: truncated frames file\n"); exit(2); }
    return get_be32(b);
}

static void load_frames(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die("open --frames");
    char magic[4];
    if (fread(magic, 1, 4, f) != 4 || memcmp(magic, "MQGF", 4) != 0) { fprintf(stderr, "mqgen: not a frames file\n"); exit(2); }
    S.n = rd32(f);
    S.per = rd32(f);
    if (S.n < 1 || S.n > 100000 || S.per < 1) { fprintf(stderr, "mqgen: bad frames file\n"); exit(2); }
    S.t = xmalloc(sizeof *S.t * S.n);
    for (uint32_t i = 0; i < S.n; i++) {
        tmpl_t *t = &S.t[i];
        t->len = rd32(f); t->opq_at = rd32(f); t->opq_bin = rd32(f); t->ts_at = rd32(f); t->nuniq = rd32(f);
        t->uniq_at = xmalloc(sizeof(uint32_t) * (t->nuniq ? t->nuniq : 1));
        for (uint32_t k = 0; k < t->nuniq; k++) t->uniq_at[k] = rd32(f);
        if (t->len < 8 || t->len > (64u << 20)) { fprintf(stderr, "mqgen: bad frame length\n"); exit(2); }
        t->data = xmalloc(t->len);
        if (fread(t->data, 1, t->len, f) != t->len) { fprintf(stderr, "mqgen: truncated frames file\n"); exit(2); }
        int bad = t->opq_at + (t->opq_bin ? 4 : 10) > t->len || (t->ts_at != NONE && t->ts_at + 8 > t->len);
        for (uint32_t k = 0; k < t->nuniq; k++) bad |= t->uniq_at[k] + 12 > t->len;
        if (bad) { fprintf(stderr, "mqgen: a patch position is outside its frame\n"); exit(2); }
    }
    fclose(f);
}

static const char HEX[] = "0123456789ABCDEF";

static void patch(char *f, const tmpl_t *t, long long opaque, uint64_t uniq, int64_t due_ns) {
    if (t->opq_bin) put_be32(f + t->opq_at, (uint32_t)opaque);
    else for (int k = 9; k >= 0; k--) { f[t->opq_at + k] = (char)('0' + opaque % 10); opaque /= 10; }
    for (uint32_t j = 0; j < t->nuniq; j++) {
        char *u = f + t->uniq_at[j];
        uint64_t v = uniq;
        for (int k = 11; k >= 0; k--) { u[k] = HEX[v & 15]; v >>= 4; }
    }
    if (t->ts_at != NONE) {
        uint64_t v = (uint64_t)due_ns;
        for (int k = 7; k >= 0; k--) { f[t->ts_at + k] = (char)(v & 0xFF); v >>= 8; }
    }
}

/* ------------------------------------------------------------------ connections */

static void count_code(int code) {
    for (int i = 0; i < S.ncodes; i++) if (S.code_val[i] == code) { S.code_cnt[i]++; return; }
    if (S.ncodes < MAX_CODES) { S.code_val[S.ncodes] = code; S.code_cnt[S.ncodes++] = 1; }
}

/* SYSTEM_BUSY: count the remark's bracketed reason ("[OVERLOAD]..." -> OVERLOAD) */
static void count_busy(const char *h, size_t n) {
    const char *p = memmem(h, n, "\"remark\":\"[", 11);
    char reason[40] = "?";
    if (p) {
        p += 11;
        size_t k = 0;
        while (p + k < h + n && p[k] != ']' && p[k] != '"' && k < sizeof reason - 1) k++;
        memcpy(reason, p, k);
        reason[k] = 0;
    }
    for (int i = 0; i < S.nbusy; i++) if (!strcmp(S.busy_val[i], reason)) { S.busy_cnt[i]++; return; }
    if (S.nbusy < 8) { strcpy(S.busy_val[S.nbusy], reason); S.busy_cnt[S.nbusy++] = 1; }
}

/* append send number i (0-based) to c's output */
static void queue_send(conn_t *c, long long i, double t0) {
    const tmpl_t *t = &S.t[i % S.n];
    buf_reserve(&c->out, t->len);
    char *f = c->out.p + c->out.len;
    memcpy(f, t->data, t->len);
    patch(f, t, OPAQUE_BASE + i, S.salt | (uint32_t)i, S.rate > 0 ? S.epoch_ns + (int64_t)(i * 1e9 / S.rate) : 0);
    c->out.len += t->len;
    series_put(&S.t0, i, t0);
    series_put(&S.lat, i, -1);
    c->inflight++;
}

/* parse whole answers in c's input; returns how many were parsed */
static long parse_in(conn_t *c) {
    long n = 0;
    const char *h, *body;
    size_t hlen, blen;
    int json;
    while (next_frame(&c->in, &h, &hlen, &body, &blen, &json)) {
        double now = now_mono();
        if (!json) { count_code(-1); S.unmatched++; continue; } /* the broker answers JSON */
        long long i = find_int(h, hlen, "\"opaque\":", -1) - OPAQUE_BASE;
        long long code = find_int(h, hlen, "\"code\":", -1);
        if (i < 0 || i >= S.issued || S.lat.v[i] >= 0) { S.unmatched++; continue; }
        double lat = now - S.t0.v[i];
        S.lat.v[i] = lat;
        if (code == 0) {
            S.acked++;
            series_put(&S.ok_lat, i, lat);
            long half = (long)((now - S.began) / 0.5);
            if (S.ok_half_s && half >= 0 && half < S.nhalf) S.ok_half_s[half]++;
        } else {
            count_code((int)code);
            if (code == 2) count_busy(h, hlen);
        }
        S.answered++;
        c->inflight--;
        n++;
    }
    frames_done(&c->in);
    return n;
}

/* ------------------------------------------------------------------ the report */

static void report(const char *mode, int conns, long inflight, double seconds, double elapsed, int timed_out) {
    printf("{\"gen\":\"c\",\"mode\":\"%s\",\"conns\":%d,\"msgs_per_frame\":%u,", mode, conns, S.per);
    if (S.rate > 0) printf("\"rate\":%.1f,\"seconds_scheduled\":%.3f,", S.rate, seconds);
    else printf("\"inflight_per_conn\":%ld,", inflight);
    printf("\"sent\":%lld,\"answered\":%lld,\"acked\":%lld,\"msgs\":%lld,\"errors\":{", S.issued, S.answered,
           S.acked, S.acked * S.per);
    for (int i = 0; i < S.ncodes; i++) printf("%s\"%d\":%lld", i ? "," : "", S.code_val[i], S.code_cnt[i]);
    printf("},\"busy\":{");
    for (int i = 0; i < S.nbusy; i++) printf("%s\"%s\":%lld", i ? "," : "", S.busy_val[i], S.busy_cnt[i]);
    printf("},\"unmatched\":%lld,\"timed_out\":%s,\"seconds\":%.3f,\"msg_per_s\":%.0f,\"answers_per_s\":%.0f,",
           S.unmatched, timed_out ? "true" : "false", elapsed, elapsed > 0 ? S.acked * S.per / elapsed : 0.0,
           elapsed > 0 ? S.answered / elapsed : 0.0);
    print_dist("latency", S.lat.v, S.issued, 1);
    printf(",");
    print_dist("ok_latency", S.ok_lat.v, S.ok_lat.n, 1);
    if (S.rate > 0) { printf(","); print_dist("gen_late", S.late.v, S.issued, 0); }
    if (S.ok_half_s) {
        printf(",\"ok_per_half_s\":[");
        for (long k = 0; k < S.nhalf; k++) printf("%s%lld", k ? "," : "", S.ok_half_s[k]);
        printf("]");
    }
    printf("}\n");
}

static void usage(void) {
    fprintf(stderr, "usage: mqgen --addr HOST:PORT --frames FILE [--conns C]\n"
                    "  closed loop: --inflight K --total N\n"
                    "  flood:       --inflight K --seconds S\n"
                    "  open loop:   --rate R --seconds S [--start EPOCH_SECONDS] [--tick-us US]\n"
                    "  [--lat-out FILE] [--timeout SECONDS]\n");
    exit(2);
}

/* open loop: queue every send due by now; arm the timer for the next one */
static void issue_due(int ep, conn_t *cs, int conns, int tfd, double base, long long total, int *rr) {
    double now = now_mono();
    long long due = now < base ? 0 : (long long)((now - base) * S.rate) + 1;
    if (due > total) due = total;
    int touched = 0;
    while (S.issued < due) {
        double t_due = base + S.issued / S.rate;
        series_put(&S.late, S.issued, now - t_due);
        queue_send(&cs[*rr], S.issued, t_due);
        *rr = (*rr + 1) % conns;
        S.issued++;
        touched = 1;
    }
    if (touched) for (int i = 0; i < conns; i++) if (cs[i].out.len > cs[i].out.off) flush_out(ep, &cs[i]);
    if (S.issued < total) { /* wake at the next send's due time */
        double next = base + S.issued / S.rate;
        if (next < now + S.tick) next = now + S.tick;  /* --tick-us: the sends due meanwhile go out together */
        struct itimerspec its = {0};
        its.it_value.tv_sec = (time_t)next;
        its.it_value.tv_nsec = (long)((next - (double)(time_t)next) * 1e9);
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
        timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
    }
}

int main(int argc, char **argv) {
    const char *addr = NULL, *frames = NULL, *lat_out = NULL;
    int conns = 4;
    long inflight = 64;
    long long total = 0;
    double seconds = 0, start = 0, timeout = 600;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) usage();
        if (!strcmp(a, "--addr")) addr = v;
        else if (!strcmp(a, "--frames")) frames = v;
        else if (!strcmp(a, "--conns")) conns = atoi(v);
        else if (!strcmp(a, "--inflight")) inflight = atol(v);
        else if (!strcmp(a, "--total")) total = atoll(v);
        else if (!strcmp(a, "--rate")) S.rate = atof(v);
        else if (!strcmp(a, "--seconds")) seconds = atof(v);
        else if (!strcmp(a, "--start")) start = atof(v);
        else if (!strcmp(a, "--tick-us")) S.tick = atof(v) / 1e6;
        else if (!strcmp(a, "--lat-out")) lat_out = v;
        else if (!strcmp(a, "--timeout")) timeout = atof(v);
        else usage();
        i++;
    }
    if (!addr || !frames || conns < 1 || inflight < 1) usage();
    int open_loop = S.rate > 0, flood = !open_loop && total == 0;
    if (open_loop || flood) { if (seconds <= 0) usage(); }
    if (open_loop) total = (long long)(S.rate * seconds);
    if (flood) total = 1000000000LL;
    if (total < 1 || total > 1000000000LL) usage();
    load_frames(frames);
    S.salt = (uint64_t)(getpid() & 0xFFFF) << 32;

    int ep;
    conn_t *cs = connect_all(addr, conns, &ep);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    if (tfd < 0) die("timerfd_create");
    struct epoll_event tev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev);

    double base = now_mono();
    if (open_loop) {
        if (start > 0) base += start - now_real();
        else start = now_real();
        S.epoch_ns = (int64_t)(start * 1e9);
    }
    S.began = open_loop ? base : now_mono();
    if (flood) { S.nhalf = (long)(seconds * 2) + 240; S.ok_half_s = calloc((size_t)S.nhalf, sizeof(long long)); }
    if (!open_loop)
        for (long k = 0; k < inflight && S.issued < total; k++)
            for (int i = 0; i < conns && S.issued < total; i++) { queue_send(&cs[i], S.issued, now_mono()); S.issued++; }
    for (int i = 0; i < conns; i++) flush_out(ep, &cs[i]);

    struct epoll_event evs[64];
    double stop_at = S.began + seconds, deadline = (open_loop ? base + seconds : now_mono()) + timeout;
    int timed_out = 0, rr = 0;
    while (S.answered < (flood ? S.issued : total)) {
        double now = now_mono();
        if (now > deadline) { timed_out = 1; break; }
        if (open_loop && S.issued < total) issue_due(ep, cs, conns, tfd, base, total, &rr);
        int n = epoll_wait(ep, evs, 64, 100);
        if (n < 0 && errno != EINTR) die("epoll_wait");
        for (int k = 0; k < n; k++) {
            conn_t *c = evs[k].data.ptr;
            if (!c) { uint64_t x; if (read(tfd, &x, sizeof x) < 0) { /* not yet due */ } continue; }
            if (evs[k].events & EPOLLOUT) flush_out(ep, c);
            if (evs[k].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
                int alive = read_in(c->fd, &c->in);
                long got = parse_in(c);
                if (!open_loop && got > 0) {
                    int more = !flood || now_mono() < stop_at;
                    for (long j = 0; more && j < got && S.issued < total; j++) { queue_send(c, S.issued, now_mono()); S.issued++; }
                    flush_out(ep, c);
                }
                if (!alive) { fprintf(stderr, "mqgen: the broker closed a connection\n"); timed_out = 1; goto done; }
            }
        }
    }
done:;
    double elapsed = now_mono() - S.began;
    if (lat_out) write_series(lat_out, &S.lat);
    report(open_loop ? "open" : flood ? "flood" : "closed", conns, inflight, seconds, elapsed, timed_out);
    return timed_out ? 1 : 0;
}
