package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/pki"
)

func frontdoorCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "frontdoor",
		Short: "The HTTPS front door through which people reach device services",
	}
	c.AddCommand(&cobra.Command{
		Use:   "ca",
		Short: "Print the local CA certificate (PEM) for users to trust",
		Example: `  iotsafe frontdoor ca > iotsafe-ca.crt
  curl --cacert iotsafe-ca.crt https://dev42.devices.example.com:8443/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := filepath.Join(g.data, pki.CADir, pki.CACertFile)
			b, err := os.ReadFile(path)
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("no local CA in %s yet: it is created when the hub starts with a front door (frontdoor.listen and frontdoor.domain) and no cert/key of its own", filepath.Dir(path))
			}
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	})
	return c
}
