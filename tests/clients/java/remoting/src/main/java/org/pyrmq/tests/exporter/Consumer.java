package org.pyrmq.tests.exporter;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A push consumer for the exporter-metrics tests (it answers the broker's GET_CONSUMER_RUNNING_INFO with its
 * statusTable, as RocketMQ's Java client does).
 *
 * <p>Args: namesrv topic group mode maxReconsumeTimes. Mode {@code ok} consumes every message, {@code fail} asks
 * for every delivery again (RECONSUME_LATER), {@code failonce} fails a message's first delivery only. Prints
 * {@code {"clientId":...}} once started and one JSON line per delivery; shuts down (persisting its offsets) when
 * stdin closes.
 */
public final class Consumer {
    private Consumer() {
    }

    private static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String mode = args[3];
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args[2]);
        consumer.setNamesrvAddr(args[0]);
        consumer.setInstanceName("exporter-test-" + ProcessHandle.current().pid());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setMaxReconsumeTimes(Integer.parseInt(args[4]));
        consumer.setPersistConsumerOffsetInterval(1000);
        consumer.subscribe(args[1], "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            boolean fail = false;
            for (MessageExt m : msgs) {
                emit("{\"recv\":{\"topic\":\"" + m.getTopic() + "\",\"reconsume\":" + m.getReconsumeTimes()
                    + ",\"queueOffset\":" + m.getQueueOffset() + "}}");
                fail |= "fail".equals(mode) || ("failonce".equals(mode) && m.getReconsumeTimes() == 0);
            }
            return fail ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        emit("{\"clientId\":\"" + consumer.getDefaultMQPushConsumerImpl().getmQClientFactory().getClientId() + "\"}");

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        while (in.readLine() != null) {
            // consume until the test closes stdin
        }
        consumer.shutdown();
        emit("{\"stopped\":true}");
        System.exit(0);
    }
}
