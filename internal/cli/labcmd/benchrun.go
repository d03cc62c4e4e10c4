package labcmd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/iotsafe/iotsafe/internal/lab"
	"github.com/iotsafe/iotsafe/internal/linkemu"
)

// runLab does what every lab command does around its experiment: the results folder
// (out, else ./bench-results/KIND-TIMESTAMP), the lab's binary, scratch folder and
// progress output, the hubs' CPU profiles (profile, if set); then run.
func runLab(cmd *cobra.Command, kind, out, profile string, run func(ctx context.Context, b *lab.Bench, out string, p *lab.Progress) error) error {
	if out == "" {
		out = filepath.Join("bench-results", kind+"-"+time.Now().Format("20060102-150405"))
	}
	bin, scratch, progress, err := lab.Setup(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	b := &lab.Bench{Bin: bin, Dir: scratch}
	if err := b.SetProfileDir(profile); err != nil {
		return fmt.Errorf("--profile: %w", err)
	}
	return run(cmd.Context(), b, out, progress)
}

// linkProfile reads a --link value: "" or "loopback" is the zero Profile.
func linkProfile(name string) (linkemu.Profile, error) {
	if name == "" || name == "loopback" {
		return linkemu.Profile{}, nil
	}
	return linkemu.Lookup(name)
}
