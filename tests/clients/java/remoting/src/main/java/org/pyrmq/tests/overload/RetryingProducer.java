package org.pyrmq.tests.overload;

import java.util.Arrays;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

/**
 * RocketMQ's Java producer, open loop, as an application uses it next to a flooded broker set: synchronous sends
 * on a fixed schedule across every queue of the topic's broker sets, with the client's own retry of the codes in
 * {@code retryResponseCodes} (SYSTEM_BUSY among them) on another broker set ({@code retryTimesWhenSendFailed}).
 *
 * <p>Args: namesrv topic rate(msg/s) seconds [threads] [latencyFaultEnable] [warmupSeconds]. Send i is due at
 * start + i / rate and goes out on a pool of {@code threads} (64) senders; its latency counts from its due time (a
 * send that waits for a free sender still counts from then). Before the measured schedule, {@code warmupSeconds}
 * (2) of the same schedule run unmeasured on the same pool, as a long-running application's producer is warm
 * (its classes loaded, its code compiled, its senders started). Prints one JSON line: sends, results by status,
 * failures by response code, the broker set each message was stored on, the latency distribution (ms).
 */
public final class RetryingProducer {
    private RetryingProducer() {
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        String topic = args[1];
        double rate = Double.parseDouble(args[2]);
        double seconds = Double.parseDouble(args[3]);
        int threads = args.length > 4 ? Integer.parseInt(args[4]) : 64;
        boolean isolate = args.length > 5 && Boolean.parseBoolean(args[5]);
        double warmup = args.length > 6 ? Double.parseDouble(args[6]) : 2.0;

        DefaultMQProducer producer = new DefaultMQProducer("overload_retry_pg");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("overload-" + ProcessHandle.current().pid());
        producer.setSendMsgTimeout(3000);
        producer.setRetryTimesWhenSendFailed(2);
        producer.setSendLatencyFaultEnable(isolate);
        producer.start();
        byte[] body = new byte[1024];
        Arrays.fill(body, (byte) 'x');
        for (int i = 0; i < 20; i++) {  // routes known and connections open before the schedule starts
            producer.send(new Message(topic, "warm", body));
        }
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        int warm = (int) (rate * warmup);
        long warmStart = System.nanoTime();
        for (int i = 0; i < warm; i++) {  // unmeasured: the same schedule, so the measured one runs warm
            sleepUntil(warmStart + (long) (i * 1e9 / rate));
            pool.execute(() -> {
                try {
                    producer.send(new Message(topic, "warm", body));
                } catch (Exception e) {
                    // a warm-up send's outcome is not measured
                }
            });
        }

        int total = (int) (rate * seconds);
        double[] latency = new double[total];
        Map<String, LongAdder> stored = new ConcurrentHashMap<>();
        Map<String, LongAdder> failed = new ConcurrentHashMap<>();
        LongAdder ok = new LongAdder();
        AtomicLong done = new AtomicLong();
        long start = System.nanoTime() + 200_000_000L;
        for (int i = 0; i < total; i++) {
            long due = start + (long) (i * 1e9 / rate);
            sleepUntil(due);
            final int n = i;
            pool.execute(() -> {
                try {
                    SendResult r = producer.send(new Message(topic, "t", body));
                    if (r.getSendStatus() == SendStatus.SEND_OK) {
                        ok.increment();
                    }
                    stored.computeIfAbsent(r.getMessageQueue().getBrokerName(), k -> new LongAdder()).increment();
                } catch (MQBrokerException e) {
                    failed.computeIfAbsent("code_" + e.getResponseCode(), k -> new LongAdder()).increment();
                } catch (MQClientException e) {
                    failed.computeIfAbsent("client_" + e.getResponseCode(), k -> new LongAdder()).increment();
                } catch (Exception e) {
                    failed.computeIfAbsent(e.getClass().getSimpleName(), k -> new LongAdder()).increment();
                }
                latency[n] = (System.nanoTime() - due) / 1e6;
                done.incrementAndGet();
            });
        }
        pool.shutdown();
        pool.awaitTermination(120, TimeUnit.SECONDS);
        producer.shutdown();

        double[] sorted = latency.clone();
        Arrays.sort(sorted);
        StringBuilder out = new StringBuilder("{\"sends\":").append(total).append(",\"done\":").append(done.get())
            .append(",\"ok\":").append(ok.sum()).append(",\"stored_on\":").append(json(stored))
            .append(",\"failed\":").append(json(failed)).append(",\"latency_ms\":{");
        String[] names = {"p50", "p90", "p99", "p99.9", "max"};
        double[] ps = {50, 90, 99, 99.9, 100};
        for (int k = 0; k < ps.length; k++) {
            int idx = Math.min(total - 1, (int) (total * ps[k] / 100));
            out.append(k > 0 ? "," : "").append('"').append(names[k]).append("\":")
                .append(String.format("%.3f", total > 0 ? sorted[idx] : 0.0));
        }
        System.out.println(out.append("}}"));
        System.exit(0);
    }

    /** Waits for {@code due} (System.nanoTime); returns at once when it passed. */
    private static void sleepUntil(long due) throws InterruptedException {
        long wait = due - System.nanoTime();
        if (wait > 0) {
            TimeUnit.NANOSECONDS.sleep(wait);
        }
    }

    private static String json(Map<String, LongAdder> m) {
        StringBuilder b = new StringBuilder("{");
        for (Map.Entry<String, LongAdder> e : new TreeMap<>(m).entrySet()) {
            b.append(b.length() > 1 ? "," : "").append('"').append(e.getKey()).append("\":").append(e.getValue().sum());
        }
        return b.append('}').toString();
    }
}
