// grpcload: the compiled load client of scripts/bench/grpc.py. It drives a gRPC server with raw protobuf bytes
// (no generated stubs: the few messages it needs are written and read with protowire), so that what a run
// measures is the server: this client costs a few µs of CPU per RPC where a grpc.aio client costs as much as the
// server it drives.
//
// Modes:
//
//	unary   -method /pkg.Svc/M: the request is -body bytes, the answer is ignored (an echo server's floor)
//	stream  -method /pkg.Svc/M: a server-streaming call per request; every answer on the stream counts
//	send    SendMessage of -per-rpc messages of -body bytes to -topic (RocketMQ's apache.rocketmq.v2)
//	receive ReceiveMessage (-batch, long polling) then one AckMessage of what came, on -group / -topic
//
// -conns channels, -inflight concurrent calls on each; -total messages (send, receive) or RPCs (unary, stream).
// With -sync the client connects, answers one warm-up call per channel, prints "ready" and waits for a line on
// stdin before the measured run, so that the caller can sample the server's CPU around exactly that run. The
// result is one JSON object on stdout.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
)

const service = "/apache.rocketmq.v2.MessagingService/"

// rawCodec passes []byte through: requests are written by hand, answers parsed by hand.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

type options struct {
	mode, addr, method, topic, group string
	body, total, conns, inflight     int
	perRPC, batch, pollMs, timeoutMs int
	sync                             bool
}

type result struct {
	RPCs        int64   `json:"rpcs"`
	Msgs        int64   `json:"msgs"`
	Errors      int64   `json:"errors"`
	Seconds     float64 `json:"seconds"`
	MsgPerS     float64 `json:"msg_per_s"`
	RPCPerS     float64 `json:"rpc_per_s"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	ClientCPUs  float64 `json:"client_cpu_s"`
	ClientCPUus float64 `json:"client_cpu_us_per_msg"`
	FirstError  string  `json:"first_error,omitempty"`
}

func resource(name string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, 2, protowire.BytesType), name)
}

func field(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func varintField(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

// sendRequest: SendMessageRequest{messages: n x Message{topic, system_properties{message_id}, body}}.
func sendRequest(topic string, id string, n int, body []byte) []byte {
	var out []byte
	for i := 0; i < n; i++ {
		sp := field(nil, 3, []byte(fmt.Sprintf("%s-%d", id, i)))
		m := field(nil, 1, resource(topic))
		m = field(m, 3, sp)
		m = field(m, 4, body)
		out = field(out, 1, m)
	}
	return out
}

// fields returns the length-delimited and varint fields of one message: number -> values.
func fields(b []byte) (map[protowire.Number][][]byte, map[protowire.Number]uint64) {
	bytesF := map[protowire.Number][][]byte{}
	ints := map[protowire.Number]uint64{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return bytesF, ints
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return bytesF, ints
			}
			bytesF[num] = append(bytesF[num], v)
			b = b[m:]
		case protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return bytesF, ints
			}
			ints[num] = v
			b = b[m:]
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return bytesF, ints
			}
			b = b[m:]
		}
	}
	return bytesF, ints
}

// statusCode: the code of a response's Status (field 1).
func statusCode(resp []byte) uint64 {
	f, _ := fields(resp)
	if s, ok := f[1]; ok {
		_, ints := fields(s[0])
		return ints[1]
	}
	return 0
}

func durationMs(ms int) []byte {
	d := varintField(nil, 1, uint64(ms/1000))
	if ms%1000 != 0 {
		d = varintField(d, 2, uint64(ms%1000)*1_000_000)
	}
	return d
}

func receiveRequest(o *options) []byte {
	r := field(nil, 1, resource(o.group))
	r = field(r, 2, field(nil, 1, resource(o.topic)))
	r = field(r, 3, field(varintField(nil, 1, 1), 2, []byte("*")))
	r = varintField(r, 4, uint64(o.batch))
	r = field(r, 5, durationMs(30_000))
	return field(r, 7, durationMs(o.pollMs))
}

type runner struct {
	o        *options
	finish   context.CancelFunc // receive: cancels the long polls still waiting once every message is acked
	ended    atomic.Int64       // receive: when the last message was acked (unix ns)
	left     atomic.Int64       // sends / RPCs not yet started; receive: messages not yet acked
	msgs     atomic.Int64
	rpcs     atomic.Int64
	errors   atomic.Int64
	mu       sync.Mutex
	lat      []time.Duration
	firstErr string
}

func (r *runner) fail(err string) {
	r.errors.Add(1)
	r.mu.Lock()
	if r.firstErr == "" {
		r.firstErr = err
	}
	r.mu.Unlock()
}

func (r *runner) worker(ctx context.Context, cc *grpc.ClientConn, id string) {
	var lat []time.Duration
	defer func() {
		r.mu.Lock()
		r.lat = append(r.lat, lat...)
		r.mu.Unlock()
	}()
	payload := make([]byte, r.o.body)
	for i := range payload {
		payload[i] = 'x'
	}
	recvReq := receiveRequest(r.o)
	seq := 0
	for {
		if r.o.mode != "receive" && r.left.Add(-1) < 0 {
			return
		}
		if r.o.mode == "receive" && r.left.Load() <= 0 {
			return
		}
		t0 := time.Now()
		var n int
		var err error
		switch r.o.mode {
		case "unary":
			n, err = r.unary(ctx, cc, r.o.method, payload)
		case "stream":
			n, err = r.stream(ctx, cc, r.o.method, payload)
		case "send":
			seq++
			n, err = r.send(ctx, cc, sendRequest(r.o.topic, fmt.Sprintf("%s-%d", id, seq), r.o.perRPC, payload))
		default:
			n, err = r.receiveAck(ctx, cc, recvReq)
			if n == 0 && err == nil {
				continue
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.fail(err.Error())
			continue
		}
		lat = append(lat, time.Since(t0))
		r.msgs.Add(int64(n))
	}
}

func (r *runner) unary(ctx context.Context, cc *grpc.ClientConn, method string, req []byte) (int, error) {
	var resp []byte
	r.rpcs.Add(1)
	if err := cc.Invoke(ctx, method, &req, &resp); err != nil {
		return 0, err
	}
	return 1, nil
}

func (r *runner) send(ctx context.Context, cc *grpc.ClientConn, req []byte) (int, error) {
	var resp []byte
	r.rpcs.Add(1)
	if err := cc.Invoke(ctx, service+"SendMessage", &req, &resp); err != nil {
		return 0, err
	}
	if code := statusCode(resp); code != 20000 {
		return 0, fmt.Errorf("SendMessage answered code %d", code)
	}
	return r.o.perRPC, nil
}

var streamDesc = grpc.StreamDesc{ServerStreams: true}

// stream: one server-streaming call; every answer on it counts as one message.
func (r *runner) stream(ctx context.Context, cc *grpc.ClientConn, method string, req []byte) (int, error) {
	answers, err := r.streamCall(ctx, cc, method, req)
	return len(answers), err
}

func (r *runner) streamCall(ctx context.Context, cc *grpc.ClientConn, method string, req []byte) ([][]byte, error) {
	r.rpcs.Add(1)
	cs, err := cc.NewStream(ctx, &streamDesc, method)
	if err != nil {
		return nil, err
	}
	if err := cs.SendMsg(&req); err != nil {
		return nil, err
	}
	if err := cs.CloseSend(); err != nil {
		return nil, err
	}
	var out [][]byte
	for {
		var resp []byte
		if err := cs.RecvMsg(&resp); err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		out = append(out, resp)
	}
}

// receiveAck: ReceiveMessage, then one AckMessage of every message it brought; the number acked.
func (r *runner) receiveAck(ctx context.Context, cc *grpc.ClientConn, req []byte) (int, error) {
	answers, err := r.streamCall(ctx, cc, service+"ReceiveMessage", req)
	if err != nil {
		return 0, err
	}
	ack := field(field(nil, 1, resource(r.o.group)), 2, resource(r.o.topic))
	n := 0
	for _, a := range answers {
		f, _ := fields(a)
		msg, ok := f[2]
		if !ok {
			continue
		}
		mf, _ := fields(msg[0])
		sp, _ := fields(mf[3][0])
		entry := field(field(nil, 1, sp[3][0]), 2, sp[12][0])
		ack = field(ack, 3, entry)
		n++
	}
	if n == 0 {
		return 0, nil
	}
	var resp []byte
	r.rpcs.Add(1)
	if err := cc.Invoke(ctx, service+"AckMessage", &ack, &resp); err != nil {
		return 0, err
	}
	if code := statusCode(resp); code != 20000 {
		return 0, fmt.Errorf("AckMessage answered code %d", code)
	}
	if r.left.Add(-int64(n)) <= 0 {
		r.ended.CompareAndSwap(0, time.Now().UnixNano())
		r.finish()
	}
	return n, nil
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func percentile(lat []time.Duration, q float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	i := int(float64(len(lat)) * q)
	if i >= len(lat) {
		i = len(lat) - 1
	}
	return float64(lat[i].Microseconds()) / 1000
}

func parse() *options {
	o := &options{}
	flag.StringVar(&o.mode, "mode", "send", "unary | stream | send | receive")
	flag.StringVar(&o.addr, "addr", "127.0.0.1:8081", "host:port")
	flag.StringVar(&o.method, "method", "/bench.Echo/Echo", "unary / stream: the method path")
	flag.StringVar(&o.topic, "topic", "BenchGrpc", "send / receive: the topic")
	flag.StringVar(&o.group, "group", "benchGroup", "receive: the consumer group")
	flag.IntVar(&o.body, "body", 1024, "payload bytes")
	flag.IntVar(&o.total, "total", 10000, "messages (send, receive) or RPCs (unary, stream)")
	flag.IntVar(&o.conns, "conns", 4, "channels (HTTP/2 connections)")
	flag.IntVar(&o.inflight, "inflight", 32, "concurrent calls per channel")
	flag.IntVar(&o.perRPC, "per-rpc", 1, "send: messages per SendMessage")
	flag.IntVar(&o.batch, "batch", 32, "receive: batch size")
	flag.IntVar(&o.pollMs, "poll-ms", 5000, "receive: long polling timeout")
	flag.IntVar(&o.timeoutMs, "timeout-ms", 600000, "the whole run's deadline")
	flag.BoolVar(&o.sync, "sync", false, "print ready, wait for a stdin line, then run")
	flag.Parse()
	return o
}

func main() {
	o := parse()
	chans := make([]*grpc.ClientConn, o.conns)
	for c := range chans {
		cc, err := grpc.Dial(o.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}),
				grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		chans[c] = cc
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(o.timeoutMs)*time.Millisecond)
	defer cancel()
	r := &runner{o: o}
	mdCtx := func(c int) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", fmt.Sprintf("bench-%s-%d-%d", o.mode, os.Getpid(), c),
			"x-mq-language", "GOLANG", "x-mq-client-version", "5.1.2", "x-mq-protocol", "GRPC_V2")
	}
	if o.sync {
		warm := &runner{o: &options{mode: "unary", body: 1}}
		for c, cc := range chans { // one call per channel connects it; the answer does not matter
			_, _ = warm.unary(mdCtx(c), cc, service+"QueryAssignment", []byte{})
		}
		fmt.Println("ready")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	}
	r.left.Store(int64(o.total))
	if o.mode == "send" {
		r.left.Store(int64((o.total + o.perRPC - 1) / o.perRPC))
	}
	runCtx, finish := context.WithCancel(ctx)
	r.finish = finish
	cpu0, t0 := cpuSeconds(), time.Now()
	var wg sync.WaitGroup
	for c, cc := range chans {
		md := metadata.AppendToOutgoingContext(runCtx, "x-mq-client-id",
			fmt.Sprintf("bench-%s-%d-%d", o.mode, os.Getpid(), c), "x-mq-language", "GOLANG",
			"x-mq-client-version", "5.1.2", "x-mq-protocol", "GRPC_V2")
		for k := 0; k < o.inflight; k++ {
			wg.Add(1)
			go func(k int, cc *grpc.ClientConn, md context.Context) {
				defer wg.Done()
				r.worker(md, cc, fmt.Sprintf("m%d-%d-%d", os.Getpid(), c, k))
			}(k, cc, md)
		}
	}
	wg.Wait()
	finish()
	dt := time.Since(t0).Seconds()
	if end := r.ended.Load(); end != 0 { // the long polls cancelled after the last ack are not the run's time
		dt = float64(end-t0.UnixNano()) / 1e9
	}
	cpu := cpuSeconds() - cpu0
	msgs := r.msgs.Load()
	res := result{RPCs: r.rpcs.Load(), Msgs: msgs, Errors: r.errors.Load(), Seconds: dt,
		MsgPerS: float64(msgs) / dt, RPCPerS: float64(r.rpcs.Load()) / dt, P50ms: percentile(r.lat, 0.5),
		P99ms: percentile(r.lat, 0.99), ClientCPUs: cpu, FirstError: r.firstErr}
	if msgs > 0 {
		res.ClientCPUus = cpu * 1e6 / float64(msgs)
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	for _, cc := range chans {
		_ = cc.Close()
	}
}
