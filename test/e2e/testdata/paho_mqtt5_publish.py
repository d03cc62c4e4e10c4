# An MQTT 5 device publishing with paho-mqtt: QoS 1 and 2 with a user property,
# content type, response topic and correlation data. paho's network thread dies on an
# ack with a reason code it does not know, and the publish then never completes: the
# script prints each ack's reason code and exits 0 only when both are acknowledged.
import ssl
import sys

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

host, port, cafile, user, password = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=user, protocol=mqtt.MQTTv5)
c.username_pw_set(user, password)
c.tls_set(ca_certs=cafile)
c.tls_insecure_set(True)  # the certificate names the front door's domain, not 127.0.0.1
acked = []


def on_publish(client, userdata, mid, reason_code, properties):
    print("acked mid=%d rc=%s" % (mid, reason_code), flush=True)
    acked.append(mid)


c.on_publish = on_publish
c.connect(host, port)
c.loop_start()
props = Properties(PacketTypes.PUBLISH)
props.UserProperty = ("a", "2")
props.ContentType = "application/json"
props.ResponseTopic = "devices/%s/notifications/answer" % user
props.CorrelationData = b"corr-1"
for qos in (1, 2):
    info = c.publish("devices/%s/notifications/temp" % user, '{"c":1}', qos=qos, properties=props)
    info.wait_for_publish(timeout=20)
    if not info.is_published():
        print("qos %d publish never acknowledged" % qos, flush=True)
        sys.exit(1)
c.loop_stop()
c.disconnect()
