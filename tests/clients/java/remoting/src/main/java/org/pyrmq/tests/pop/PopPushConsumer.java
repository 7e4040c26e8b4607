package org.pyrmq.tests.pop;

import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.impl.consumer.DefaultMQPushConsumerImpl;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageRequestMode;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * RocketMQ 5's Java remoting push consumer in POP mode: the group's request mode is set to POP on every master
 * (RocketMQ's admin API, SET_MESSAGE_REQUEST_MODE), the consumer asks the brokers for its assignment
 * (clientRebalance=false: QUERY_ASSIGNMENT) and pops, acks, and changes the invisible time of the messages its
 * listener fails once. One JSON line per delivery on stdout, then a summary line.
 *
 * args: namesrv topic group expected failOnce timeoutSeconds
 */
public class PopPushConsumer {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], group = args[2];
        int expected = Integer.parseInt(args[3]);
        int failOnce = Integer.parseInt(args[4]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[5]) * 1000;

        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setAdminExtGroup("pop_admin_" + System.nanoTime());
        admin.start();
        ClusterInfo info = admin.examineBrokerClusterInfo();
        for (BrokerData bd : info.getBrokerAddrTable().values()) {
            String master = bd.getBrokerAddrs().get(0L);
            if (master != null) {
                admin.setMessageRequestMode(master, topic, group, MessageRequestMode.POP, 0, 5000);
                System.out.println("{\"modeSet\":\"" + master + "\"}");
            }
        }
        admin.shutdown();

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setClientRebalance(false);
        consumer.setPopInvisibleTime(20000);
        consumer.setInstanceName("pop_" + System.nanoTime());
        consumer.subscribe(topic, "*");
        shortenPopDelays(consumer.getDefaultMQPushConsumerImpl());
        Set<String> failed = ConcurrentHashMap.newKeySet();
        Set<String> done = ConcurrentHashMap.newKeySet();
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                int n = Integer.parseInt(body.substring(body.lastIndexOf('-') + 1));
                boolean fail = n < failOnce && failed.add(body);
                System.out.println("{\"recv\":{\"body\":\"" + body + "\",\"reconsumeTimes\":" + m.getReconsumeTimes()
                    + ",\"topic\":\"" + m.getTopic() + "\",\"queueId\":" + m.getQueueId() + ",\"failed\":" + fail
                    + ",\"popCk\":" + (m.getProperty("POP_CK") != null) + "}}");
                if (fail) {
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                done.add(body);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        while (done.size() < expected && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
        }
        Thread.sleep(1500);  // let the last acks go out before the summary
        DefaultMQPushConsumerImpl impl = consumer.getDefaultMQPushConsumerImpl();
        int pop = impl.getRebalanceImpl().getPopProcessQueueTable().size();
        int pull = 0;
        for (Map.Entry<?, ?> e : impl.getRebalanceImpl().getProcessQueueTable().entrySet()) {
            if (e.getKey().toString().contains("topic=" + topic + ",")) {
                pull++;
            }
        }
        System.out.println("{\"summary\":{\"done\":" + done.size() + ",\"popQueues\":" + pop + ",\"pullQueues\":" + pull
            + "}}");
        consumer.shutdown();
        System.exit(0);
    }

    /** The POP consumer retries a failed message after popDelayLevel[reconsumeTimes] seconds (10 s first): 1 s here. */
    private static void shortenPopDelays(DefaultMQPushConsumerImpl impl) throws Exception {
        Field f = DefaultMQPushConsumerImpl.class.getDeclaredField("popDelayLevel");
        f.setAccessible(true);
        int[] levels = (int[]) f.get(impl);
        java.util.Arrays.fill(levels, 1);
    }
}
