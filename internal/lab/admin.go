package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/iotsafe/iotsafe/internal/profile"
)

// Admin runs the iotsafe binary's admin commands on a lab hub's data folder: the lab
// enrolls and reads devices the way an operator does, never through the registry behind
// the CLI's back.
type Admin struct {
	Bin, Data string
}

// Run runs 'iotsafe ARGS... --data DATA' with stdin (nil: none) and returns its standard
// output; an error carries its standard error.
func (a Admin) Run(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, a.Bin, append(args, "--data", a.Data)...)
	cmd.Stdin = stdin
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("lab: iotsafe %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Init creates the hub's data folder and its registry ('iotsafe init'), as an operator
// does before enrolling a fleet ahead of the hub's first start: the other admin commands
// refuse a folder that holds no hub. The hub.yaml in the folder names the pool.
func (a Admin) Init(ctx context.Context) error {
	_, err := a.Run(ctx, nil, "init")
	return err
}

// EventCount counts the audit log's events of kind, up to atMost ('iotsafe events').
func (a Admin) EventCount(ctx context.Context, kind string, atMost int) (int, error) {
	out, err := a.Run(ctx, nil, "events", "--kind", kind, "--limit", strconv.Itoa(atMost), "--json")
	if err != nil {
		return 0, err
	}
	var evs []json.RawMessage
	if err := json.Unmarshal(out, &evs); err != nil {
		return 0, fmt.Errorf("lab: events: %w", err)
	}
	return len(evs), nil
}

// Enrolled is one device 'iotsafe device import --json' enrolled.
type Enrolled struct {
	Name    string            `json:"name"`
	Address string            `json:"address"`
	Sockets map[string]string `json:"sockets"`
	Secret  string            `json:"secret"`
}

// Import enrolls list ("NAME KEY" lines) with 'iotsafe device import' and more flags
// (--profile, --group, --secrets).
func (a Admin) Import(ctx context.Context, list string, flags ...string) ([]Enrolled, error) {
	out, err := a.Run(ctx, strings.NewReader(list), append([]string{"device", "import", "-", "--json"}, flags...)...)
	if err != nil {
		return nil, err
	}
	var got []Enrolled
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e Enrolled
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("lab: device import output: %v: %q", err, sc.Text())
		}
		got = append(got, e)
	}
	return got, sc.Err()
}

// DeviceSockets are the enrolled devices' protected sockets ('iotsafe device list --json').
type DeviceSockets struct {
	Name    string `json:"name"`
	Sockets []struct {
		Alias   string `json:"alias"`
		Address string `json:"address"`
	} `json:"sockets"`
}

// Devices lists the enrolled devices with their sockets.
func (a Admin) Devices(ctx context.Context) ([]DeviceSockets, error) {
	out, err := a.Run(ctx, nil, "device", "list", "--json")
	if err != nil {
		return nil, err
	}
	var devs []DeviceSockets
	if err := json.Unmarshal(out, &devs); err != nil {
		return nil, fmt.Errorf("lab: device list: %w", err)
	}
	return devs, nil
}

// GatewayProfile is the profile EnrollGateways gives the lab's gateways.
const GatewayProfile = "lab-gw"

// GatewayName is the name EnrollGateways gives gateway i.
func GatewayName(i int) string { return fmt.Sprintf("gw%d", i) }

// EnrollGateways enrols gateways GatewayName(0..n-1) at a centre with the lab's gateway
// profile (up to maxDevices devices each, of the lab profile), each with a new key in
// keys (keys/gwN, its .pub beside it) for its upstream.key.
func EnrollGateways(ctx context.Context, adm Admin, keys string, n, maxDevices int) error {
	gp := &profile.Profile{Name: GatewayProfile, Gateway: &profile.GatewayPolicy{MaxDevices: maxDevices, DeviceProfile: "lab"}}
	if err := AddProfile(ctx, adm, gp); err != nil {
		return err
	}
	var list strings.Builder
	for g := range n {
		name := GatewayName(g)
		pub, err := NewKey(filepath.Join(keys, name), name)
		if err != nil {
			return err
		}
		fmt.Fprintf(&list, "%s %s", name, ssh.MarshalAuthorizedKey(pub))
	}
	_, err := adm.Import(ctx, list.String(), "--profile", GatewayProfile)
	return err
}
