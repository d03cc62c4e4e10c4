package registry

import (
	"context"

	"github.com/iotsafe/iotsafe/internal/migrate"
)

// migrations are the registry's schema steps, oldest first (package migrate).
var migrations = []migrate.Step{
	{Version: 1, Name: "initial schema", SQL: schemaV1},
	{Version: 2, Name: "device certificates", SQL: schemaV2},
	{Version: 3, Name: "SOAP message keys", SQL: schemaV3},
	{Version: 4, Name: "devices behind gateways", SQL: schemaV4},
	{Version: 5, Name: "devices by creation", SQL: schemaV5},
	{Version: 6, Name: "serving lease", SQL: schemaV6},
	{Version: 7, Name: "hubs of a shared registry", SQL: schemaV7},
	{Version: 8, Name: "peer hubs", SQL: schemaV8},
	{Version: 9, Name: "events by kind", SQL: schemaV9},
	{Version: 10, Name: "host key rotation notes", SQL: schemaV10},
	{Version: 11, Name: "account token epochs", SQL: schemaV11},
	{Version: 12, Name: "networks and device types", SQL: schemaV12},
	{Version: 13, Name: "join tokens", SQL: schemaV13},
	{Version: 14, Name: "SSH certificate authorities", SQL: schemaV14},
	{Version: 15, Name: "client algorithm offers", SQL: schemaV15},
}

// SchemaVersion is the newest registry schema this build knows.
func SchemaVersion() int { return migrate.Latest(migrations) }

// Version is the registry's schema version.
func (r *Registry) Version(ctx context.Context) (int, error) {
	return migrate.Version(ctx, r.db, migrate.Table)
}
