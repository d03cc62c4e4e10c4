// Package regguard keeps the hub's security decisions in force when the registry cannot
// write (a full disk, a read-only or failing filesystem). A revocation closes the
// device's sessions and refuses its keys at once and is written when the registry takes
// writes again; violations keep counting, so a profile's on_violation still fires; audit
// events wait in a bounded backlog and keep the time they happened. Until everything held
// is written the hub is degraded, and says so (log, metric, admin status). What is held
// lives in memory only: a hub restart before the registry recovers forgets it, which is
// why the hub also refuses enrolments before the disk is full (audit.min_free_mib).
package regguard
