package access

import (
	"testing"

	"github.com/iotsafe/iotsafe/internal/registry"
)

func TestPolicy(t *testing.T) {
	p := NewPolicy([]registry.Grant{
		{Kind: registry.PrincipalUser, XID: 1001, Target: "dev42", Alias: "http"},  // strict context
		{Kind: registry.PrincipalGroup, XID: 2000, Target: "@sensors", Alias: "*"}, // wide context
		{Kind: registry.PrincipalUser, XID: 1003, Target: "@cameras", Alias: "rtsp"},
	}, map[string][]string{"dev42": {"sensors"}, "cam1": {"cameras"}}, 3000)
	platform := Identity{UID: 1001, GIDs: []uint32{1001}}
	sensorOps := Identity{UID: 1002, GIDs: []uint32{1002, 2000}}
	viewer := Identity{UID: 1003, GIDs: []uint32{1003}}
	stranger := Identity{UID: 1004, GIDs: []uint32{1004}}
	for _, tc := range []struct {
		id            Identity
		device, alias string
		want          bool
	}{
		{platform, "dev42", "http", true},
		{platform, "dev42", "mqtt", false},
		{platform, "dev43", "http", false},
		{sensorOps, "dev42", "anything", true},
		{sensorOps, "cam1", "rtsp", false},
		{viewer, "cam1", "rtsp", true},
		{viewer, "cam1", "http", false},
		{stranger, "dev42", "http", false},
		{Identity{UID: 0}, "cam1", "http", true},
		{Identity{UID: 1005, GIDs: []uint32{3000}}, "cam1", "http", true},
	} {
		if got := p.Allowed(tc.id, tc.device, tc.alias); got != tc.want {
			t.Errorf("%v %s/%s: got %v, want %v", tc.id, tc.device, tc.alias, got, tc.want)
		}
	}
}

// A grant to @all covers every device, one enrolled after it too, and nothing more than
// its alias or right says; a device group named "all" is no such thing.
func TestPolicyAllDevices(t *testing.T) {
	p := NewPolicy([]registry.Grant{
		{Kind: registry.PrincipalAccount, XID: 7, Target: registry.AllDevices, Alias: registry.RightManage},
		{Kind: registry.PrincipalAccount, XID: 8, Target: "@all-sensors", Alias: registry.RightTelemetry},
	}, map[string][]string{"dev1": {"all-sensors"}}, -1)
	for _, tc := range []struct {
		id            int64
		device, right string
		want          bool
	}{
		{7, "dev1", registry.RightManage, true},
		{7, "not-enrolled-yet", registry.RightManage, true},
		{7, "dev1", registry.RightTelemetry, true},
		{7, "dev1", "http", false}, // a right is no service
		{8, "dev1", registry.RightTelemetry, true},
		{8, "dev2", registry.RightTelemetry, false},
	} {
		if got := p.AllowedAccount(tc.id, tc.device, tc.right); got != tc.want {
			t.Errorf("account %d on %s %s: %v, want %v", tc.id, tc.device, tc.right, got, tc.want)
		}
	}
	if err := registry.ValidGroup("all"); err == nil {
		t.Error(`device group "all" accepted: it would read as @all`)
	}
}

func TestIdentityLookup(t *testing.T) {
	ids := NewIdentities(0)
	root := ids.Lookup(0, nil)
	if root.Name != "root" {
		t.Fatalf("uid 0 is %q", root.Name)
	}
	gid := uint32(4242)
	if id := ids.Lookup(0, &gid); id.GIDs[len(id.GIDs)-1] != 4242 {
		t.Fatalf("kernel gid not added: %v", id.GIDs)
	}
	if again := ids.Lookup(0, nil); len(again.GIDs) != len(root.GIDs) {
		t.Fatal("the cached entry was modified")
	}
	if u := ids.Lookup(987654, nil); u.Name != "987654" {
		t.Fatalf("unknown uid named %q", u.Name)
	}
}

func TestAccountRights(t *testing.T) {
	p := NewPolicy([]registry.Grant{
		{Kind: registry.PrincipalAccount, XID: 1, Target: "dev1", Alias: "*"},
		{Kind: registry.PrincipalAccount, XID: 2, Target: "@sensors", Alias: registry.RightTelemetry},
		{Kind: registry.PrincipalAccount, XID: 3, Target: "dev1", Alias: registry.RightManage},
		{Kind: registry.PrincipalAccount, XID: 4, Target: "dev1", Alias: registry.RightCommand},
		{Kind: registry.PrincipalAccount, XID: 5, Target: "@sensors", Alias: registry.RightView},
		{Kind: registry.PrincipalAccount, XID: 6, Target: "dev1", Alias: registry.RightOperate},
		{Kind: registry.PrincipalAccount, XID: 7, Target: registry.AllDevices, Alias: registry.RightAdmin},
	}, map[string][]string{"dev1": {"sensors"}, "dev2": {"sensors"}}, -1)
	for _, tc := range []struct {
		id            int64
		device, right string
		want          bool
	}{
		{1, "dev1", "http", true},
		{1, "dev1", registry.RightTelemetry, false}, // '*' is every service, not every right
		{2, "dev2", registry.RightTelemetry, true},
		{2, "dev2", registry.RightManage, false},
		{2, "dev2", "http", false},
		{3, "dev1", registry.RightTelemetry, true}, // manage includes telemetry
		{3, "dev1", registry.RightCommand, true},   // and commands
		{3, "dev1", "http", false},
		{1, "dev1", registry.RightCommand, false},
		{2, "dev2", registry.RightCommand, false}, // reading is not commanding
		{4, "dev1", registry.RightCommand, true},
		{4, "dev1", registry.RightTelemetry, false}, // nor the other way round
		{4, "dev1", registry.RightManage, false},
		// The console's roles: view < operate < admin.
		{5, "dev2", registry.RightView, true},
		{5, "dev2", registry.RightTelemetry, true},
		{5, "dev2", registry.RightOperate, false},
		{5, "dev2", registry.RightCommand, false},
		{6, "dev1", registry.RightView, true},
		{6, "dev1", registry.RightCommand, true},
		{6, "dev1", registry.RightManage, false},
		{6, "dev1", registry.RightAdmin, false},
		{6, "dev2", registry.RightView, false},
		{7, "dev9", registry.RightOperate, true},
		{7, "dev9", registry.RightManage, true},
		{7, "dev9", "http", false}, // a role is not a service
	} {
		if got := p.AllowedAccount(tc.id, tc.device, tc.right); got != tc.want {
			t.Errorf("account %d %s %s: %v, want %v", tc.id, tc.device, tc.right, got, tc.want)
		}
	}
	if got := p.DevicesWithRight(2, registry.RightTelemetry, []string{"dev1", "dev2", "dev3"}); len(got) != 2 {
		t.Errorf("devices with telemetry for account 2: %v", got)
	}
}
