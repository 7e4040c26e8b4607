package org.pyrmq.tests;

/** Prints the gRPC SDK's provider class (a build check of tests/java_support.py). */
public final class Version {
    public static void main(String[] args) {
        System.out.println(org.apache.rocketmq.client.apis.ClientServiceProvider.loadService().getClass().getName());
    }
}
