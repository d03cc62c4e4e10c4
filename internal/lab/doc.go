// Package lab is the shared harness of the experiments in its subpackages (hubbench,
// devicebench, linkbench, one per paper experiment): it starts peers as processes
// (StartProc; the iotsafe hub, OpenSSH, Dropbear, Caddy through Bench), network
// namespaces (NewNetns), the device-side fleet (RunFleet) and the load generator (Load),
// and writes results (WriteRunFiles, WriteCSV, ReadEnvironment, LineChart, Progress).
// A new experiment is a new subpackage that uses these; it never copies them.
package lab
