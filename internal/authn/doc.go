// Package authn authenticates the hub's callers other than devices' SSH keys.
//
// Accounts are the people and platform apps of the hub: one snapshot of the registry's
// accounts (argon2id passwords), API tokens (stored hashed) and login sessions, under one
// failed-login limiter, used by the front door, the REST API and MQTT's platform logins.
//
// JSON Web Tokens (paper 004): short-lived access tokens and longer refresh tokens,
// HMAC-signed (HS256/384/512) with keys kept in the data folder and rotated by key id. The
// verifier takes the algorithm from the key a token names, never from the token, so no
// algorithm confusion is possible; unsigned tokens ("none") exist only when an operator
// turns them on explicitly.
package authn
