package org.pyrmq.tests.timer;

import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

/**
 * RocketMQ's Java remoting producer (rocketmq-client 5.x) sending timer messages: {@code Message.setDeliverTimeMs}
 * (TIMER_DELIVER_MS) for the even ones, {@code Message.setDelayTimeSec} (TIMER_DELAY_SEC) for the odd ones, then
 * one with a delay beyond the broker's maximum.
 *
 * <p>Args: namesrv topic count deliverAfterMs. Prints one JSON line per send: {@code {"key", "status", "sentAt",
 * "queueId", "offset"}}; for the last one {@code {"far": responseCode, "remark"}} (or {@code "far": "stored"}).
 */
public final class TimerProducer {
    private TimerProducer() {
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        long after = Long.parseLong(args[3]);

        DefaultMQProducer producer = new DefaultMQProducer("timer_java_pg");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("timer-" + ProcessHandle.current().pid());
        producer.setSendMsgTimeout(10_000);
        producer.start();
        try {
            for (int i = 0; i < count; i++) {
                Message msg = new Message(topic, "timer", ("java-timer-" + i).getBytes(StandardCharsets.UTF_8));
                String key = "J" + i;
                msg.setKeys(key);
                long sentAt = System.currentTimeMillis();
                if (i % 2 == 0) {
                    msg.setDeliverTimeMs(sentAt + after);
                } else {
                    msg.setDelayTimeSec(Math.max(1, after / 1000));
                }
                SendResult r = producer.send(msg);
                System.out.printf("{\"key\": \"%s\", \"status\": \"%s\", \"sentAt\": %d, \"queueId\": %d, \"offset\": %d}%n",
                        key, r.getSendStatus(), sentAt, r.getMessageQueue().getQueueId(), r.getQueueOffset());
            }
            Message far = new Message(topic, "timer", "too-far".getBytes(StandardCharsets.UTF_8));
            far.setDelayTimeSec(4L * 24 * 3600);
            try {
                producer.send(far);
                System.out.println("{\"far\": \"stored\"}");
            } catch (MQBrokerException e) {
                String remark = e.getErrorMessage() == null ? "" : e.getErrorMessage().replace("\"", "'");
                System.out.printf("{\"far\": %d, \"remark\": \"%s\"}%n", e.getResponseCode(), remark);
            }
        } finally {
            producer.shutdown();
        }
    }
}
