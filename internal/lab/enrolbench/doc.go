// Package enrolbench is 'iotsafe bench enrol', the lab of enrolling a fleet (issue 51):
// N devices that each made their own key arrive at once and enrol it with one join
// token over SSH, or log in once with a certificate of a manufacturer's CA the hub
// trusts (zero-touch), beside the same number of keys enrolled by the operator's bulk import
// ('iotsafe device import') on a fresh hub in the same run: enrolments per second, the
// hub's CPU per enrolment, and its memory and registry size per enrolled device.
package enrolbench
