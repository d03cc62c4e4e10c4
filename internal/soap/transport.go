package soap

import (
	"errors"
	"fmt"

	"github.com/iotsafe/iotsafe/internal/transport"
)

// Open makes the endpoint a device transport: mounted at Path on the front door and on
// the hub's plain device listener, where a message must be sealed with the key of the
// device whose SSH session carried it.
func Open(cfg Config, d transport.Deps) (transport.Transport, error) {
	if d.Plain == nil && d.Front == nil {
		return nil, errors.New("soap: the endpoint needs the front door or rest.listen to be served on")
	}
	ep, err := New(cfg, d.Devices, d.Store, d.Audit, d.Log)
	if err != nil {
		return nil, fmt.Errorf("soap: %w", err)
	}
	ep.Violation = d.Violation
	if d.Front != nil {
		d.Front.Mount(Path, ep)
		d.Log.Info("SOAP endpoint on the front door", "url", "https://"+d.Domain+Path, "algorithms", ep.Algorithms())
	}
	if d.Plain != nil {
		d.Plain.Mount(Path, ep)
		d.Log.Info("SOAP endpoint for devices on their SSH session", "path", Path, "algorithms", ep.Algorithms())
	}
	return ep, nil
}

// Listeners is empty: the endpoint is served on the hub's HTTP listeners.
func (e *Endpoint) Listeners() []transport.Listener { return nil }

// Close has nothing of its own to stop.
func (e *Endpoint) Close() error { return nil }
