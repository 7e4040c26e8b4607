package org.pyrmq.tests.grpc;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientConfigurationBuilder;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * RocketMQ's 5.x Java SDK (gRPC) driven by the integration tests: each argument is one step,
 * {@code op,key=value,key=value}, run in order; one JSON object per line on stdout (the same rows as
 * tests/clients/grpc_client.py). Environment: ENDPOINT, ACCESS_KEY / SECRET_KEY.
 *
 * <p>Steps: {@code producer,topic=T1;T2,checker=commit|rollback|unknown}; {@code send,topic,count,start,tag,group,delay_ms};
 * {@code txn,topic,count,start,resolution=commit|rollback|none}; {@code checks,count,timeout};
 * {@code simple,group,topic,expr}; {@code receive,count,timeout,invisible_s,change_ms};
 * {@code push,group,topic,count,timeout,fail_times}; {@code shutdown}.
 */
public final class Steps {
    private static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();
    private Producer producer;
    private SimpleConsumer simple;
    private final Set<String> checked = ConcurrentHashMap.newKeySet();

    private static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    private static String q(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    private static ClientConfiguration config() {
        ClientConfigurationBuilder b = ClientConfiguration.newBuilder().setEndpoints(System.getenv("ENDPOINT"))
            .enableSsl(false).setRequestTimeout(Duration.ofSeconds(5));
        String ak = System.getenv("ACCESS_KEY");
        if (ak != null && !ak.isEmpty()) {
            b.setCredentialProvider(new StaticSessionCredentialsProvider(ak, System.getenv("SECRET_KEY")));
        }
        return b.build();
    }

    private static String view(MessageView m, int n) {
        String body = StandardCharsets.UTF_8.decode(m.getBody().duplicate()).toString();
        return "{\"recv\": {\"id\": " + q(m.getMessageId().toString()) + ", \"topic\": " + q(m.getTopic())
            + ", \"tag\": " + q(m.getTag().orElse(null)) + ", \"body\": " + q(body) + ", \"attempt\": "
            + m.getDeliveryAttempt() + ", \"group\": " + q(m.getMessageGroup().orElse(null)) + ", \"keys\": "
            + q(String.join(" ", m.getKeys())) + ", \"n\": " + n + ", \"at\": " + System.currentTimeMillis() + "}}";
    }

    private Message message(Map<String, String> s, int i) {
        MessageBuilder b = PROVIDER.newMessageBuilder().setTopic(s.get("topic"))
            .setBody((s.getOrDefault("prefix", "msg") + "-" + i).getBytes(StandardCharsets.UTF_8)).setKeys("key-" + i)
            .addProperty("seq", String.valueOf(i));
        if (s.containsKey("tag")) {
            b.setTag(s.get("tag"));
        }
        if (s.containsKey("group")) {
            b.setMessageGroup(s.get("group"));
        }
        if (s.containsKey("delay_ms")) {
            b.setDeliveryTimestamp(System.currentTimeMillis() + Long.parseLong(s.get("delay_ms")));
        }
        return b.build();
    }

    private void producer(Map<String, String> s) throws Exception {
        String answer = s.getOrDefault("checker", "commit");
        producer = PROVIDER.newProducerBuilder().setClientConfiguration(config()).setTopics(s.get("topic").split(";"))
            .setTransactionChecker(mv -> {
                checked.add(mv.getMessageId().toString());
                emit("{\"check\": " + q(mv.getMessageId().toString()) + "}");
                return "commit".equals(answer) ? TransactionResolution.COMMIT
                    : "rollback".equals(answer) ? TransactionResolution.ROLLBACK : TransactionResolution.UNKNOWN;
            }).build();
    }

    private void send(Map<String, String> s) {
        int start = Integer.parseInt(s.getOrDefault("start", "0"));
        for (int i = start; i < start + Integer.parseInt(s.getOrDefault("count", "1")); i++) {
            try {
                SendReceipt r = producer.send(message(s, i));
                emit("{\"sent\": " + i + ", \"id\": " + q(r.getMessageId().toString()) + ", \"recall\": "
                    + q(r.getRecallHandle()) + "}");
            } catch (Exception e) {
                emit("{\"send_error\": " + i + ", \"error\": " + q(e.toString()) + "}");
            }
        }
    }

    private void txn(Map<String, String> s) throws Exception {
        int start = Integer.parseInt(s.getOrDefault("start", "0"));
        for (int i = start; i < start + Integer.parseInt(s.getOrDefault("count", "1")); i++) {
            Transaction t = producer.beginTransaction();
            SendReceipt r = producer.send(message(s, i), t);
            emit("{\"txn\": " + i + ", \"id\": " + q(r.getMessageId().toString()) + "}");
            String res = s.getOrDefault("resolution", "commit");
            if ("commit".equals(res)) {
                t.commit();
            } else if ("rollback".equals(res)) {
                t.rollback();
            }
        }
    }

    private void checks(Map<String, String> s) throws InterruptedException {
        long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(s.getOrDefault("timeout", "60"));
        while (checked.size() < Integer.parseInt(s.get("count")) && System.currentTimeMillis() < deadline) {
            Thread.sleep(200);
        }
        Thread.sleep(1000); // the SDK sends the checker's answer asynchronously: let it go out before the next step
        List<String> ids = new ArrayList<>(checked);
        Collections.sort(ids);
        StringBuilder b = new StringBuilder("{\"checked\": [");
        for (int i = 0; i < ids.size(); i++) {
            b.append(i > 0 ? ", " : "").append(q(ids.get(i)));
        }
        emit(b.append("]}").toString());
    }

    private static FilterExpression filter(Map<String, String> s) {
        String expr = s.getOrDefault("expr", "*");
        return expr.startsWith("sql:") ? new FilterExpression(expr.substring(4), FilterExpressionType.SQL92)
            : new FilterExpression(expr, FilterExpressionType.TAG);
    }

    private void simple(Map<String, String> s) throws Exception {
        simple = PROVIDER.newSimpleConsumerBuilder().setClientConfiguration(config()).setConsumerGroup(s.get("group"))
            .setAwaitDuration(Duration.ofSeconds(5))
            .setSubscriptionExpressions(Collections.singletonMap(s.get("topic"), filter(s))).build();
    }

    private void receive(Map<String, String> s) {
        int want = Integer.parseInt(s.getOrDefault("count", "1"));
        long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(s.getOrDefault("timeout", "60"));
        Set<String> seen = new HashSet<>();
        Set<String> changed = new HashSet<>();
        Map<String, Integer> counts = new HashMap<>();
        while (seen.size() < want && System.currentTimeMillis() < deadline) {
            try {
                List<MessageView> got = simple.receive(16,
                    Duration.ofSeconds(Long.parseLong(s.getOrDefault("invisible_s", "15"))));
                for (MessageView m : got) {
                    String id = m.getMessageId().toString();
                    int n = counts.merge(id, 1, Integer::sum);
                    emit(view(m, n));
                    if (s.containsKey("change_ms") && changed.add(id)) {
                        simple.changeInvisibleDuration(m, Duration.ofMillis(Long.parseLong(s.get("change_ms"))));
                        emit("{\"changed\": " + q(id) + "}");
                        continue;
                    }
                    simple.ack(m);
                    emit("{\"acked\": " + q(id) + "}");
                    seen.add(id);
                }
            } catch (Exception e) {
                emit("{\"receive_error\": " + q(e.toString()) + "}");
            }
        }
    }

    private void push(Map<String, String> s) throws Exception {
        int want = Integer.parseInt(s.getOrDefault("count", "1"));
        int fails = Integer.parseInt(s.getOrDefault("fail_times", "0"));
        Map<String, Integer> counts = new ConcurrentHashMap<>();
        Set<String> done = ConcurrentHashMap.newKeySet();
        CountDownLatch latch = new CountDownLatch(1);
        PushConsumer unused = PROVIDER.newPushConsumerBuilder().setClientConfiguration(config())
            .setConsumerGroup(s.get("group")).setSubscriptionExpressions(Collections.singletonMap(s.get("topic"), filter(s)))
            .setMessageListener(m -> {
                String id = m.getMessageId().toString();
                int n = counts.merge(id, 1, Integer::sum);
                emit(view(m, n));
                if (n <= fails) {
                    return ConsumeResult.FAILURE;
                }
                done.add(id);
                if (done.size() >= want) {
                    latch.countDown();
                }
                return ConsumeResult.SUCCESS;
            }).build();
        latch.await(Long.parseLong(s.getOrDefault("timeout", "60")), TimeUnit.SECONDS);
        Thread.sleep(1000); // the last acks go out
        // not closed: a graceful close waits for the long-polling receive in flight (up to 20 s); the process
        // exits after the last step and the endpoint makes what that receive still gets visible again
    }

    private void shutdown() throws Exception {
        if (simple != null) {
            simple.close();
            simple = null;
        }
        if (producer != null) {
            producer.close();
            producer = null;
        }
    }

    public static void main(String[] args) throws Exception {
        Steps runner = new Steps();
        for (int i = 0; i < args.length; i++) {
            String[] parts = args[i].split(",");
            Map<String, String> s = new HashMap<>();
            for (int k = 1; k < parts.length; k++) {
                String[] kv = parts[k].split("=", 2);
                s.put(kv[0], kv.length > 1 ? kv[1] : "");
            }
            long t0 = System.currentTimeMillis();
            try {
                switch (parts[0]) {
                    case "producer": runner.producer(s); break;
                    case "send": runner.send(s); break;
                    case "txn": runner.txn(s); break;
                    case "checks": runner.checks(s); break;
                    case "simple": runner.simple(s); break;
                    case "receive": runner.receive(s); break;
                    case "push": runner.push(s); break;
                    case "shutdown": runner.shutdown(); break;
                    default: throw new IllegalArgumentException("unknown step " + parts[0]);
                }
                emit("{\"step\": " + i + ", \"op\": " + q(parts[0]) + ", \"done\": true, \"ms\": "
                    + (System.currentTimeMillis() - t0) + "}");
            } catch (Exception e) {
                emit("{\"step\": " + i + ", \"op\": " + q(parts[0]) + ", \"done\": false, \"error\": " + q(e.toString()) + "}");
            }
        }
        runner.shutdown();
        System.exit(0);
    }
}
