package control

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// Envelope carries a Change over the admin socket: its op and its fields.
type Envelope struct {
	Op     string          `json:"op"`
	Change json.RawMessage `json:"change"`
}

// decoders maps every op to the type it decodes into.
var decoders = map[string]func(json.RawMessage) (Change, error){}

func init() {
	for _, d := range []struct {
		op  string
		dec func(json.RawMessage) (Change, error)
	}{
		{AddDevice{}.Op(), decodeAs[AddDevice]},
		{RevokeDevice{}.Op(), decodeAs[RevokeDevice]},
		{ReinstateDevice{}.Op(), decodeAs[ReinstateDevice]},
		{RemoveDevice{}.Op(), decodeAs[RemoveDevice]},
		{AddKey{}.Op(), decodeAs[AddKey]},
		{RevokeKey{}.Op(), decodeAs[RevokeKey]},
		{SetGroups{}.Op(), decodeAs[SetGroups]},
		{AddGroupInfo{}.Op(), decodeAs[AddGroupInfo]},
		{AddJoinToken{}.Op(), decodeAs[AddJoinToken]},
		{RevokeJoinToken{}.Op(), decodeAs[RevokeJoinToken]},
		{JoinDevice{}.Op(), decodeAs[JoinDevice]},
		{TrustSSHCA{}.Op(), decodeAs[TrustSSHCA]},
		{UntrustSSHCA{}.Op(), decodeAs[UntrustSSHCA]},
		{RecordSSHCert{}.Op(), decodeAs[RecordSSHCert]},
		{RevokeSSHCert{}.Op(), decodeAs[RevokeSSHCert]},
		{EnrolByCertificate{}.Op(), decodeAs[EnrolByCertificate]},
		{ApproveDevice{}.Op(), decodeAs[ApproveDevice]},
		{RemoveGroupInfo{}.Op(), decodeAs[RemoveGroupInfo]},
		{SetDeviceSecret{}.Op(), decodeAs[SetDeviceSecret]},
		{SetDeviceCert{}.Op(), decodeAs[SetDeviceCert]},
		{SetSOAPKey{}.Op(), decodeAs[SetSOAPKey]},
		{AddGrant{}.Op(), decodeAs[AddGrant]},
		{RemoveGrant{}.Op(), decodeAs[RemoveGrant]},
		{AddAccount{}.Op(), decodeAs[AddAccount]},
		{SetPassword{}.Op(), decodeAs[SetPassword]},
		{RemoveAccount{}.Op(), decodeAs[RemoveAccount]},
		{EndLoginSessions{}.Op(), decodeAs[EndLoginSessions]},
		{AddToken{}.Op(), decodeAs[AddToken]},
		{RevokeToken{}.Op(), decodeAs[RevokeToken]},
		{PutProfile{}.Op(), decodeAs[PutProfile]},
	} {
		decoders[d.op] = d.dec
	}
}

func decodeAs[T Change](raw json.RawMessage) (Change, error) {
	var v T
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // a field this build does not know would be silently lost
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, v.Op(), err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: %s: trailing data", ErrInvalid, v.Op())
	}
	return v, nil
}

// Wrap puts a change into its envelope.
func Wrap(ch Change) (Envelope, error) {
	raw, err := json.Marshal(ch)
	if err != nil {
		return Envelope{}, err
	}
	return Envelope{Op: ch.Op(), Change: raw}, nil
}

// Unwrap decodes an envelope into its change and checks the fields it needs.
func Unwrap(e Envelope) (Change, error) {
	dec, ok := decoders[e.Op]
	if !ok {
		return nil, fmt.Errorf("%w: unknown change %q (known: %v)", ErrInvalid, e.Op, Ops())
	}
	if len(e.Change) == 0 {
		return nil, fmt.Errorf("%w: %s without its fields", ErrInvalid, e.Op)
	}
	ch, err := dec(e.Change)
	if err != nil {
		return nil, err
	}
	return ch, ch.check()
}

// Ops lists every change's op, sorted.
func Ops() []string {
	ops := make([]string, 0, len(decoders))
	for op := range decoders {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	return ops
}
