// RocketMQ's 5.x Go SDK (github.com/apache/rocketmq-clients/golang/v5, gRPC) driven by the integration tests:
// the steps of STEPS (JSON) in order, one JSON object per line on stdout (the rows of tests/clients/grpc_client.py).
// Environment: ENDPOINT, STEPS, ACCESS_KEY / SECRET_KEY. Steps: producer, send, txn, checks, simple, receive.
//
// The SDK dials TLS only; it is given a plaintext transport through its public NewRpcClient hook.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

type step map[string]any

var outMu sync.Mutex

func emit(v map[string]any) {
	outMu.Lock()
	defer outMu.Unlock()
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func (s step) str(k, def string) string {
	if v, ok := s[k]; ok {
		return fmt.Sprint(v)
	}
	return def
}

func (s step) num(k string, def int) int {
	n, err := strconv.Atoi(s.str(k, strconv.Itoa(def)))
	if err != nil {
		return def
	}
	return n
}

func config(group string) *rmq.Config {
	return &rmq.Config{Endpoint: os.Getenv("ENDPOINT"), ConsumerGroup: group,
		Credentials: &credentials.SessionCredentials{AccessKey: os.Getenv("ACCESS_KEY"), AccessSecret: os.Getenv("SECRET_KEY")}}
}

type runner struct {
	producer rmq.Producer
	simple   rmq.SimpleConsumer
	mu       sync.Mutex
	checked  map[string]bool
}

func (r *runner) message(s step, i int) *rmq.Message {
	m := &rmq.Message{Topic: s.str("topic", ""), Body: []byte(s.str("prefix", "msg") + "-" + strconv.Itoa(i))}
	m.SetKeys("key-" + strconv.Itoa(i))
	m.AddProperty("seq", strconv.Itoa(i))
	if t := s.str("tag", ""); t != "" {
		m.SetTag(t)
	}
	if g := s.str("group", ""); g != "" {
		m.SetMessageGroup(g)
	}
	if d := s.num("delay_ms", 0); d > 0 {
		m.SetDelayTimestamp(time.Now().Add(time.Duration(d) * time.Millisecond))
	}
	return m
}

func (r *runner) startProducer(s step) error {
	topics := []string{}
	if ts, ok := s["topics"].([]any); ok {
		for _, t := range ts {
			topics = append(topics, fmt.Sprint(t))
		}
	}
	answer := s.str("checker", "commit")
	checker := &rmq.TransactionChecker{Check: func(mv *rmq.MessageView) rmq.TransactionResolution {
		r.mu.Lock()
		r.checked[mv.GetMessageId()] = true
		r.mu.Unlock()
		emit(map[string]any{"check": mv.GetMessageId()})
		switch answer {
		case "commit":
			return rmq.COMMIT
		case "rollback":
			return rmq.ROLLBACK
		}
		return rmq.UNKNOWN
	}}
	p, err := rmq.NewProducer(config(""), rmq.WithTopics(topics...), rmq.WithTransactionChecker(checker))
	if err != nil {
		return err
	}
	r.producer = p
	return p.Start()
}

func (r *runner) send(s step) {
	start := s.num("start", 0)
	for i := start; i < start+s.num("count", 1); i++ {
		receipts, err := r.producer.Send(context.TODO(), r.message(s, i))
		if err != nil {
			emit(map[string]any{"send_error": i, "error": err.Error()})
			continue
		}
		emit(map[string]any{"sent": i, "id": receipts[0].MessageID, "offset": receipts[0].Offset})
	}
}

func (r *runner) txn(s step) error {
	start := s.num("start", 0)
	for i := start; i < start+s.num("count", 1); i++ {
		t := r.producer.BeginTransaction()
		receipts, err := r.producer.SendWithTransaction(context.TODO(), r.message(s, i), t)
		if err != nil {
			return err
		}
		emit(map[string]any{"txn": i, "id": receipts[0].MessageID})
		switch s.str("resolution", "commit") {
		case "commit":
			err = t.Commit()
		case "rollback":
			err = t.RollBack()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) checks(s step) {
	deadline := time.Now().Add(time.Duration(s.num("timeout", 60)) * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		n := len(r.checked)
		r.mu.Unlock()
		if n >= s.num("count", 1) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second) // the SDK answers the check asynchronously: let it go out before the next step
	r.mu.Lock()
	ids := []string{}
	for id := range r.checked {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	sort.Strings(ids)
	emit(map[string]any{"checked": ids})
}

func (r *runner) startSimple(s step) error {
	c, err := rmq.NewSimpleConsumer(config(s.str("group", "")), rmq.WithAwaitDuration(5*time.Second),
		rmq.WithSubscriptionExpressions(map[string]*rmq.FilterExpression{s.str("topic", ""): rmq.NewFilterExpression(s.str("expr", "*"))}))
	if err != nil {
		return err
	}
	r.simple = c
	return c.Start()
}

func (r *runner) receive(s step) {
	want := s.num("count", 1)
	deadline := time.Now().Add(time.Duration(s.num("timeout", 60)) * time.Second)
	seen, changed, counts := map[string]bool{}, map[string]bool{}, map[string]int{}
	for len(seen) < want && time.Now().Before(deadline) {
		mvs, err := r.simple.Receive(context.TODO(), 16, time.Duration(s.num("invisible_s", 15))*time.Second)
		if err != nil {
			emit(map[string]any{"receive_error": err.Error()})
			time.Sleep(500 * time.Millisecond)
			continue
		}
		for _, m := range mvs {
			id := m.GetMessageId()
			counts[id]++
			group := ""
			if g := m.GetMessageGroup(); g != nil {
				group = *g
			}
			emit(map[string]any{"recv": map[string]any{"id": id, "topic": m.GetTopic(), "body": string(m.GetBody()),
				"attempt": m.GetDeliveryAttempt(), "group": group, "keys": m.GetKeys(), "n": counts[id],
				"at": time.Now().UnixMilli()}})
			if ms := s.num("change_ms", 0); ms > 0 && !changed[id] {
				changed[id] = true
				if err := r.simple.ChangeInvisibleDuration(m, time.Duration(ms)*time.Millisecond); err != nil {
					emit(map[string]any{"change_error": err.Error()})
				} else {
					emit(map[string]any{"changed": id})
				}
				continue
			}
			if err := r.simple.Ack(context.TODO(), m); err != nil {
				emit(map[string]any{"ack_error": err.Error()})
				continue
			}
			emit(map[string]any{"acked": id})
			seen[id] = true
		}
	}
}

func (r *runner) shutdown() {
	if r.simple != nil {
		_ = r.simple.GracefulStop()
		r.simple = nil
	}
	if r.producer != nil {
		_ = r.producer.GracefulStop()
		r.producer = nil
	}
}

func (r *runner) run(s step) error {
	switch s.str("op", "") {
	case "producer":
		return r.startProducer(s)
	case "send":
		r.send(s)
	case "txn":
		return r.txn(s)
	case "checks":
		r.checks(s)
	case "simple":
		return r.startSimple(s)
	case "receive":
		r.receive(s)
	case "shutdown":
		r.shutdown()
	default:
		return fmt.Errorf("unknown step %v", s["op"])
	}
	return nil
}

func main() {
	plain := rmq.NewRpcClient
	rmq.NewRpcClient = func(target string, opts ...rmq.RpcClientOption) (rmq.RpcClient, error) {
		opts = append(opts, rmq.WithRpcClientConnOption(rmq.WithDialOptions(
			grpc.WithTransportCredentials(insecure.NewCredentials()))))
		return plain(target, opts...)
	}
	os.Setenv("mq.consoleAppender.enabled", "false")
	var steps []step
	if err := json.Unmarshal([]byte(os.Getenv("STEPS")), &steps); err != nil {
		emit(map[string]any{"step": 0, "done": false, "error": "bad STEPS: " + err.Error()})
		os.Exit(1)
	}
	r := &runner{checked: map[string]bool{}}
	for i, s := range steps {
		t0 := time.Now()
		if err := r.run(s); err != nil {
			emit(map[string]any{"step": i, "op": s["op"], "done": false, "error": err.Error()})
			continue
		}
		emit(map[string]any{"step": i, "op": s["op"], "done": true, "ms": time.Since(t0).Milliseconds()})
	}
	r.shutdown()
	os.Exit(0)
}
