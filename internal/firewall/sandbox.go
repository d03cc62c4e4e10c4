package firewall

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// SandboxTable is the agent's nftables table on the device (family inet).
const SandboxTable = "iotsafe-sandbox"

// InstallSandbox confines the device application running as uid to loopback (paper fig. 8,
// a): its sockets may talk to local services, including the agent's forwards, and
// nothing else; TCP gets a reset, everything else an administratively-prohibited
// unreachable. The table replaces any earlier one atomically; RemoveSandbox deletes it.
func (k *Kernel) InstallSandbox(uid uint32) error {
	c, t, out, err := k.freshTable()
	if err != nil {
		return err
	}
	match := concat(metaEq(expr.MetaKeySKUID, uid), ifName(expr.MetaKeyOIFNAME, "lo", expr.CmpOpNeq))
	c.AddRule(&nftables.Rule{Table: t, Chain: out, UserData: dropTag, Exprs: concat(match, tcp(),
		[]expr.Any{&expr.Counter{}, &expr.Reject{Type: unix.NFT_REJECT_TCP_RST, Code: unix.NFT_REJECT_TCP_RST}})})
	c.AddRule(&nftables.Rule{Table: t, Chain: out, UserData: dropTag, Exprs: concat(match,
		[]expr.Any{&expr.Counter{}, &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}})})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("firewall: sandbox for uid %d: %w", uid, err)
	}
	return nil
}
