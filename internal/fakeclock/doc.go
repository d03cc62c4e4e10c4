// Package fakeclock is a settable clock for tests of code that takes a now function
// (limiters, key lifetimes), safe for concurrent use, so such tests move time instead
// of sleeping.
package fakeclock
