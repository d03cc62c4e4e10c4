// Package consolebench is 'iotsafe bench console', the operator console's lab (issue
// 50): a hub whose registry holds N devices (default 100,000), the console's pages
// fetched as a logged-in browser fetches them (the fleet, the device list's first and
// last page, a name search, a filter with a sort, a device's page, the audit log, the
// crypto posture), each many times: the time to the last byte per page, median, 95th
// percentile and worst, against the target of 200 ms.
package consolebench
