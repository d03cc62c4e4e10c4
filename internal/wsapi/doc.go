// Package wsapi is DeviceHive's WebSocket API (paper 004's clients subscribe over it):
// one socket carries a caller's requests as JSON messages ({"action": ..., "requestId":
// ...}) and the hub's pushes for its subscriptions. It is a device transport (package
// transport) and owns nothing of the hub's data: each action runs as the REST request it
// stands for (transport.DeviceHive), so identities, rights, limits, audit and the store
// are the REST API's; a subscription is the REST stream's or command poll's follower,
// walking the store's one fan-out.
//
// What a socket costs is bounded before and after it authenticates: an authentication
// deadline and a cap per source address before, a cap per device and account after, a
// bound on its subscriptions, message size and queue of pushes (a socket that does not
// read is closed, never buffered without end). A socket whose caller is revoked, removed
// or re-keyed is closed when the hub reloads its devices and accounts.
package wsapi
