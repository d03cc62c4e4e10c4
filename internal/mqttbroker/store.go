package mqttbroker

import (
	"strconv"
	"strings"
	"sync"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/hooks/storage/bolt"
	"github.com/mochi-mqtt/server/v2/packets"
)

// sessionStore is mochi's bbolt storage hook with four corrections:
//   - mochi v2.7.9's bolt hook stores in-flight messages without their packet id (its
//     pebble and badger hooks keep it); restored that way, the broker refuses to resend
//     them ("missing packet id") and drops the client's every reconnection. The id is
//     also in the record's key (if_CLIENT:ID), so it is read back from there;
//   - the $SYS statistics are neither stored (a write every tick) nor restored;
//   - in-flight records are written only where a restart could use them: not for a
//     session that ends with its connection (clean session, MQTT 5 expiry 0: after a
//     restart it is gone anyway), and never the broker's PUBACK to a client's QoS 1
//     PUBLISH, which mochi records and removes around one write. Each record costs a
//     commit with fsync: with them, a QoS 1 message took two (about 20 ms with ten
//     clients publishing, against Mosquitto's 0.5 ms: bench mqtt matrix);
//   - likewise a clean session's client record and subscriptions are not written (two
//     to three commits per connection: a third of a TLS client's connection time), and
//     mochi's hook kept a clean session's subscription records for ever.
type sessionStore struct {
	*bolt.Hook
	// recorded holds the client ids that have a client record in the store (written,
	// or restored at start): a clean session's end deletes the record only if there is
	// one (left by a persistent session of the same id that it took over).
	recorded *sync.Map
	// provides is Provides' answer per event, worked out once: mochi asks every hook
	// about every event of every packet, and bolt's own answer searches a list.
	provides *[256]bool
}

func newSessionStore() sessionStore {
	s := sessionStore{Hook: new(bolt.Hook), recorded: new(sync.Map), provides: new([256]bool)}
	for b := range s.provides {
		b := byte(b)
		s.provides[b] = b != mqtt.StoredSysInfo && b != mqtt.OnSysInfoTick && s.Hook.Provides(b)
	}
	return s
}

func (s sessionStore) StoredClients() ([]storage.Client, error) {
	cls, err := s.Hook.StoredClients()
	for _, c := range cls {
		s.recorded.Store(c.ID, true)
	}
	return cls, err
}

func (s sessionStore) OnSessionEstablished(cl *mqtt.Client, pk packets.Packet) {
	if !sessionEndsWithConnection(cl) {
		s.recorded.Store(cl.ID, true)
		s.Hook.OnSessionEstablished(cl, pk)
	}
}

func (s sessionStore) OnWillSent(cl *mqtt.Client, pk packets.Packet) {
	if _, ok := s.recorded.Load(cl.ID); ok {
		s.Hook.OnWillSent(cl, pk)
	}
}

func (s sessionStore) OnDisconnect(cl *mqtt.Client, err error, expire bool) {
	if expire && cl.StopCause() != packets.ErrSessionTakenOver {
		// mochi's hook deletes the client record now: only if there is one.
		if _, had := s.recorded.LoadAndDelete(cl.ID); !had {
			return
		}
	}
	s.Hook.OnDisconnect(cl, err, expire)
}

func (s sessionStore) OnClientExpired(cl *mqtt.Client) {
	s.recorded.Delete(cl.ID)
	s.Hook.OnClientExpired(cl)
}

func (s sessionStore) OnSubscribed(cl *mqtt.Client, pk packets.Packet, reasonCodes []byte) {
	if !sessionEndsWithConnection(cl) {
		s.Hook.OnSubscribed(cl, pk, reasonCodes)
	}
}

func (s sessionStore) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	if !sessionEndsWithConnection(cl) {
		s.Hook.OnUnsubscribed(cl, pk)
	}
}

func (s sessionStore) Provides(b byte) bool { return s.provides[b] }

func (s sessionStore) OnQosPublish(cl *mqtt.Client, pk packets.Packet, sent int64, resends int) {
	if worthStoring(cl, pk) {
		s.Hook.OnQosPublish(cl, pk, sent, resends)
	}
}

func (s sessionStore) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	if worthStoring(cl, pk) {
		s.Hook.OnQosComplete(cl, pk)
	}
}

func (s sessionStore) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	if worthStoring(cl, pk) {
		s.Hook.OnQosDropped(cl, pk)
	}
}

// worthStoring tells whether an in-flight record of cl's could matter after a restart
// (the same answer for a record's write and its removal, so none is left behind).
func worthStoring(cl *mqtt.Client, pk packets.Packet) bool {
	return pk.FixedHeader.Type != packets.Puback && !sessionEndsWithConnection(cl)
}

// sessionEndsWithConnection: MQTT 3.1.1 clean session, or MQTT 5 with no session expiry.
func sessionEndsWithConnection(cl *mqtt.Client) bool {
	if cl.Properties.ProtocolVersion == 5 {
		return cl.Properties.Props.SessionExpiryInterval == 0
	}
	return cl.Properties.Clean
}

func (s sessionStore) StoredInflightMessages() ([]storage.Message, error) {
	msgs, err := s.Hook.StoredInflightMessages()
	for i := range msgs {
		if msgs[i].PacketID == 0 {
			msgs[i].PacketID = packetIDFromKey(msgs[i].ID)
		}
	}
	return msgs, err
}

// packetIDFromKey reads the packet id at the end of an in-flight record's key; 0 if
// there is none.
func packetIDFromKey(key string) uint16 {
	i := strings.LastIndexByte(key, ':')
	if i < 0 {
		return 0
	}
	n, err := strconv.ParseUint(key[i+1:], 10, 16)
	if err != nil {
		return 0
	}
	return uint16(n)
}
