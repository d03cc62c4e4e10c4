// Package devicebench is paper 000's device experiment (section VI, `iotsafe bench
// device`): HTTP over plain, HTTPS, iotsafe and OpenSSH (with and without compression)
// across the lab's emulated 802.15.4 link, measuring bytes and frames on the air, time and
// energy, and its two helper processes (the gateway's file server and the device client).
package devicebench
