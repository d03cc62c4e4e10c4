package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/registry"
)

func connectCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "connect DEVICE ALIAS",
		Short:   "Pipe standard input and output to a device service (like nc), for scripts",
		Example: `  printf 'GET / HTTP/1.0\r\n\r\n' | iotsafe connect dev1 http`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			dev, alias := args[0], args[1]
			reg, _, err := g.openRegistry(cmd.Context())
			if err != nil {
				return err
			}
			d, err := reg.Device(cmd.Context(), dev)
			reg.Close()
			if err != nil {
				return err
			}
			var addr string
			for _, s := range d.Sockets {
				if s.Alias == alias {
					addr = s.Addr.String()
				}
			}
			if addr == "" {
				return fmt.Errorf("device %s has no service %q (it has: %s)", dev, alias, aliases(d))
			}
			var nd net.Dialer
			c, err := nd.DialContext(cmd.Context(), "tcp", addr)
			if err != nil {
				if d.Revoked() {
					return fmt.Errorf("device %s is revoked", dev)
				}
				return fmt.Errorf("device %s is offline or not exposing %s (%s): %w", dev, alias, addr, err)
			}
			return pipeStdio(cmd.Context(), c.(*net.TCPConn), cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}

func aliases(d *registry.Device) string {
	var out []string
	for _, s := range d.Sockets {
		out = append(out, s.Alias)
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// pipeStdio copies stdin to c (half-closing at EOF) and c to stdout until c closes.
func pipeStdio(ctx context.Context, c *net.TCPConn, in io.Reader, out io.Writer) error {
	defer c.Close()
	go func() {
		io.Copy(c, in)
		c.CloseWrite()
	}()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(out, c)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return nil
	}
}

func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
