package mqttbroker

import (
	"strconv"
	"strings"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/hooks/storage/bolt"
)

// sessionStore is mochi's bbolt storage hook with two corrections:
//   - mochi v2.7.9's bolt hook stores in-flight messages without their packet id (its
//     pebble and badger hooks keep it); restored that way, the broker refuses to resend
//     them ("missing packet id") and drops the client's every reconnection. The id is
//     also in the record's key (if_CLIENT:ID), so it is read back from there;
//   - the $SYS statistics are neither stored (a write every tick) nor restored.
type sessionStore struct {
	*bolt.Hook
}

func (s sessionStore) Provides(b byte) bool {
	if b == mqtt.StoredSysInfo || b == mqtt.OnSysInfoTick {
		return false
	}
	return s.Hook.Provides(b)
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
