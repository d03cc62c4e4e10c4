package hubbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Run measures, writes the result files into out and prints the summary on w. A run
// cut short (ctx cancelled) still writes what it measured.
func Run(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench hub: results in %s\n", out)
	res, err := Measure(ctx, b, o)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	s := Summarize(res, o)
	if werr := Write(out, lab.ReadEnvironment(o.Quick), res, s); werr != nil {
		return werr
	}
	Print(w, s)
	fmt.Fprintf(w, "\nreport: %s\n", filepath.Join(out, "report.html"))
	return err
}
