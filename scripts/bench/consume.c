/* mqconsume: a compiled RocketMQ pull consumer for the benchmarks (one process, epoll, non-blocking sockets).
 *
 * Pulls every queue of a topic (queue q on connection q % conns), one PULL_MESSAGE (11) in flight per queue,
 * each answered pull followed at once by the next from its nextBeginOffset, as a push consumer's pull loop does.
 * The pull header is the Java client's (consumerGroup .. expressionType); the subscription either travels with
 * the pull (--post-sub: FLAG_SUBSCRIPTION) or was registered by a HEART_BEAT frame (--heartbeat FILE: a whole
 * frame, sent first on every connection), as a push consumer sends it by default; without --heartbeat it
 * travels with the pull. An error answer stops that queue's pulls (counted as "other"). With --commit each pull
 * carries the queue's consumed offset (FLAG_COMMIT_OFFSET, commitOffset: what it pulled so far), as the Java push
 * consumer's pulls do once it has an offset, and the broker commits it.
 *
 * Stops when every queue reached its --end offset, when --expect N messages arrived, or when the file
 * --expect-file names exists and holds a count it reached (checked every 100 ms). With --ts each message's body
 * starts with its due time (epoch ns, big endian, as gen.c writes it): the end-to-end latency = arrival - due.
 * Prints one JSON line: messages, bytes, msg/s, pulls, pull latency; --lat-out FILE writes the end-to-end
 * latencies (seconds, native doubles).
 * Build: gcc -O2 -o build/mqconsume scripts/bench/consume.c (scripts/bench/cgen.py does it).
 */
#include "mqgen.h"

#define MAX_Q 1024
#define OPQ_BASE 1000  /* pull opaques; the heartbeat's is below */

static struct {
    const char *group, *topic, *sub, *etype;
    int post_sub, commit, maxn, suspend_ms, ts;
    int nq; long long off[MAX_Q], end[MAX_Q]; int done[MAX_Q], ndone;
    long long pull_q[1 << 16]; double pull_at[1 << 16];  /* by opaque % 65536: the queue and when it was sent */
    long long opaque;
    long long msgs, bytes, pulls, found, not_found, other;
    series_t e2e, pull_lat;
} C;

/* a JSON string value, escaped */
static int jstr(char *d, size_t cap, const char *s) {
    size_t n = 0;
    if (cap < 3) return -1;
    d[n++] = '"';
    for (; *s; s++) {
        if (n + 8 >= cap) return -1;
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') { d[n++] = '\\'; d[n++] = (char)ch; }
        else if (ch < 0x20) n += (size_t)snprintf(d + n, cap - n, "\\u%04x", ch);
        else d[n++] = (char)ch;
    }
    d[n++] = '"';
    d[n] = 0;
    return (int)n;
}

static void pull(conn_t *c, int q) {
    char sub[2048] = "", head[4096];
    long long commit = C.commit && C.off[q] > 0 ? C.off[q] : 0;  /* the Java client's commitOffsetEnable: offset > 0 */
    int sysflag = (commit ? 1 : 0) | 2 | (C.post_sub ? 4 : 0);  /* (FLAG_COMMIT_OFFSET |) FLAG_SUSPEND (| FLAG_SUBSCRIPTION) */
    if (C.post_sub) {
        char js[1800];
        if (jstr(js, sizeof js, C.sub) < 0) { fprintf(stderr, "mqconsume: subscription too long\n"); exit(2); }
        snprintf(sub, sizeof sub, ",\"subscription\":%s", js);
    }
    long long opq = OPQ_BASE + C.opaque++;
    int n = snprintf(head, sizeof head,
        "{\"code\":11,\"extFields\":{\"consumerGroup\":\"%s\",\"topic\":\"%s\",\"queueId\":\"%d\","
        "\"queueOffset\":\"%lld\",\"maxMsgNums\":\"%d\",\"sysFlag\":\"%d\",\"commitOffset\":\"%lld\","
        "\"suspendTimeoutMillis\":\"%d\"%s,\"subVersion\":\"0\",\"expressionType\":\"%s\"},\"flag\":0,"
        "\"language\":\"JAVA\",\"opaque\":%lld,\"serializeTypeCurrentRPC\":\"JSON\",\"version\":479}",
        C.group, C.topic, q, C.off[q], C.maxn, sysflag, commit, C.suspend_ms, sub, C.etype, opq);
    buf_reserve(&c->out, (size_t)n + 8);
    char *f = c->out.p + c->out.len;
    put_be32(f, (uint32_t)(n + 4));
    put_be32(f + 4, (uint32_t)n);
    memcpy(f + 8, head, (size_t)n);
    c->out.len += (size_t)n + 8;
    C.pull_q[opq & 0xFFFF] = q;
    C.pull_at[opq & 0xFFFF] = now_mono();
    C.pulls++;
}

/* the stored records of a FOUND answer: count them; with --ts, their end-to-end latency */
static void records(const unsigned char *p, size_t n, double arrived_ns) {
    size_t pos = 0;
    while (pos + 92 <= n) {
        uint32_t size = get_be32(p + pos), sysflag = get_be32(p + pos + 36);
        if (size < 92 || pos + size > n) break;
        size_t at = 84 + ((sysflag & 0x10) ? 12 : 0) + ((sysflag & 0x20) ? 12 : 0);  /* IPv6 hosts: 12 bytes more */
        if (C.ts && at + 12 <= size && get_be32(p + pos + at) >= 8)
            series_put(&C.e2e, C.e2e.n, (arrived_ns - (double)get_be64(p + pos + at + 4)) / 1e9);
        C.msgs++;
        C.bytes += size;
        pos += size;
    }
}

static void answers(conn_t *c) {
    const char *h, *body;
    size_t hlen, blen;
    int json;
    while (next_frame(&c->in, &h, &hlen, &body, &blen, &json)) {
        long long opq = find_int(h, hlen, "\"opaque\":", -1);
        if (!json || opq < OPQ_BASE) continue;  /* the heartbeat's answer */
        int q = (int)C.pull_q[opq & 0xFFFF];
        series_put(&C.pull_lat, C.pull_lat.n, now_mono() - C.pull_at[opq & 0xFFFF]);
        long long code = find_int(h, hlen, "\"code\":", -1);
        if (code == 0) { C.found++; records((const unsigned char *)body, blen, now_real() * 1e9); }
        else if (code == 19 || code == 20 || code == 21) C.not_found++;  /* nothing new yet / filtered / moved */
        else {  /* an error answer (no subscription, no permission, ...): that queue stops; reported */
            C.other++;
            if (C.other <= 3) fprintf(stderr, "mqconsume: pull answered %lld: %.*s\n", code, (int)hlen, h);
            if (!C.done[q]) { C.done[q] = 1; C.ndone++; }
            continue;
        }
        long long next = find_int(h, hlen, "\"nextBeginOffset\":", C.off[q]);
        if (next > C.off[q]) C.off[q] = next;
        if (!C.done[q] && C.end[q] >= 0 && C.off[q] >= C.end[q]) { C.done[q] = 1; C.ndone++; }
        if (!C.done[q]) pull(c, q);
    }
    frames_done(&c->in);
}

static int parse_offsets(const char *s, long long *out) {
    int n = 0;
    while (s && *s && n < MAX_Q) {
        out[n++] = atoll(s);
        s = strchr(s, ',');
        if (s) s++;
    }
    return n;
}

static long long expected(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long long v = -1;
    if (fscanf(f, "%lld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

static void usage(void) {
    fprintf(stderr, "usage: mqconsume --addr HOST:PORT --topic T --start O0,O1,.. [--end E0,E1,..] [--group G]\n"
                    "  [--conns C] [--max-msgs N] [--suspend-ms MS] [--sub EXPR] [--type TAG|SQL92] [--post-sub] [--commit]\n"
                    "  [--heartbeat FILE] [--expect N | --expect-file FILE] [--ts] [--lat-out FILE] [--timeout S]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *addr = NULL, *start = NULL, *endv = NULL, *hb = NULL, *expect_file = NULL, *lat_out = NULL;
    int conns = 1;
    long long expect = -1;
    double timeout = 600;
    C.group = "bench_cg"; C.sub = "*"; C.etype = "TAG"; C.maxn = 32; C.suspend_ms = 15000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--post-sub")) { C.post_sub = 1; continue; }
        if (!strcmp(a, "--commit")) { C.commit = 1; continue; }
        if (!strcmp(a, "--ts")) { C.ts = 1; continue; }
        if (!v) usage();
        if (!strcmp(a, "--addr")) addr = v;
        else if (!strcmp(a, "--topic")) C.topic = v;
        else if (!strcmp(a, "--group")) C.group = v;
        else if (!strcmp(a, "--start")) start = v;
        else if (!strcmp(a, "--end")) endv = v;
        else if (!strcmp(a, "--conns")) conns = atoi(v);
        else if (!strcmp(a, "--max-msgs")) C.maxn = atoi(v);
        else if (!strcmp(a, "--suspend-ms")) C.suspend_ms = atoi(v);
        else if (!strcmp(a, "--sub")) C.sub = v;
        else if (!strcmp(a, "--type")) C.etype = v;
        else if (!strcmp(a, "--heartbeat")) hb = v;
        else if (!strcmp(a, "--expect")) expect = atoll(v);
        else if (!strcmp(a, "--expect-file")) expect_file = v;
        else if (!strcmp(a, "--lat-out")) lat_out = v;
        else if (!strcmp(a, "--timeout")) timeout = atof(v);
        else usage();
        i++;
    }
    if (!addr || !C.topic || !start || conns < 1 || C.maxn < 1) usage();
    if (!hb) C.post_sub = 1;  /* no heartbeat registered the subscription: it travels with each pull */
    C.nq = parse_offsets(start, C.off);
    for (int q = 0; q < MAX_Q; q++) C.end[q] = -1;
    if (endv && parse_offsets(endv, C.end) != C.nq) usage();
    if (C.nq < 1) usage();
    if (conns > C.nq) conns = C.nq;

    int ep;
    conn_t *cs = connect_all(addr, conns, &ep);
    buf_t hbf = {0};
    if (hb) {
        FILE *f = fopen(hb, "rb");
        if (!f) die("open --heartbeat");
        buf_reserve(&hbf, 1 << 20);
        hbf.len = fread(hbf.p, 1, hbf.cap, f);
        fclose(f);
    }
    for (int i = 0; i < conns && hbf.len; i++) {
        buf_reserve(&cs[i].out, hbf.len);
        memcpy(cs[i].out.p, hbf.p, hbf.len);
        cs[i].out.len = hbf.len;
    }
    double t0 = now_mono(), deadline = t0 + timeout, last_check = 0;
    for (int q = 0; q < C.nq; q++) {
        if (C.end[q] >= 0 && C.off[q] >= C.end[q]) { C.done[q] = 1; C.ndone++; }
        else pull(&cs[q % conns], q);
    }
    for (int i = 0; i < conns; i++) flush_out(ep, &cs[i]);
    int timed_out = 0;
    for (;;) {
        double now = now_mono();
        if (C.ndone == C.nq || (expect >= 0 && C.msgs >= expect)) break;
        if (now > deadline) { timed_out = 1; break; }
        if (expect_file && now - last_check > 0.1) { last_check = now; expect = expected(expect_file); }
        if (pump(ep, answers, "mqconsume") < 0) { timed_out = 1; break; }
    }
    double elapsed = now_mono() - t0;
    if (lat_out) write_series(lat_out, &C.e2e);
    printf("{\"consumer\":\"c\",\"conns\":%d,\"queues\":%d,\"msgs\":%lld,\"bytes\":%lld,\"seconds\":%.3f,"
           "\"msg_per_s\":%.0f,\"mb_per_s\":%.2f,\"pulls\":%lld,\"found\":%lld,\"not_found\":%lld,\"other\":%lld,"
           "\"timed_out\":%s,", conns, C.nq, C.msgs, C.bytes, elapsed, elapsed > 0 ? C.msgs / elapsed : 0.0,
           elapsed > 0 ? C.bytes / elapsed / 1e6 : 0.0, C.pulls, C.found, C.not_found, C.other,
           timed_out ? "true" : "false");
    print_dist("pull_latency", C.pull_lat.v, C.pull_lat.n, 1);
    if (C.ts) { printf(","); print_dist("e2e", C.e2e.v, C.e2e.n, 1); }
    printf("}\n");
    return timed_out ? 1 : 0;
}
