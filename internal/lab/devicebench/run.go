package devicebench

import (
	"context"
	"fmt"
	"io"

	"github.com/iotsafe/iotsafe/internal/lab"
)

// Run measures, writes the result files into out and prints the summary on w. A run
// cut short (ctx cancelled) still writes what it measured and is not an error.
func Run(ctx context.Context, b *lab.Bench, o Options, out string, w io.Writer) error {
	fmt.Fprintf(w, "bench device: results in %s\n", out)
	res, err := Measure(ctx, b, o)
	if res == nil {
		return err
	}
	s := Summarize(res, o)
	return lab.Finish(w, out, err, func() error { return Write(out, lab.ReadEnvironment(o.Quick), res, s) }, func(w io.Writer) { Print(w, s) })
}
