// Package backup copies a hub's data folder into a backup folder while the hub runs, and
// puts such a copy back. The SQLite databases (the registry, the notifications) are
// copied as consistent snapshots (VACUUM INTO, which reads one transaction's view while
// the hub goes on writing); the MQTT broker's and bridge's bbolt files when no hub holds
// them; every other regular file (host keys, the JWT keys, the local CA, hub.yaml) as
// it is, with its mode. A manifest (backup.json, written last) lists every file with its
// size and SHA-256, so a restore checks the whole copy before it touches the data folder,
// and a backup cut short is recognised as one. A registry in PostgreSQL is not copied:
// its server has its own tools (pg_dump), and the manifest says so.
package backup
