// Package registrybench is the registry part of 'iotsafe bench hub' (issue 18): what
// keeping the registry in PostgreSQL costs against SQLite, measured in the same run on
// the same machine. Admin operations per second (device add, grant, revoke, device
// read; one writer, then several at once as parallel admin commands are) through the
// registry's own API, and device sessions set up per second by a real hub serving from
// each registry, with the lab's in-process fleet. PostgreSQL is the operator's empty
// database (--registry DSN) or a scratch server the lab starts (Debian's PostgreSQL,
// durable settings, Unix socket only).
package registrybench
