// Package authn issues and verifies the hub's JSON Web Tokens (paper 004): short-lived
// access tokens and longer refresh tokens, HMAC-signed (HS256/384/512) with keys kept in
// the data folder and rotated by key id. The verifier takes the algorithm from the key a
// token names, never from the token, so no algorithm confusion is possible; unsigned
// tokens ("none") exist only when an operator turns them on explicitly.
//
// Front-door accounts, tokens and login sessions are still in internal/frontdoor; they
// join this package when the front door is split (architecture issue).
package authn
