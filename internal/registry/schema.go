package registry

// schemaV1 is the first migration: the registry as it was before versions were kept.
// Every statement is idempotent, so a registry made before then takes it as is and is
// recorded at version 1. Times are fixed-width UTC text so they sort and read well in
// the sqlite3 shell.
const schemaV1 = `
-- Settings the registry owns for every hub and command that opens it, such as the
-- reserved pool (recorded at the first open; moved only by 'iotsafe pool move').
CREATE TABLE IF NOT EXISTS settings (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS profiles (
	name       TEXT PRIMARY KEY,
	spec       TEXT NOT NULL,
	updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS devices (
	name        TEXT PRIMARY KEY,
	profile     TEXT NOT NULL,
	address     TEXT NOT NULL UNIQUE,
	created_at  TEXT NOT NULL,
	revoked_at  TEXT,
	revoke_why  TEXT NOT NULL DEFAULT '',
	violations  INTEGER NOT NULL DEFAULT 0,
	last_seen   TEXT,
	last_remote TEXT NOT NULL DEFAULT '',
	last_algos  TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS keys (
	fingerprint TEXT PRIMARY KEY,
	device      TEXT NOT NULL REFERENCES devices(name) ON DELETE CASCADE,
	pubkey      TEXT NOT NULL,
	created_at  TEXT NOT NULL,
	revoked_at  TEXT
);
CREATE INDEX IF NOT EXISTS keys_device ON keys(device);
CREATE TABLE IF NOT EXISTS sockets (
	device  TEXT NOT NULL REFERENCES devices(name) ON DELETE CASCADE,
	alias   TEXT NOT NULL,
	address TEXT NOT NULL,
	port    INTEGER NOT NULL,
	PRIMARY KEY (device, alias),
	UNIQUE (address, port)
);
CREATE TABLE IF NOT EXISTS events (
	id     INTEGER PRIMARY KEY AUTOINCREMENT,
	at     TEXT NOT NULL,
	device TEXT NOT NULL DEFAULT '',
	kind   TEXT NOT NULL,
	detail TEXT NOT NULL DEFAULT '',
	remote TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_device ON events(device, id);
CREATE TABLE IF NOT EXISTS device_groups (
	device TEXT NOT NULL REFERENCES devices(name) ON DELETE CASCADE,
	grp    TEXT NOT NULL,
	PRIMARY KEY (device, grp)
);
CREATE TABLE IF NOT EXISTS grants (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	kind       TEXT NOT NULL,    -- user | group (operating-system principals) | account (front door)
	name       TEXT NOT NULL,    -- user, group or account name, as given
	xid        INTEGER NOT NULL, -- its uid or gid, resolved when granted; an account's id
	target     TEXT NOT NULL,    -- device name, or @devicegroup
	alias      TEXT NOT NULL,    -- alias, or *
	created_at TEXT NOT NULL,
	UNIQUE (kind, xid, target, alias)
);
-- Front-door accounts: people, kept apart from operating-system users. A removed and
-- re-added name gets a new id, so it does not inherit the old account's grants.
CREATE TABLE IF NOT EXISTS accounts (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	name       TEXT NOT NULL UNIQUE,
	password   TEXT NOT NULL DEFAULT '', -- argon2id PHC string; '' = no password login
	created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tokens (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	account    INTEGER NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
	label      TEXT NOT NULL DEFAULT '',
	hash       TEXT NOT NULL UNIQUE,     -- SHA-256 of the token; the token itself is never stored
	created_at TEXT NOT NULL,
	expires_at TEXT,
	revoked_at TEXT
);
-- Front-door login sessions (the login page's cookie), so a hub restart does not log
-- everyone out. Only the cookie's SHA-256 is stored, as for tokens.
CREATE TABLE IF NOT EXISTS login_sessions (
	hash       TEXT PRIMARY KEY,
	account    INTEGER NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
	created_at TEXT NOT NULL,
	expires_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS login_sessions_account ON login_sessions(account);
-- Telemetry credentials of devices (paper 004): a device logs in at /api/rest/token with
-- its name and this secret. Only the secret's SHA-256 is stored: secrets are random.
CREATE TABLE IF NOT EXISTS device_secrets (
	device     TEXT PRIMARY KEY REFERENCES devices(name) ON DELETE CASCADE,
	hash       TEXT NOT NULL,
	created_at TEXT NOT NULL
);
-- The free-form JSON "data" of a device (DeviceHive's device record).
CREATE TABLE IF NOT EXISTS device_data (
	device TEXT PRIMARY KEY REFERENCES devices(name) ON DELETE CASCADE,
	data   TEXT NOT NULL
);
`

// schemaV2 records the one client certificate of a device that logs in (iotsafe device
// cert): issuing a new one retires the older ones of the same enrolment.
const schemaV2 = `
CREATE TABLE IF NOT EXISTS device_certs (
	device     TEXT PRIMARY KEY REFERENCES devices(name) ON DELETE CASCADE,
	serial     TEXT NOT NULL,
	not_after  TEXT NOT NULL,
	created_at TEXT NOT NULL
);
`

// schemaV3 holds each device's pre-shared key for SOAP message security (paper 001;
// iotsafe device soap-key). Unlike the telemetry secret it cannot be stored hashed: the
// hub derives cipher and MAC keys from it. The registry file is mode 0600, as for every
// other secret it holds. A new key replaces the old at once.
const schemaV3 = `
CREATE TABLE IF NOT EXISTS soap_keys (
	device     TEXT PRIMARY KEY REFERENCES devices(name) ON DELETE CASCADE,
	key_id     TEXT NOT NULL UNIQUE,
	secret     BLOB NOT NULL,
	created_at TEXT NOT NULL
);
`

// schemaV4 records, for a device behind a gateway (paper 000, three-level scheme),
// which gateway announced it: the device is created at its first announcement and bound
// to that gateway, so another gateway cannot claim it. Empty for a direct device.
const schemaV4 = `
ALTER TABLE devices ADD COLUMN via TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS devices_via ON devices(via);
`

// schemaV5 indexes devices by creation: a new device's address is sought from the
// newest one's (SQLite's rowid did that before PostgreSQL, which has none).
const schemaV5 = `
CREATE INDEX IF NOT EXISTS devices_created ON devices(created_at);
`

// schemaV6 holds leases in a shared (PostgreSQL) registry: one per hub serving from it
// ("hub:NAME") and one for an admin command that needs every hub stopped
// ("maintenance"). The holder renews its lease while it runs; another may take it only
// once it has expired (a hub that died), or at once if it is the same hub (same host and
// data folder) started again.
const schemaV6 = `
CREATE TABLE IF NOT EXISTS leases (
	name       TEXT PRIMARY KEY,
	holder     TEXT NOT NULL,
	started_at TEXT NOT NULL,
	renewed_at TEXT NOT NULL,
	ttl_ms     INTEGER NOT NULL
);
`

// schemaV7 names hubs on a shared registry: which hub wrote each event, and which hub
// holds each device's session (empty when none does; a dead hub's entries are read
// together with its lease).
const schemaV7 = `
ALTER TABLE events ADD COLUMN hub TEXT NOT NULL DEFAULT '';
ALTER TABLE devices ADD COLUMN hub TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS devices_hub ON devices(hub);
`

// schemaV8 publishes, with each hub's lease, how the other hubs of the registry reach
// it: its address for peer hubs and its SSH host key (authorized_keys form). Hubs pin
// each other's keys through the registry they trust anyway.
const schemaV8 = `
ALTER TABLE leases ADD COLUMN peer_addr TEXT NOT NULL DEFAULT '';
ALTER TABLE leases ADD COLUMN host_key TEXT NOT NULL DEFAULT '';
`

// schemaV9 indexes events by kind: the change feed reads change kinds alone, since
// sessions' events are written beside the writer lock and their ids bound nothing
// (Registry.Changes). Hubs of an older build must not share the registry from here on:
// their feed takes the newest id of any event as its bound, and the version refuses them.
const schemaV9 = `
CREATE INDEX IF NOT EXISTS events_kind ON events(kind, id);
`

// schemaV10 records what each device was told of the hub's host keys during a
// rotation (internal/hostkey): a next key announced to it or proven to it (it learned
// the key), and a retired key withdrawn (its known_hosts may drop it). 'iotsafe hostkey
// list' reads it to say when a promotion locks no device out.
const schemaV10 = `
CREATE TABLE IF NOT EXISTS hostkey_notes (
	device      TEXT NOT NULL REFERENCES devices(name) ON DELETE CASCADE,
	fingerprint TEXT NOT NULL, -- a hub host key, SHA256:...
	state       TEXT NOT NULL, -- announced | proven | withdrawn
	at          TEXT NOT NULL,
	PRIMARY KEY (device, fingerprint)
);
CREATE INDEX IF NOT EXISTS hostkey_notes_key ON hostkey_notes(fingerprint);
`

// schemaV11: an account's tokens issued before its token epoch (µs; set by logout and a
// password change) stop verifying.
const schemaV11 = `
ALTER TABLE accounts ADD COLUMN token_epoch INTEGER NOT NULL DEFAULT 0;
`

// schemaV12 gives DeviceHive's networks and device types, which are device groups named
// network:NAME and devicetype:NAME, the numeric ids and descriptions DeviceHive's API
// carries (networkId, deviceTypeId). A row is made with the first device put in such a
// group, or by creating the network (or type) empty.
const schemaV12 = `
CREATE TABLE IF NOT EXISTS group_info (
	grp         TEXT PRIMARY KEY, -- network:NAME or devicetype:NAME
	kind        TEXT NOT NULL,    -- network | devicetype
	id          INTEGER NOT NULL,
	description TEXT NOT NULL DEFAULT '',
	created_at  TEXT NOT NULL,
	UNIQUE (kind, id)
);
`

// schemaV13 keeps join tokens: a device that holds one enrols its own key (made on the
// device) under a name the token's pattern allows, with the token's profile, up to its
// uses and until it expires or is revoked, at once or pending the operator's approval.
// Only the token's hash is kept.
const schemaV13 = `
CREATE TABLE IF NOT EXISTS join_tokens (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	hash       TEXT NOT NULL UNIQUE,
	label      TEXT NOT NULL DEFAULT '',
	profile    TEXT NOT NULL,
	pattern    TEXT NOT NULL,
	uses_left  INTEGER NOT NULL,
	used       INTEGER NOT NULL DEFAULT 0,
	approve    TEXT NOT NULL DEFAULT 'auto', -- auto | manual: devices wait for 'device approve'

	expires_at TEXT NOT NULL,
	created_at TEXT NOT NULL,
	revoked_at TEXT
);
`

// schemaV14 keeps the SSH certificate authorities the hub trusts for devices and the
// certificates it signed or revoked. A CA without a profile vouches for devices already
// enrolled (principal = device name); one with a profile is a manufacturer's: a device
// it vouches for is enrolled on its first connection (zero-touch), its key bound to the
// name from then on. ssh_certs holds the certificates the hub signed (by serial) and
// the revocations of any CA's certificates: by serial, or by key (an empty serial).
const schemaV14 = `
CREATE TABLE IF NOT EXISTS ssh_cas (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	name        TEXT NOT NULL UNIQUE,
	public_key  TEXT NOT NULL,
	fingerprint TEXT NOT NULL UNIQUE,
	pattern     TEXT NOT NULL,
	profile     TEXT NOT NULL DEFAULT '', -- '': enrolled devices only; else enrols on first connect
	approve     TEXT NOT NULL DEFAULT 'auto',
	created_at  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ssh_certs (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	ca_fingerprint  TEXT NOT NULL,
	serial          TEXT NOT NULL DEFAULT '', -- decimal uint64; '' is a revocation by key
	key_fingerprint TEXT NOT NULL,
	public_key      TEXT NOT NULL,
	device          TEXT NOT NULL DEFAULT '',
	key_id          TEXT NOT NULL DEFAULT '',
	valid_before    TEXT,
	signed_at       TEXT NOT NULL,
	revoked_at      TEXT,
	revoke_why      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS ssh_certs_serial ON ssh_certs(ca_fingerprint, serial);
CREATE INDEX IF NOT EXISTS ssh_certs_key ON ssh_certs(key_fingerprint);
`

// schemaV15 keeps what device clients offer in their first key-exchange message
// (kexinit.Offer, as JSON), once per distinct offer: a fleet has few client
// configurations. A device's last_algos names its session's offer by hash, so the
// console can say which devices a change of the hub's crypto policy would lock out.
const schemaV15 = `
CREATE TABLE IF NOT EXISTS ssh_offers (
	hash       TEXT PRIMARY KEY,
	offer      TEXT NOT NULL,
	first_seen TEXT NOT NULL
);
`
