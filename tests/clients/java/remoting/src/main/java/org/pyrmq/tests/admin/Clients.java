package org.pyrmq.tests.admin;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * A producer and a push consumer that stay online while the admin tool looks at them (the mqadmin tests).
 *
 * <p>Args: namesrv topic producerGroup consumerGroup count [accessKey secretKey]. Sends {@code count} messages
 * (keys {@code key-<i>}, tag {@code TagA}), prints one JSON line per send, then {@code {"ready":true}}, and one
 * JSON line per message the consumer gets (also after an offset reset); exits when stdin closes.
 */
public final class Clients {
    private Clients() {
    }

    private static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[4]);
        RPCHook hook = args.length > 6 ? new AclClientRPCHook(new SessionCredentials(args[5], args[6])) : null;

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args[3], hook);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("admin-test-consumer");
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.setPersistConsumerOffsetInterval(1000);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                emit("{\"recv\":{\"msgId\":\"" + m.getMsgId() + "\",\"key\":\"" + m.getKeys() + "\",\"queueId\":"
                    + m.getQueueId() + ",\"queueOffset\":" + m.getQueueOffset() + ",\"broker\":\""
                    + m.getBrokerName() + "\"}}");
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        DefaultMQProducer producer = new DefaultMQProducer(args[2], hook);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("admin-test-producer");
        producer.start();
        for (int i = 0; i < count; i++) {
            Message msg = new Message(topic, "TagA", "key-" + i, ("hello " + i).getBytes(StandardCharsets.UTF_8));
            SendResult r = producer.send(msg);
            emit("{\"sent\":{\"msgId\":\"" + r.getMsgId() + "\",\"offsetMsgId\":\"" + r.getOffsetMsgId()
                + "\",\"key\":\"key-" + i + "\",\"queueId\":" + r.getMessageQueue().getQueueId() + ",\"broker\":\""
                + r.getMessageQueue().getBrokerName() + "\",\"queueOffset\":" + r.getQueueOffset() + "}}");
        }
        emit("{\"ready\":true,\"clientId\":\"" + consumer.getDefaultMQPushConsumerImpl().getmQClientFactory()
            .getClientId() + "\"}");

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        while (in.readLine() != null) {
            // stay online until the test closes stdin
        }
        producer.shutdown();
        consumer.shutdown();
        System.exit(0);
    }
}
