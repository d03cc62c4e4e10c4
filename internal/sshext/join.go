package sshext

// A device enrols its own key with a join token by logging in as JoinUser with that
// key (the hub takes any key for this user, and nothing else of the connection), then
// running the command "join NAME TOKEN". The hub answers a JoinAnswer in JSON on the
// command's output (exit status 0), or why not on its error output (exit status 1), and
// closes the connection; the device then connects as NAME, as any enrolled device.
const JoinUser = "iotsafe-join"

// JoinAnswer is what a device learns when its key is enrolled.
type JoinAnswer struct {
	Device string `json:"device"`
	// HostKeys are the hub's host keys a device may see (authorized_keys form): the
	// keys it signs with now, and the next ones during a rotation.
	HostKeys []string `json:"host_keys"`
	Profile  string   `json:"profile"`
	// HostCAs are the CAs of the hub's host certificates (authorized_keys form), if it
	// presents any: a device that trusts them trusts every hub of the deployment.
	HostCAs []string `json:"host_cas,omitempty"`
	// Pending: the token asks for the operator's approval; the device is refused until
	// 'iotsafe device approve'.
	Pending bool `json:"pending,omitempty"`
}
