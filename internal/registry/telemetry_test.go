package registry

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestDeviceSecretsDataAndStates(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	if _, err := r.AddDevice(ctx, "dev1", "default", newKey(t)); err != nil {
		t.Fatal(err)
	}
	if err := r.SetDeviceSecret(ctx, "nodev", "h"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("secret of an unknown device: %v", err)
	}
	if err := r.SetDeviceSecret(ctx, "dev1", "h1"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetDeviceSecret(ctx, "dev1", "h2"); err != nil {
		t.Fatal(err)
	}
	if m, _ := r.DeviceSecretHashes(ctx); m["dev1"] != "h2" || len(m) != 1 {
		t.Fatalf("secrets %v", m)
	}
	if err := r.SetDeviceData(ctx, "dev1", json.RawMessage(`{"fw":"1.2"`)); err == nil {
		t.Fatal("malformed data stored")
	}
	if err := r.SetDeviceData(ctx, "dev1", json.RawMessage(`{"fw":"1.2"}`)); err != nil {
		t.Fatal(err)
	}
	if d, _ := r.DeviceData(ctx, "dev1"); string(d) != `{"fw":"1.2"}` {
		t.Fatalf("data %s", d)
	}
	st, err := r.DeviceStates(ctx)
	if err != nil || len(st) != 1 || st[0].Revoked || st[0].Gen() == 0 || !st[0].Address.IsValid() {
		t.Fatalf("states %+v %v", st, err)
	}
	r.RevokeDevice(ctx, "dev1", "test")
	if st, _ := r.DeviceStates(ctx); !st[0].Revoked {
		t.Fatal("revocation not in the state")
	}
	// Removal takes the secret and data with it.
	r.RemoveDevice(ctx, "dev1")
	if m, _ := r.DeviceSecretHashes(ctx); len(m) != 0 {
		t.Fatalf("secret outlived its device: %v", m)
	}
	if d, _ := r.DeviceData(ctx, "dev1"); d != nil {
		t.Fatalf("data outlived its device: %s", d)
	}
	// Rights are for accounts only.
	if err := r.AddGrant(ctx, Grant{Kind: PrincipalUser, XID: 1000, Target: "dev1", Alias: RightTelemetry}); err == nil {
		t.Fatal("a local user was given a telemetry right")
	}
}

// One client certificate per device: a new one replaces the record (and says so in the
// change feed); removing the device removes it.
func TestDeviceCerts(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	if _, err := r.AddDevice(ctx, "dev1", "default", newKey(t)); err != nil {
		t.Fatal(err)
	}
	if err := r.SetDeviceCert(ctx, "nodev", "1", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("certificate of an unknown device: %v", err)
	}
	for _, serial := range []string{"1001", "1002"} {
		if err := r.SetDeviceCert(ctx, "dev1", serial, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if m, err := r.DeviceCertSerials(ctx); err != nil || len(m) != 1 || m["dev1"] != "1002" {
		t.Fatalf("serials %v %v", m, err)
	}
	evs, _, err := r.Changes(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	issued := 0
	for _, e := range evs {
		if e.Kind == EventCertIssued && e.Device == "dev1" {
			issued++
		}
	}
	if issued != 2 {
		t.Fatalf("%d cert_issued events in the change feed, want 2", issued)
	}
	if err := r.RemoveDevice(ctx, "dev1"); err != nil {
		t.Fatal(err)
	}
	if m, _ := r.DeviceCertSerials(ctx); len(m) != 0 {
		t.Fatalf("serials after removal %v", m)
	}
}

// One SOAP key per device: a new one replaces the old (and says so in the change feed),
// removal takes it along.
func TestSOAPKeys(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	if _, err := r.AddDevice(ctx, "dev1", "default", newKey(t)); err != nil {
		t.Fatal(err)
	}
	if err := r.SetSOAPKey(ctx, SOAPKey{Device: "nodev", KeyID: "k0", Secret: []byte("x")}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("key of an unknown device: %v", err)
	}
	from, _ := r.LastChangeID(ctx)
	for _, id := range []string{"k1", "k2"} {
		if err := r.SetSOAPKey(ctx, SOAPKey{Device: "dev1", KeyID: id, Secret: []byte("secret-" + id)}); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := r.SOAPKeys(ctx)
	if err != nil || len(keys) != 1 || keys["k2"].Device != "dev1" || string(keys["k2"].Secret) != "secret-k2" {
		t.Fatalf("keys %+v %v", keys, err)
	}
	changes, _, err := r.Changes(ctx, from)
	if err != nil || len(changes) != 2 || changes[0].Kind != EventSOAPKeySet {
		t.Fatalf("change feed %+v %v", changes, err)
	}
	r.RemoveDevice(ctx, "dev1")
	if keys, _ := r.SOAPKeys(ctx); len(keys) != 0 {
		t.Fatalf("a key outlived its device: %+v", keys)
	}
}
