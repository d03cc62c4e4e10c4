package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/admin"
	"github.com/iotsafe/iotsafe/internal/control"
	"github.com/iotsafe/iotsafe/internal/registry"
)

// applied is what a change did, and where.
type applied struct {
	control.Outcome
	// HubRunning: the hub took the change through its change path and applied it to its
	// live sessions. Otherwise the change is in the registry only, and a hub applies it
	// from the change feed (within a second when one runs elsewhere; at its next start).
	HubRunning bool
	// HeldByHub: the registry could not write; the hub holds the change in memory.
	HeldByHub bool
	Degraded  string // what the hub says of the registry when it cannot write
}

// noHubNote is printed when a change was written while no hub answered.
const noHubNote = "no hub answered on the admin socket: a running hub applies the change within a second (it reads the registry itself), a stopped one when it starts"

// change takes ch through the running hub's change path over the admin socket; with no
// hub running, through a change path of its own over the registry (the offline mode).
// Either way the change is the same code (internal/control): this is a thin client.
func (g *globals) change(cmd *cobra.Command, ch control.Change) (applied, error) {
	env, err := control.Wrap(ch)
	if err != nil {
		return applied{}, err
	}
	rep, err := admin.Call(g.adminSocket(), admin.Request{Op: admin.OpChange, Change: &env})
	switch {
	case errors.Is(err, admin.ErrHubNotRunning):
		var a applied
		err := g.withRegistry(cmd, func(reg *registry.Registry) error {
			var err error
			a.Outcome, err = control.New(reg, nil).Apply(cmd.Context(), ch)
			return err
		})
		return a, err
	case err != nil && rep.Error != "":
		return applied{HubRunning: true}, hubError{msg: rep.Error, notFound: rep.NotFound} // the hub's words, as offline
	case err != nil:
		return applied{}, err
	}
	a := applied{HubRunning: true}
	if rep.Outcome != nil {
		a.Outcome = *rep.Outcome
	}
	_, a.HeldByHub = rep.Held[ch.Subject()]
	a.Degraded = rep.Degraded
	return a, nil
}

// reportClosed prints what a change that ends sessions did: headline, then the sessions
// it closed or where it will apply; JSON for scripts.
func reportClosed(cmd *cobra.Command, a applied, device, fingerprint, action, headline string, outFmt *output) error {
	if outFmt.structured() {
		return outFmt.print(cmd.OutOrStdout(), struct {
			Device     string `json:"device"`
			Key        string `json:"key,omitempty"`
			Action     string `json:"action"`
			HubRunning bool   `json:"hub_running"`
			Closed     int    `json:"closed_sessions"`
			HeldByHub  bool   `json:"held_in_memory,omitempty"`
			Grants     int64  `json:"grants_removed,omitempty"`
		}{device, fingerprint, action, a.HubRunning, a.Closed, a.HeldByHub, a.GrantsRemoved})
	}
	w := cmd.OutOrStdout()
	if a.HeldByHub {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: the registry could not be written (%s): the running hub holds the change to %s in memory, refuses it from now on and writes it when the registry can take it (free space in the data folder); a hub restart before then forgets it\n", a.Degraded, device)
		headline += " (held in the hub's memory)"
	}
	if a.GrantsRemoved > 0 {
		headline += fmt.Sprintf(" and its %d grant(s): a device enrolled later under this name starts with none", a.GrantsRemoved)
	}
	fmt.Fprintln(w, headline)
	switch {
	case !a.HubRunning:
		fmt.Fprintln(w, noHubNote)
	case a.Closed > 0:
		fmt.Fprintf(w, "closed %d live session(s)\n", a.Closed)
	}
	return nil
}

// batch takes many changes the way change takes one, deciding once where they go: through
// the running hub (one admin call each, so each is applied to live sessions), or, with no
// hub answering, offline over one registry opened for the whole batch — enrolling
// thousands of devices costs one registry open, not one per device.
type batch struct {
	g          *globals
	cmd        *cobra.Command
	decided    bool
	hubRunning bool
	reg        *registry.Registry // offline: open until close
	ctl        *control.Control
}

func (g *globals) batch(cmd *cobra.Command) *batch { return &batch{g: g, cmd: cmd} }

func (b *batch) apply(ch control.Change) (applied, error) {
	if b.ctl != nil {
		o, err := b.ctl.Apply(b.cmd.Context(), ch)
		return applied{Outcome: o}, err
	}
	if b.decided {
		return b.g.change(b.cmd, ch)
	}
	a, err := b.g.change(b.cmd, ch)
	if err != nil {
		return a, err // decide on the next change
	}
	b.decided, b.hubRunning = true, a.HubRunning
	if !a.HubRunning {
		reg, _, err := b.g.openRegistry(b.cmd.Context())
		if err != nil {
			return a, err
		}
		b.reg, b.ctl = reg, control.New(reg, nil)
	}
	return a, nil
}

func (b *batch) close() {
	if b.reg != nil {
		b.reg.Close()
	}
}

// hubError is a change the running hub refused, in its words; a missing subject stays
// registry.ErrNotFound, as it is when the command applies the change itself.
type hubError struct {
	msg      string
	notFound bool
}

func (e hubError) Error() string { return e.msg }

func (e hubError) Is(target error) bool { return e.notFound && target == registry.ErrNotFound }
