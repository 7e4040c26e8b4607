/* mqpop: a compiled RocketMQ POP consumer for the benchmarks (one process, epoll, non-blocking sockets).
 *
 * --conns connections, each with --inflight POP_MESSAGE (200050) requests in flight (queueId -1, --max-msgs a
 * request, invisibleTime --invisible ms, pollTime 1000, initMode 0: the Java client's header). Each answered pop is
 * acknowledged at once, the next pop going out with the acks (a POP push consumer acks asynchronously and pops on):
 * --ack batch: one BATCH_ACK_MESSAGE (200151) of the answer's messages (BatchAckMessageRequestBody, the short names
 * the Java client writes, the offsets as a base64 BitSet from the checkpoint's start); --ack single: one
 * ACK_MESSAGE (200051) per message, its extraInfo built from the answer's header as ExtraInfoUtil does (the Java
 * client's and the 5.x SDKs' shape). Offsets come from the answer's startOffsetInfo / msgOffsetInfo; the records
 * in the body are counted too (a mismatch is an error).
 *
 * Stops once --total messages are acknowledged (answered SUCCESS) or at --timeout. Prints one JSON line:
 * messages acknowledged, msg/s, pops (found / empty), ack requests, errors, pop latency.
 * Build: gcc -O2 -o build/mqpop scripts/bench/pop.c (scripts/bench/cgen.py does it).
 */
#include "mqgen.h"

#define OPQ_ACK (1LL << 30)  /* ack opaques (an int32, as every client sends): 2^30 + seq * 2048 + count */
#define ACK_SEQ(x) (((x) % (1LL << 18)) * 2048)

static struct {
    const char *group, *topic, *broker;
    int maxn, invisible, single, inflight;
    long long total, popped, acked, pops, found, empty, ack_reqs, errors, records, opaque;
    double pop_at[1 << 16];
    series_t pop_lat;
} P;

static void frame(conn_t *c, const char *head, int n, const char *body, size_t blen) {
    buf_reserve(&c->out, (size_t)n + blen + 8);
    char *f = c->out.p + c->out.len;
    put_be32(f, (uint32_t)(n + 4 + blen));
    put_be32(f + 4, (uint32_t)n);
    memcpy(f + 8, head, (size_t)n);
    if (blen) memcpy(f + 8 + n, body, blen);
    c->out.len += (size_t)n + blen + 8;
}

static void pop(conn_t *c) {
    char head[1024];
    long long opq = P.opaque++ % (1LL << 20);
    int n = snprintf(head, sizeof head,
        "{\"code\":200050,\"extFields\":{\"consumerGroup\":\"%s\",\"topic\":\"%s\",\"queueId\":\"-1\","
        "\"maxMsgNums\":\"%d\",\"invisibleTime\":\"%d\",\"pollTime\":\"1000\",\"bornTime\":\"%lld\","
        "\"initMode\":\"0\"},\"flag\":0,\"language\":\"JAVA\",\"opaque\":%lld,\"serializeTypeCurrentRPC\":\"JSON\","
        "\"version\":479}", P.group, P.topic, P.maxn, P.invisible, (long long)(now_real() * 1000), opq);
    frame(c, head, n, NULL, 0);
    P.pop_at[opq & 0xFFFF] = now_mono();
    P.pops++;
    c->inflight++;
}

/* the string value of `key` ("name":"...") in the header [h, h+n): its start, *len its length; NULL if absent */
static const char *find_str(const char *h, size_t n, const char *key, size_t *len) {
    const char *p = memmem(h, n, key, strlen(key)), *end = h + n;
    if (!p) return NULL;
    p += strlen(key);
    while (p < end && (*p == ' ' || *p == ':')) p++;
    if (p >= end || *p != '"') return NULL;
    p++;
    const char *q = memchr(p, '"', (size_t)(end - p));
    if (!q) return NULL;
    *len = (size_t)(q - p);
    return p;
}

static size_t b64(const unsigned char *in, size_t n, char *out) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
        out[o++] = A[v >> 18 & 63];
        out[o++] = A[v >> 12 & 63];
        out[o++] = i + 1 < n ? A[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? A[v & 63] : '=';
    }
    out[o] = 0;
    return o;
}

/* One queue of an answer: "mark qid start" of startOffsetInfo, "mark qid o1,o2,.." of msgOffsetInfo. */
typedef struct { char mark[8]; int qid; long long start; long long offs[1024]; int n; } qinfo_t;

static int parse_infos(const char *s, size_t sl, const char *m, size_t ml, qinfo_t *qs, int cap) {
    int nq = 0;
    const char *p = s, *end = s + sl;
    while (p < end && nq < cap) {  /* startOffsetInfo: the queues and their checkpoint starts */
        qinfo_t *q = &qs[nq];
        int used = 0;
        if (sscanf(p, "%7s %d %lld%n", q->mark, &q->qid, &q->start, &used) != 3) return -1;
        q->n = 0;
        nq++;
        p += used;
        if (p < end && *p == ';') p++;
    }
    p = m;
    end = m + ml;
    for (int k = 0; k < nq && p < end; k++) {  /* msgOffsetInfo lists the same queues in the same order */
        char mark[8];
        int qid, used = 0;
        if (sscanf(p, "%7s %d %n", mark, &qid, &used) != 2 || qid != qs[k].qid) return -1;
        p += used;
        while (p < end && *p != ';' && qs[k].n < 1024) {
            char *e;
            qs[k].offs[qs[k].n++] = strtoll(p, &e, 10);
            p = e;
            if (p < end && *p == ',') p++;
        }
        if (p < end && *p == ';') p++;
    }
    return nq;
}

static void ack_single(conn_t *c, const qinfo_t *q, long long pop_time, long long invisible, long long rq) {
    char head[1024];
    for (int i = 0; i < q->n; i++) {
        int n = snprintf(head, sizeof head,
            "{\"code\":200051,\"extFields\":{\"consumerGroup\":\"%s\",\"topic\":\"%s\",\"queueId\":\"%d\","
            "\"offset\":\"%lld\",\"extraInfo\":\"%lld %lld %lld %lld %s %s %d %lld\"},\"flag\":0,\"language\":\"JAVA\","
            "\"opaque\":%lld,\"serializeTypeCurrentRPC\":\"JSON\",\"version\":479}",
            P.group, P.topic, q->qid, q->offs[i], q->start, pop_time, invisible, rq, q->mark, P.broker, q->qid,
            q->offs[i], OPQ_ACK + ACK_SEQ(P.opaque++) + 1);
        frame(c, head, n, NULL, 0);
        P.ack_reqs++;
    }
}

static void ack_batch(conn_t *c, const qinfo_t *qs, int nq, long long pop_time, long long invisible, long long rq,
                      int count) {
    static char body[1 << 16];
    char head[512];
    size_t b = (size_t)snprintf(body, sizeof body, "{\"acks\":[");
    for (int k = 0; k < nq; k++) {
        unsigned char bits[256] = {0};
        size_t nb = 0;
        for (int i = 0; i < qs[k].n; i++) {
            long long d = qs[k].offs[i] - qs[k].start;
            if (d < 0 || d >= 2048) continue;
            bits[d / 8] |= (unsigned char)(1 << (d % 8));
            if ((size_t)d / 8 + 1 > nb) nb = (size_t)d / 8 + 1;
        }
        char enc[400];
        b64(bits, nb, enc);
        b += (size_t)snprintf(body + b, sizeof body - b,
            "%s{\"b\":\"%s\",\"c\":\"%s\",\"it\":%lld,\"pt\":%lld,\"q\":%d,\"r\":\"%s\",\"rq\":%lld,\"so\":%lld,"
            "\"t\":\"%s\"}", k ? "," : "", enc, P.group, invisible, pop_time, qs[k].qid, qs[k].mark, rq, qs[k].start,
            P.topic);
    }
    b += (size_t)snprintf(body + b, sizeof body - b, "],\"brokerName\":\"%s\"}", P.broker);
    /* the opaque carries the count, so its answer says how many it acknowledged */
    int n = snprintf(head, sizeof head,
        "{\"code\":200151,\"flag\":0,\"language\":\"JAVA\",\"opaque\":%lld,\"serializeTypeCurrentRPC\":\"JSON\","
        "\"version\":479}", OPQ_ACK + ACK_SEQ(P.opaque++) + count);
    frame(c, head, n, body, b);
    P.ack_reqs++;
}

static long long count_records(const unsigned char *p, size_t n) {
    long long k = 0;
    for (size_t pos = 0; pos + 4 <= n; k++) {
        uint32_t size = get_be32(p + pos);
        if (size < 92 || pos + size > n) break;
        pos += size;
    }
    return k;
}

static void on_pop(conn_t *c, const char *h, size_t hlen, const char *body, size_t blen) {
    long long opq = find_int(h, hlen, "\"opaque\":", 0), code = find_int(h, hlen, "\"code\":", -1);
    c->inflight--;
    series_put(&P.pop_lat, P.pop_lat.n, now_mono() - P.pop_at[opq & 0xFFFF]);
    if (code != 0) {
        if (code != 210 && code != 209 && code != 19 && ++P.errors <= 3)
            fprintf(stderr, "mqpop: pop answered %lld: %.*s\n", code, (int)hlen, h);
        P.empty++;
        return;
    }
    size_t sl = 0, ml = 0;
    const char *s = find_str(h, hlen, "\"startOffsetInfo\"", &sl), *m = find_str(h, hlen, "\"msgOffsetInfo\"", &ml);
    static qinfo_t qs[64];
    int nq = s && m ? parse_infos(s, sl, m, ml, qs, 64) : -1;
    long long pt = find_int(h, hlen, "\"popTime\":", -1), it = find_int(h, hlen, "\"invisibleTime\":", -1);
    long long rq = find_int(h, hlen, "\"reviveQid\":", -1);
    int count = 0;
    for (int k = 0; k < nq; k++) count += qs[k].n;
    long long recs = count_records((const unsigned char *)body, blen);
    if (nq < 1 || pt < 0 || it < 0 || rq < 0 || recs != count) {
        if (++P.errors <= 3) fprintf(stderr, "mqpop: unreadable pop answer (%lld records): %.*s\n", recs, (int)hlen, h);
        return;
    }
    P.found++;
    P.popped += count;
    P.records += recs;
    if (P.single)
        for (int k = 0; k < nq; k++) ack_single(c, &qs[k], pt, it, rq);
    else
        ack_batch(c, qs, nq, pt, it, rq, count);
}

static void answers(conn_t *c) {
    const char *h, *body;
    size_t hlen, blen;
    int json;
    while (next_frame(&c->in, &h, &hlen, &body, &blen, &json)) {
        long long opq = find_int(h, hlen, "\"opaque\":", -1);
        if (!json || opq < 0) continue;
        if (opq < OPQ_ACK) {
            on_pop(c, h, hlen, body, blen);
            continue;
        }
        long long code = find_int(h, hlen, "\"code\":", -1);
        if (code == 0) P.acked += (opq - OPQ_ACK) % 2048;
        else if (++P.errors <= 3) fprintf(stderr, "mqpop: ack answered %lld: %.*s\n", code, (int)hlen, h);
    }
    frames_done(&c->in);
    while (c->inflight < P.inflight && P.popped < P.total) pop(c);
}

static void usage(void) {
    fprintf(stderr, "usage: mqpop --addr HOST:PORT --topic T --total N [--group G] [--broker NAME] [--conns C]\n"
                    "  [--inflight W] [--max-msgs N] [--invisible MS] [--ack batch|single] [--timeout S]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *addr = NULL;
    int conns = 1;
    double timeout = 600;
    P.group = "bench_pop"; P.broker = "broker-a"; P.maxn = 32; P.invisible = 60000; P.inflight = 8;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) usage();
        if (!strcmp(a, "--addr")) addr = v;
        else if (!strcmp(a, "--topic")) P.topic = v;
        else if (!strcmp(a, "--group")) P.group = v;
        else if (!strcmp(a, "--broker")) P.broker = v;
        else if (!strcmp(a, "--total")) P.total = atoll(v);
        else if (!strcmp(a, "--conns")) conns = atoi(v);
        else if (!strcmp(a, "--inflight")) P.inflight = atoi(v);
        else if (!strcmp(a, "--max-msgs")) P.maxn = atoi(v);
        else if (!strcmp(a, "--invisible")) P.invisible = atoi(v);
        else if (!strcmp(a, "--ack")) { if (strcmp(v, "single") && strcmp(v, "batch")) usage(); P.single = !strcmp(v, "single"); }
        else if (!strcmp(a, "--timeout")) timeout = atof(v);
        else usage();
        i++;
    }
    if (!addr || !P.topic || P.total < 1 || conns < 1 || P.inflight < 1 || P.maxn < 1 || P.maxn > 1024) usage();

    int ep;
    conn_t *cs = connect_all(addr, conns, &ep);
    double t0 = now_mono(), deadline = t0 + timeout;
    for (int i = 0; i < conns; i++) {
        for (int k = 0; k < P.inflight; k++) pop(&cs[i]);
        flush_out(ep, &cs[i]);
    }
    int timed_out = 0;
    while (P.acked < P.total) {
        if (now_mono() > deadline || pump(ep, answers, "mqpop") < 0) { timed_out = 1; break; }
    }
    double elapsed = now_mono() - t0;
    printf("{\"consumer\":\"pop\",\"ack\":\"%s\",\"conns\":%d,\"inflight\":%d,\"msgs\":%lld,\"popped\":%lld,"
           "\"seconds\":%.3f,\"msg_per_s\":%.0f,\"pops\":%lld,\"found\":%lld,\"empty\":%lld,\"ack_requests\":%lld,"
           "\"errors\":%lld,\"timed_out\":%s,", P.single ? "single" : "batch", conns, P.inflight, P.acked, P.popped,
           elapsed, elapsed > 0 ? P.acked / elapsed : 0.0, P.pops, P.found, P.empty, P.ack_reqs, P.errors,
           timed_out ? "true" : "false");
    print_dist("pop_latency", P.pop_lat.v, P.pop_lat.n, 1);
    printf("}\n");
    return timed_out || P.errors ? 1 : 0;
}
