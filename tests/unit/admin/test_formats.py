"""The tables mqadmin prints, from decoded bodies (RocketMQ 5.3's columns and trailer lines)."""

from __future__ import annotations

from brokerd.admin import formats
from brokerd.admin.cmd_topic import allocate_averagely
from brokerd.admin.jsonx import loads
from brokerd.admin.model import ClusterInfo, ConsumerConnection, ConsumeStats, MessageQueue, TopicRoute, topic_stats

STATS = ('{"consumeTps":2.5,"offsetTable":{'
         '{"brokerName":"broker-b","queueId":0,"topic":"T"}:{"brokerOffset":10,"consumerOffset":4,"pullOffset":6,'
         '"lastTimestamp":0},'
         '{"brokerName":"broker-a","queueId":1,"topic":"T"}:{"brokerOffset":7,"consumerOffset":7,"pullOffset":7,'
         '"lastTimestamp":0}}}')


def test_consumer_progress_rows_sorted_and_trailer() -> None:
    text = formats.consumer_progress(ConsumeStats.from_json(loads(STATS)))
    lines = text.splitlines()
    assert lines[0].startswith("#Topic") and "#Broker Offset" in lines[0] and lines[0].endswith("#LastTime")
    assert lines[1].split() == ["T", "broker-a", "1", "7", "7", "0", "0", "N/A"]
    assert lines[2].split() == ["T", "broker-b", "0", "10", "4", "6", "2", "N/A"]
    assert lines[-3:] == ["Consume TPS: 2.50", "Consume Diff Total: 6", "Consume Inflight Total: 2"]
    assert lines[1].index("broker-a") == 66 and lines[1][:64].rstrip() == "T"  # %-64s  %-32s


def test_consumer_progress_with_client_ips() -> None:
    stats = ConsumeStats.from_json(loads(STATS))
    text = formats.consumer_progress(stats, {MessageQueue("T", "broker-a", 1): "10.0.0.1"})
    assert "#Client IP" in text.splitlines()[0]
    assert "10.0.0.1" in text.splitlines()[1] and "N/A" in text.splitlines()[2]


def test_topic_status_and_route_list() -> None:
    body = loads('{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:'
                 '{"minOffset":1,"maxOffset":9,"lastUpdateTimestamp":0}}}')
    lines = formats.topic_status(topic_stats(body), 1.5).splitlines()
    assert lines[-2:] == ["", "Topic Put TPS: 1.5"]
    assert lines[0] == "#Broker Name                      #QID  #Min Offset           #Max Offset             #Last Updated"
    assert lines[1].split() == ["b", "0", "1", "9"]
    route = TopicRoute.from_json(loads(
        '{"brokerDatas":[{"brokerAddrs":{"0":"h:1","1":"h:2"},"brokerName":"b","cluster":"C"}],'
        '"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":4,"writeQueueNums":2,"topicSysFlag":0}]}'))
    text = formats.topic_route_list(route)
    assert "{0=h:1, 1=h:2}" in text and text.splitlines()[-1].split() == ["Total:", "1", "4", "2"]
    assert formats.topic_route_json(route).startswith('{\n\t"brokerDatas":[')


def test_cluster_walks() -> None:
    ci = ClusterInfo.from_json(loads(
        '{"brokerAddrTable":{"a":{"brokerAddrs":{"0":"h:1","1":"h:2"},"brokerName":"a","cluster":"C"},'
        '"b":{"brokerAddrs":{"1":"h:4"},"brokerName":"b","cluster":"C"}},"clusterAddrTable":{"C":["b","a"]}}'))
    assert ci.masters("C") == ["h:1"] and ci.all_addrs("C") == ["h:1", "h:2", "h:4"]
    assert ci.masters_and_slaves("C") == [("h:1", ["h:2"]), (None, ["h:4"])]  # the names' HashSet order
    pair = ClusterInfo.from_json(loads(
        '{"brokerAddrTable":{"broker-a":{"brokerAddrs":{"0":"h:1"},"brokerName":"broker-a","cluster":"C"},'
        '"broker-b":{"brokerAddrs":{"0":"h:2"},"brokerName":"broker-b","cluster":"C"}},'
        '"clusterAddrTable":{"C":["broker-a","broker-b"]}}'))
    # RocketMQ walks a HashSet of the names, where broker-b comes before broker-a: two masters in one bucket of
    # getBrokerConfig -c's HashMap are printed in that order
    assert pair.masters_and_slaves("C") == [("h:2", []), ("h:1", [])]
    assert ci.name_of_addr("h:4") == "b" and ci.masters("nope") == []
    rows = formats.cluster_rows(ci, ["C"])
    assert [r[1:3] for r in rows] == [("a", 0), ("a", 1), ("b", 1)]


def test_consumer_connection_and_group_rows() -> None:
    cc = ConsumerConnection.from_json(loads(
        '{"connectionSet":[{"clientId":"10.0.0.1@1","clientAddr":"10.0.0.1:5","language":"JAVA","version":479}],'
        '"subscriptionTable":{"T":{"topic":"T","subString":"*"}},"consumeType":"CONSUME_PASSIVELY",'
        '"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET"}'))
    text = formats.consumer_connection(cc)
    assert "10.0.0.1@1" in text and "V5_3_3" in text and "\nBelow is subscription:\n" in text
    assert text.endswith("ConsumeType: CONSUME_PASSIVELY\nMessageModel: CLUSTERING\n"
                         "ConsumeFromWhere: CONSUME_FROM_LAST_OFFSET\n")
    row = formats.group_list_row("G", cc, ConsumeStats.from_json(loads(STATS)))
    assert row.split() == ["G", "1", "V5_3_3", "PUSH", "CLUSTERING", "2", "6"]
    assert formats.group_list_row("G", None, None).split() == ["G", "0", "OFFLINE", "0", "0"]


def test_broker_consume_stats_filters_by_level_and_totals() -> None:
    stats = ConsumeStats.from_json(loads(STATS.replace('"lastTimestamp":0', '"lastTimestamp":1700000000000')))
    text = formats.broker_consume_stats([("G", [stats])], 1, 6)
    lines = text.splitlines()
    assert len(lines) == 4 and "broker-b" in lines[1] and lines[-1] == "Diff Total: 6"


def test_topic_and_group_configs_as_java_to_string() -> None:
    tc = {"topicName": "T", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6, "topicSysFlag": 0, "order": False,
          "attributes": {}}
    assert formats.topic_config_str(tc) == ("TopicConfig [topicName=T, readQueueNums=8, writeQueueNums=8, perm=RW-, "
                                            "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false, attributes={}]")
    g = {"groupName": "G", "consumeEnable": True, "groupRetryPolicy": {"type": "CUSTOMIZED"}, "attributes": {}}
    s = formats.sub_group_str(g)
    assert s.startswith("SubscriptionGroupConfig{groupName=G, consumeEnable=true,")
    assert "groupRetryPolicy=GroupRetryPolicy{type=CUSTOMIZED, exponentialRetryPolicy=null" in s


def test_allocate_averagely_like_rocketmq() -> None:
    mqs = [MessageQueue("T", "b", i) for i in range(5)]
    got = {c: [m.queue_id for m in allocate_averagely(mqs, ["c1", "c2"], c)] for c in ("c1", "c2")}
    assert got == {"c1": [0, 1, 2], "c2": [3, 4]}
    assert allocate_averagely(mqs[:1], ["c1", "c2"], "c2") == []
