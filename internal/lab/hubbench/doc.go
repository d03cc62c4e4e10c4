// Package hubbench is paper 000's host-server experiment (section VII, `iotsafe bench
// hub`): requests per second through iotsafe, OpenSSH, Dropbear and HTTPS against plain
// HTTP, memory per session and per forward, inactive forwards and the P/S sweep, written
// as CSV, summary.json and report.html beside the paper's figures.
package hubbench
