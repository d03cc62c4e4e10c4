package credential

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Argon2id parameters: OWASP's recommended minimum (19 MiB, 2 passes, 1 lane). Each
// check costs ~19 MiB for tens of milliseconds; the front door bounds concurrent checks
// and caches successes, so this is paid once per login, not per request.
const (
	argonMemory  = 19 * 1024 // KiB
	argonTime    = 2
	argonThreads = 1
	argonKeyLen  = 32
	saltLen      = 16
	// MinPasswordLen is the shortest password an account may have.
	MinPasswordLen = 10
	// MaxPasswordLen bounds the work a caller can ask for.
	MaxPasswordLen = 1024
)

// ErrMismatch is returned when a password does not match its hash.
var ErrMismatch = errors.New("password does not match")

var b64 = base64.RawStdEncoding

// HashPassword returns the argon2id hash of pw as a PHC string:
// $argon2id$v=19$m=19456,t=2,p=1$SALT$HASH.
func HashPassword(pw string) (string, error) {
	if err := CheckPasswordPolicy(pw); err != nil {
		return "", err
	}
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key := argon2.IDKey([]byte(pw), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// CheckPasswordPolicy rejects passwords that are too short or too long.
func CheckPasswordPolicy(pw string) error {
	if len(pw) < MinPasswordLen {
		return fmt.Errorf("password too short: use at least %d characters", MinPasswordLen)
	}
	if len(pw) > MaxPasswordLen {
		return fmt.Errorf("password too long: at most %d bytes", MaxPasswordLen)
	}
	return nil
}

// VerifyPassword checks pw against a PHC string made by HashPassword. The parameters
// come from the stored string, so hashes made with other costs still verify; absurd
// costs are refused so a tampered row cannot exhaust memory.
func VerifyPassword(phc, pw string) error {
	if len(pw) > MaxPasswordLen {
		return ErrMismatch
	}
	p, err := parsePHC(phc)
	if err != nil {
		return err
	}
	key := argon2.IDKey([]byte(pw), p.salt, p.time, p.memory, p.threads, uint32(len(p.key)))
	if subtle.ConstantTimeCompare(key, p.key) != 1 {
		return ErrMismatch
	}
	return nil
}

type phcParams struct {
	memory, time uint32
	threads      uint8
	salt, key    []byte
}

func parsePHC(s string) (phcParams, error) {
	var p phcParams
	f := strings.Split(s, "$")
	if len(f) != 6 || f[0] != "" || f[1] != "argon2id" {
		return p, errors.New("credential: not an argon2id hash")
	}
	var v int
	if _, err := fmt.Sscanf(f[2], "v=%d", &v); err != nil || v != argon2.Version {
		return p, errors.New("credential: unsupported argon2 version")
	}
	var threads uint32
	if _, err := fmt.Sscanf(f[3], "m=%d,t=%d,p=%d", &p.memory, &p.time, &threads); err != nil {
		return p, errors.New("credential: bad argon2id parameters")
	}
	if p.memory < 8 || p.memory > 1<<20 || p.time < 1 || p.time > 16 || threads < 1 || threads > 16 {
		return p, errors.New("credential: argon2id parameters out of range")
	}
	p.threads = uint8(threads)
	var err error
	if p.salt, err = b64.DecodeString(f[4]); err != nil || len(p.salt) < 8 {
		return p, errors.New("credential: bad salt")
	}
	if p.key, err = b64.DecodeString(f[5]); err != nil || len(p.key) < 16 || len(p.key) > 64 {
		return p, errors.New("credential: bad hash")
	}
	return p, nil
}
