// Package lab reproduces the papers' experiments on this machine with real peers: it
// starts the servers under test and the device-side fleet as processes on loopback,
// drives them with one load generator, measures requests per second and memory, and
// writes CSV, environment.json, summary.json and a self-contained report.html.
package lab
