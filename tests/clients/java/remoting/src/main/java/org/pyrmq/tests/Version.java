package org.pyrmq.tests;

/** Prints the RocketMQ client version this project was built with (a build check of tests/java_support.py). */
public final class Version {
    public static void main(String[] args) {
        System.out.println(org.apache.rocketmq.common.MQVersion.getVersionDesc(org.apache.rocketmq.common.MQVersion.CURRENT_VERSION));
    }
}
