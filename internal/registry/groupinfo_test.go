package registry

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Networks and device types are device groups with DeviceHive's numeric ids: the first
// device in one makes it (its kind's next id), one may be made empty, a device is in one
// of each at most, one with devices is not removed, and the names are checked.
func TestNetworksAndDeviceTypes(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	if _, err := r.AddDevice(ctx, "dev1", "default", newKey(t), "sensors", "network:plant-a", "devicetype:thermo"); err != nil {
		t.Fatal(err)
	}
	empty, err := r.AddGroupInfo(ctx, GroupNetwork, "plant-b", "the second plant")
	if err != nil || empty.ID != 2 || empty.Group != "network:plant-b" {
		t.Fatalf("an empty network: %+v %v", empty, err)
	}
	if _, err := r.AddGroupInfo(ctx, GroupNetwork, "plant-b", ""); !errors.Is(err, ErrExists) {
		t.Fatalf("the same network twice: %v", err)
	}
	nets, _ := r.GroupInfos(ctx, GroupNetwork)
	types, _ := r.GroupInfos(ctx, GroupDeviceType)
	if len(nets) != 2 || nets[0].Name != "plant-a" || nets[0].ID != 1 || len(types) != 1 || types[0].ID != 1 {
		t.Fatalf("networks %+v, device types %+v", nets, types)
	}
	if err := r.SetDeviceGroups(ctx, "dev1", []string{"network:plant-a", "network:plant-b"}); err == nil || !strings.Contains(err.Error(), "one network at most") {
		t.Fatalf("a device in two networks: %v", err)
	}
	if err := r.RemoveGroupInfo(ctx, "network:plant-a"); !errors.Is(err, ErrGroupNotEmpty) {
		t.Fatalf("removing a network with a device: %v", err)
	}
	if err := r.SetDeviceGroups(ctx, "dev1", []string{"network:plant-b"}); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveGroupInfo(ctx, "network:plant-a"); err != nil {
		t.Fatalf("removing an empty network: %v", err)
	}
	for _, bad := range []string{"all", "network:", "network:Plant", "zone:a", "network:a:b"} {
		if ValidGroup(bad) == nil {
			t.Errorf("group %q accepted", bad)
		}
	}
}
