// Package childproc starts helper processes (lab peers, test fixtures) that die with the
// process that started them, even when it is killed.
//
// Linux delivers a child's parent-death signal when the thread that forked it ends, not
// when the process does, and the Go runtime ends a thread whenever a goroutine locked to
// it returns without unlocking (code that enters a network namespace does this on
// purpose). A child forked from an arbitrary goroutine could therefore be killed in the
// middle of a run. Start forks every child from one OS thread that lives as long as the
// process, so the signal comes only when the process itself ends.
package childproc
