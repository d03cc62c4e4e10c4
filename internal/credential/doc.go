// Package credential hashes and checks the front door's secrets: account passwords
// (argon2id, PHC string format) and API tokens (random, stored as SHA-256 only).
package credential
