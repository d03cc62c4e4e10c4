package firewall

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// DefaultTable is the name of the hub's nftables table (family inet).
const DefaultTable = "iotsafe"

// Rules is everything the kernel layer enforces, compiled by the hub from the registry.
type Rules struct {
	Pool netip.Prefix
	// AllowUID and AllowGID permit a socket owner (uid, or the socket's gid) to connect to
	// one protected socket.
	AllowUID []Entry
	AllowGID []Entry
	// SuperUIDs and SuperGIDs may reach every protected socket (root, the hub's user, the
	// admin group).
	SuperUIDs []uint32
	SuperGIDs []uint32
	// Senders are the uids that may open connections from a pool address (the hub's):
	// a device's pool address names it to the hub's own listeners, so no other local
	// user may send from one. Empty: nobody.
	Senders []uint32
}

// Entry permits one id to reach one protected socket.
type Entry struct {
	ID   uint32
	Addr netip.AddrPort
}

// Kernel manages the hub's own table; nothing else in the ruleset is touched.
type Kernel struct {
	table string
	netns int // fd of the network namespace to act in; -1 for the caller's
}

func (k *Kernel) conn() (*nftables.Conn, error) {
	if k.netns >= 0 {
		return nftables.New(nftables.WithNetNSFd(k.netns))
	}
	return nftables.New()
}

// ErrNoKernel means nftables cannot be used here (no privilege, no kernel support).
var ErrNoKernel = errors.New("firewall: nftables not available")

// NewKernel checks that nftables can be driven (root or CAP_NET_ADMIN) and returns a
// manager for the named table.
func NewKernel(table string) (*Kernel, error) { return NewKernelIn(table, -1) }

// NewKernelIn is NewKernel acting in the network namespace open at netnsFD (tests).
func NewKernelIn(table string, netnsFD int) (*Kernel, error) {
	k := &Kernel{table: table, netns: netnsFD}
	c, err := k.conn()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoKernel, err)
	}
	if _, err := c.ListTablesOfFamily(nftables.TableFamilyINet); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoKernel, err)
	}
	return k, nil
}

// Remove deletes the hub's table if it exists.
func (k *Kernel) Remove() error {
	c, err := k.conn()
	if err != nil {
		return err
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: k.table}
	c.AddTable(t) // make the delete valid even if the table is gone
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("firewall: remove table %s: %w", k.table, err)
	}
	return nil
}

// dropTag marks the rules whose counters are the kernel layer's refusals.
var dropTag = []byte("iotsafe-refused")

// Apply replaces the hub's table with one built from r, in a single netlink batch: the
// kernel switches from the old rules to the new ones atomically.
func (k *Kernel) Apply(r Rules) error {
	if !r.Pool.IsValid() {
		return errors.New("firewall: no pool")
	}
	c, t, out, err := k.freshTable()
	if err != nil {
		return err
	}
	accept := nftables.ChainPolicyAccept
	in := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	fwd := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})

	f := familyOf(r.Pool)
	// Default rule 1 of the paper: nothing passes between a protected address and anything
	// but loopback, in any direction.
	for _, addr := range []int{f.saddr, f.daddr} {
		c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: concat(f.inPool(addr), ifName(expr.MetaKeyOIFNAME, "lo", expr.CmpOpNeq), drop())})
		c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: concat(f.inPool(addr), ifName(expr.MetaKeyIIFNAME, "lo", expr.CmpOpNeq), drop())})
		c.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: concat(f.inPool(addr), drop())})
	}
	// Replies of connections already allowed.
	c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}})
	if err := k.refuseOtherSenders(c, t, out, f, r.Senders); err != nil {
		return err
	}
	for _, uid := range r.SuperUIDs {
		c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: concat(f.inPool(f.daddr), metaEq(expr.MetaKeySKUID, uid), accept_())})
	}
	for _, gid := range r.SuperGIDs {
		c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: concat(f.inPool(f.daddr), metaEq(expr.MetaKeySKGID, gid), accept_())})
	}
	// Permissions: one lookup per packet in a set of id . address . port, however many.
	for _, p := range []struct {
		name    string
		key     expr.MetaKey
		idType  nftables.SetDatatype
		entries []Entry
	}{{"allow_uid", expr.MetaKeySKUID, nftables.TypeUID, r.AllowUID}, {"allow_gid", expr.MetaKeySKGID, nftables.TypeGID, r.AllowGID}} {
		set := &nftables.Set{Table: t, Name: p.name, Concatenation: true,
			KeyType: nftables.MustConcatSetType(p.idType, f.addrType, nftables.TypeInetService)}
		elems := make([]nftables.SetElement, 0, len(p.entries))
		for _, e := range p.entries {
			if familyOf(netip.PrefixFrom(e.Addr.Addr(), 0)).nfproto != f.nfproto {
				continue
			}
			elems = append(elems, nftables.SetElement{Key: f.key(e)})
		}
		if err := c.AddSet(set, elems); err != nil {
			return fmt.Errorf("firewall: set %s: %w", p.name, err)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: concat(f.inPool(f.daddr), tcp(),
			[]expr.Any{
				&expr.Meta{Key: p.key, Register: 8},
				&expr.Payload{DestRegister: 9, Base: expr.PayloadBaseNetworkHeader, Offset: uint32(f.daddr), Len: uint32(f.addrLen)},
				&expr.Payload{DestRegister: f.portReg, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Lookup{SourceRegister: 8, SetName: set.Name, SetID: set.ID},
			}, accept_())})
	}
	// Everything else local to a protected address is refused: TCP with a reset (the caller
	// gets "connection refused" at once), the rest dropped.
	c.AddRule(&nftables.Rule{Table: t, Chain: out, UserData: dropTag, Exprs: concat(f.inPool(f.daddr), tcp(),
		[]expr.Any{&expr.Counter{}, &expr.Reject{Type: unix.NFT_REJECT_TCP_RST, Code: unix.NFT_REJECT_TCP_RST}})})
	c.AddRule(&nftables.Rule{Table: t, Chain: out, UserData: dropTag, Exprs: concat(f.inPool(f.daddr), []expr.Any{&expr.Counter{}}, drop())})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("firewall: apply table %s: %w", k.table, err)
	}
	return nil
}

// refuseOtherSenders adds the rule that only senders open connections from a pool
// address: a local user who binds a device's pool address cannot pose as the device.
// Packets of no local socket (the kernel's own resets) and replies (accepted above) pass.
func (k *Kernel) refuseOtherSenders(c *nftables.Conn, t *nftables.Table, out *nftables.Chain, f family, senders []uint32) error {
	set := &nftables.Set{Table: t, Name: "pool_senders", KeyType: nftables.TypeUID}
	elems := make([]nftables.SetElement, 0, len(senders))
	for _, uid := range senders {
		elems = append(elems, nftables.SetElement{Key: binaryutil.NativeEndian.PutUint32(uid)})
	}
	if err := c.AddSet(set, elems); err != nil {
		return fmt.Errorf("firewall: set %s: %w", set.Name, err)
	}
	notSender := []expr.Any{
		&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID, Invert: true},
		&expr.Counter{},
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: out, UserData: dropTag, Exprs: concat(f.inPool(f.saddr), tcp(), notSender,
		[]expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST, Code: unix.NFT_REJECT_TCP_RST}})})
	c.AddRule(&nftables.Rule{Table: t, Chain: out, UserData: dropTag, Exprs: concat(f.inPool(f.saddr), notSender, drop())})
	return nil
}

// freshTable starts a batch that replaces the table with an empty one holding an output
// filter chain; flushing the batch swaps old for new atomically.
func (k *Kernel) freshTable() (*nftables.Conn, *nftables.Table, *nftables.Chain, error) {
	c, err := k.conn()
	if err != nil {
		return nil, nil, nil, err
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: k.table}
	c.AddTable(t) // so that the delete is valid when the table does not exist yet
	c.DelTable(t)
	c.AddTable(t)
	accept := nftables.ChainPolicyAccept
	out := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	return c, t, out, nil
}

// Refused returns how many packets the kernel layer has refused since the table was
// last applied.
func (k *Kernel) Refused() (uint64, error) {
	c, err := k.conn()
	if err != nil {
		return 0, err
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: k.table}
	rules, err := c.GetRules(t, &nftables.Chain{Name: "output", Table: t})
	if err != nil {
		return 0, fmt.Errorf("firewall: read counters: %w", err)
	}
	var n uint64
	for _, r := range rules {
		if string(r.UserData) != string(dropTag) {
			continue
		}
		for _, e := range r.Exprs {
			if ctr, ok := e.(*expr.Counter); ok {
				n += ctr.Packets
			}
		}
	}
	return n, nil
}

// family holds the header offsets and types of one IP version.
type family struct {
	nfproto      byte
	saddr, daddr int
	addrLen      int
	addrType     nftables.SetDatatype
	portReg      uint32
	prefix, mask []byte
}

func familyOf(p netip.Prefix) family {
	if p.Addr().Is4() {
		f := family{nfproto: unix.NFPROTO_IPV4, saddr: 12, daddr: 16, addrLen: 4, addrType: nftables.TypeIPAddr, portReg: 10}
		f.prefix, f.mask = p.Masked().Addr().AsSlice(), mask(p.Bits(), 4)
		return f
	}
	f := family{nfproto: unix.NFPROTO_IPV6, saddr: 8, daddr: 24, addrLen: 16, addrType: nftables.TypeIP6Addr, portReg: 13}
	f.prefix, f.mask = p.Masked().Addr().AsSlice(), mask(p.Bits(), 16)
	return f
}

func mask(bits, n int) []byte {
	m := make([]byte, n)
	for i := range m {
		switch {
		case bits >= 8:
			m[i], bits = 0xff, bits-8
		case bits > 0:
			m[i], bits = byte(0xff<<(8-bits)), 0
		}
	}
	return m
}

// key is the set element for e: id (host order), address, port (network order, padded).
func (f family) key(e Entry) []byte {
	k := binary.NativeEndian.AppendUint32(nil, e.ID)
	k = append(k, e.Addr.Addr().AsSlice()...)
	return append(k, byte(e.Addr.Port()>>8), byte(e.Addr.Port()), 0, 0)
}

// inPool matches packets of this family whose address at offset lies in the pool.
func (f family) inPool(offset int) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{f.nfproto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: uint32(offset), Len: uint32(f.addrLen)},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(f.addrLen), Mask: f.mask, Xor: make([]byte, f.addrLen)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: f.prefix},
	}
}

func tcp() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
	}
}

func metaEq(key expr.MetaKey, v uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(v)},
	}
}

func ifName(key expr.MetaKey, name string, op expr.CmpOp) []expr.Any {
	b := make([]byte, 16)
	copy(b, name)
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: b}}
}

func drop() []expr.Any    { return []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}} }
func accept_() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}} }

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
