package sshext

// The gateway tier (paper 000, three-level scheme): a gateway hub keeps one SSH session
// to a central hub and announces on it the devices connected to the gateway; the centre
// gives each a protected socket of its own and opens a DeviceChannel on the gateway's
// session for every connection to it. Only a session whose profile has a gateway policy
// may send these; the centre refuses them from any other as a violation.
const (
	// AnnounceRequest (gateway to centre, wants a reply): a device is connected to the
	// gateway and serves these aliases. Announcing a device again replaces its aliases.
	// Body: Announce; reply body: AnnounceReply.
	AnnounceRequest = "announce@iotsafe.dev"
	// WithdrawRequest (gateway to centre): the device left the gateway. Body: Withdraw.
	WithdrawRequest = "withdraw@iotsafe.dev"
	// DeviceChannel (centre to gateway): one connection to a device's alias. Extra
	// data: DeviceOpen.
	DeviceChannel = "device@iotsafe.dev"
	// CloseDeviceRequest (centre to gateway): close the device's session at the gateway
	// (revoked or removed at the centre). Body: CloseDevice.
	CloseDeviceRequest = "close-device@iotsafe.dev"
)

// Announce is the body of an AnnounceRequest: the device, the aliases it serves at the
// gateway, and what the gateway knows of its session (for the centre's 'device show').
type Announce struct {
	Device  string
	Aliases []string // SSH name-list: alias names have no commas
	Key     string   // fingerprint of the key the device logged in with at the gateway
	Client  string   // its SSH client version
	Cipher  string
	Remote  string // its address as the gateway sees it
}

// AnnounceReply answers an Announce. Refused says why the whole device was refused
// (Revoked: because it is revoked at the centre, so the gateway closes it); otherwise
// Served are the aliases the centre serves and Why says why the others are not (empty
// when all are).
type AnnounceReply struct {
	Refused string
	Revoked bool
	Served  []string
	Why     string
}

// Withdraw is the body of a WithdrawRequest.
type Withdraw struct{ Device string }

// DeviceOpen is the extra data of a DeviceChannel open: the device and alias, and the
// origin of the connection at the centre.
type DeviceOpen struct {
	Device     string
	Alias      string
	OriginAddr string
	OriginPort uint32
}

// CloseDevice is the body of a CloseDeviceRequest. Revoked says the device is revoked
// or removed at the centre, so the gateway must not take it back in.
type CloseDevice struct {
	Device  string
	Reason  string
	Revoked bool
}
