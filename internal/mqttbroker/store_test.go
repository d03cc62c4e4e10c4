package mqttbroker

import (
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage/bolt"
)

func TestPacketIDFromKey(t *testing.T) {
	for key, want := range map[string]uint16{"if_dev1:7": 7, "if_dev1/app:65535": 65535, "if_dev1:65536": 0, "if_dev1": 0, "if_a:b:12": 12, "": 0} {
		if got := packetIDFromKey(key); got != want {
			t.Errorf("packetIDFromKey(%q) = %d, want %d", key, got, want)
		}
	}
}

// The session store keeps what mochi's bolt hook keeps, but not the $SYS statistics.
func TestSessionStoreProvides(t *testing.T) {
	s := sessionStore{new(bolt.Hook)}
	for _, e := range []byte{mqtt.StoredClients, mqtt.StoredInflightMessages, mqtt.StoredSubscriptions, mqtt.StoredRetainedMessages, mqtt.OnQosPublish} {
		if !s.Provides(e) {
			t.Errorf("event %d not provided", e)
		}
	}
	if s.Provides(mqtt.StoredSysInfo) || s.Provides(mqtt.OnSysInfoTick) {
		t.Error("$SYS statistics are stored")
	}
}
