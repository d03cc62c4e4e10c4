package mqttbroker

import (
	"maps"
	"path/filepath"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/hooks/storage/bolt"
	"github.com/mochi-mqtt/server/v2/packets"
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
	s := newSessionStore()
	for _, e := range []byte{mqtt.StoredClients, mqtt.StoredInflightMessages, mqtt.StoredSubscriptions, mqtt.StoredRetainedMessages, mqtt.OnQosPublish} {
		if !s.Provides(e) {
			t.Errorf("event %d not provided", e)
		}
	}
	if s.Provides(mqtt.StoredSysInfo) || s.Provides(mqtt.OnSysInfoTick) {
		t.Error("$SYS statistics are stored")
	}
}

// In-flight records reach the store only where a restart could use them: a persistent
// session's message waiting for its ack (and the broker's PUBREC of a QoS 2 message it
// received), not a clean session's, nor the broker's PUBACK of a QoS 1 message.
func TestSessionStoreKeepsOnlyWhatARestartUses(t *testing.T) {
	s := newSessionStore()
	if err := s.Init(&bolt.Options{Path: filepath.Join(t.TempDir(), "mqtt.db")}); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	client := func(id string, version byte, clean bool, expiry uint32) *mqtt.Client {
		cl := &mqtt.Client{ID: id}
		cl.Properties.ProtocolVersion, cl.Properties.Clean = version, clean
		cl.Properties.Props.SessionExpiryInterval = expiry
		return cl
	}
	msg := func(kind byte, id uint16) packets.Packet {
		return packets.Packet{FixedHeader: packets.FixedHeader{Type: kind, Qos: 1}, PacketID: id, TopicName: "devices/d/commands/x"}
	}
	kept := []*mqtt.Client{client("v311-persistent", 4, false, 0), client("v5-expiry", 5, true, 3600)}
	dropped := []*mqtt.Client{client("v311-clean", 4, true, 0), client("v5-no-expiry", 5, false, 0), client("v31-clean", 3, true, 0)}
	for _, cl := range append(kept, dropped...) {
		s.OnQosPublish(cl, msg(packets.Publish, 1), 0, 0)
		s.OnQosPublish(cl, msg(packets.Pubrec, 2), 0, 0)
		s.OnQosPublish(cl, msg(packets.Puback, 3), 0, 0)
	}
	stored := func() map[string]bool {
		msgs, err := s.StoredInflightMessages()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, m := range msgs {
			got[m.ID] = true
		}
		return got
	}
	got := stored()
	want := map[string]bool{}
	for _, cl := range kept {
		want[storage.InflightKey+"_"+cl.ID+":1"], want[storage.InflightKey+"_"+cl.ID+":2"] = true, true
	}
	if !maps.Equal(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
	// Completion removes what was written.
	for _, cl := range kept {
		s.OnQosComplete(cl, msg(packets.Publish, 1))
		s.OnQosDropped(cl, msg(packets.Pubrec, 2))
	}
	if got := stored(); len(got) != 0 {
		t.Fatalf("left behind after completion: %v", got)
	}
}

// A clean session leaves no client record nor subscriptions in the store; a persistent
// one's are there after a restart; a clean session that took over a persistent one's
// identifier removes its record when it ends.
func TestSessionStoreCleanSessionsLeaveNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mqtt.db")
	s := newSessionStore()
	if err := s.Init(&bolt.Options{Path: path}); err != nil {
		t.Fatal(err)
	}
	client := func(id string, clean bool) *mqtt.Client {
		cl := &mqtt.Client{ID: id}
		cl.Properties.ProtocolVersion, cl.Properties.Clean = 4, clean
		return cl
	}
	sub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe}, Filters: packets.Subscriptions{{Filter: "devices/d/commands/#", Qos: 1}}}
	persistent, clean := client("dev1", false), client("dev2", true)
	for _, cl := range []*mqtt.Client{persistent, clean} {
		s.OnSessionEstablished(cl, packets.Packet{})
		s.OnSubscribed(cl, sub, []byte{1})
		s.OnDisconnect(cl, nil, cl.Properties.Clean)
	}
	s.Stop()

	s = newSessionStore()
	if err := s.Init(&bolt.Options{Path: path}); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ids := func() []string {
		cls, err := s.StoredClients()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range cls {
			out = append(out, c.ID)
		}
		return out
	}
	if got := ids(); len(got) != 1 || got[0] != "dev1" {
		t.Fatalf("client records after a restart: %v, want dev1's only", got)
	}
	if subs, _ := s.StoredSubscriptions(); len(subs) != 1 || subs[0].Client != "dev1" {
		t.Fatalf("subscriptions after a restart: %+v, want dev1's only", subs)
	}
	// dev1 comes back with a clean session and ends it: its old record goes.
	again := client("dev1", true)
	s.OnSessionEstablished(again, packets.Packet{})
	s.OnDisconnect(again, nil, true)
	if got := ids(); len(got) != 0 {
		t.Fatalf("client records after the clean session ended: %v", got)
	}
}

// The upstream behaviour the session store's corrections rely on (docs/design.md, "mochi
// stays"). If a new mochi changes one of these, this test says which correction to look
// at again: the in-flight key's format (the packet id is read back from it), the bolt
// hook storing in-flight messages without their packet id (the correction restores it;
// if upstream fixes it, the correction becomes a no-op and may go), and the bolt hook
// providing the $SYS events the session store turns off.
func TestUpstreamFormatsTheCorrectionsRelyOn(t *testing.T) {
	raw := new(bolt.Hook)
	if err := raw.Init(&bolt.Options{Path: filepath.Join(t.TempDir(), "raw.db")}); err != nil {
		t.Fatal(err)
	}
	defer raw.Stop()
	cl := &mqtt.Client{ID: "dev1/app"}
	cl.Properties.ProtocolVersion = 4
	raw.OnQosPublish(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 42, TopicName: "devices/dev1/commands/x"}, 0, 0)
	msgs, err := raw.StoredInflightMessages()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("mochi's bolt hook stored %d in-flight messages (%v), want 1", len(msgs), err)
	}
	if want := storage.InflightKey + "_dev1/app:42"; msgs[0].ID != want {
		t.Errorf("in-flight key %q, want %q: packetIDFromKey reads the id from the key's end", msgs[0].ID, want)
	}
	if msgs[0].PacketID != 0 {
		t.Logf("mochi now stores the packet id itself (%d): StoredInflightMessages' correction is a no-op and may go", msgs[0].PacketID)
	}
	if got := packetIDFromKey(msgs[0].ID); got != 42 {
		t.Errorf("packet id %d read back from %q, want 42", got, msgs[0].ID)
	}
	if !raw.Provides(mqtt.StoredSysInfo) || !raw.Provides(mqtt.OnSysInfoTick) {
		t.Error("mochi's bolt hook no longer stores $SYS statistics: newSessionStore's filter is moot")
	}
	// And the correction, on the session store over the same hook.
	s := newSessionStore()
	if err := s.Init(&bolt.Options{Path: filepath.Join(t.TempDir(), "mqtt.db")}); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	cl.Properties.Clean = false
	s.OnQosPublish(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 42, TopicName: "devices/dev1/commands/x"}, 0, 0)
	if msgs, err := s.StoredInflightMessages(); err != nil || len(msgs) != 1 || msgs[0].PacketID != 42 {
		t.Fatalf("restored in-flight messages %+v (%v): want packet id 42", msgs, err)
	}
}
