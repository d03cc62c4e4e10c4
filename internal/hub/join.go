package hub

import (
	"context"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/credential"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// join enrols a device's own key under a join token (sshd's join path): the token's
// hash is what the registry keeps; the change path reloads every view of the devices.
func (h *Hub) join(ctx context.Context, token, name string, key ssh.PublicKey, remote string) (profile string, pending bool, err error) {
	out, err := h.control.Apply(ctx, control.JoinDevice{Hash: credential.HashToken(token), Name: name,
		Key: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))), Remote: remote})
	if err != nil {
		return "", false, err
	}
	return out.Device.Profile, out.Device.RevokedAt != nil && registry.IsPending(out.Device.RevokeWhy), nil
}

// enrolByCert enrols a device on its first connection with a certificate of a
// manufacturer's CA (sshd's certificate path), through the change path.
func (h *Hub) enrolByCert(ctx context.Context, caFP, name string, key ssh.PublicKey, keyID string, serial uint64, remote string) (pending bool, err error) {
	out, err := h.control.Apply(ctx, control.EnrolByCertificate{CA: caFP, Name: name,
		Key: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key))), KeyID: keyID, Serial: serial, Remote: remote})
	if err != nil {
		return false, err
	}
	return out.Device.RevokedAt != nil && registry.IsPending(out.Device.RevokeWhy), nil
}
