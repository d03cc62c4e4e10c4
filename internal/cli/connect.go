package cli

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/resolver"
)

func connectCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "connect DEVICE ALIAS",
		Short: "Pipe standard input and output to a device service (like nc), for scripts",
		Long: `Pipe standard input and output to a device service. The hub's resolver checks that the
calling user holds a permission for DEVICE/ALIAS (see 'iotsafe grant'), then the hub checks
the connection itself again.`,
		Example: `  printf 'GET / HTTP/1.0\r\n\r\n' | iotsafe connect dev1 http`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			dev, alias := args[0], args[1]
			addr, err := resolver.Resolve(g.resolverSocket(), dev, alias)
			if err != nil {
				return err
			}
			var nd net.Dialer
			c, err := nd.DialContext(cmd.Context(), "tcp", addr)
			if err != nil {
				return fmt.Errorf("device %s is offline or not exposing %s (%s): %w", dev, alias, addr, err)
			}
			return pipeStdio(cmd.Context(), c.(*net.TCPConn), cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}

func resolveCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "resolve DEVICE ALIAS",
		Short: "Print the protected socket of a device service, if you may reach it",
		Long: `Ask the hub's resolver (DATA/resolver.sock) for DEVICE/ALIAS. The hub identifies the caller
by the kernel's credentials of the socket (never by anything the caller says) and answers
with ADDRESS:PORT only if that uid or one of its groups holds a permission.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			addr, err := resolver.Resolve(g.resolverSocket(), args[0], args[1])
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), addr)
			return nil
		},
	}
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
