// Package fileowner gives files that root writes into a hub's data folder the folder's
// owner. A hub that runs as a user of its own must still read its keys (mode 0600) after
// an operator ran a command such as 'iotsafe restore' or 'iotsafe hostkey add' as root.
package fileowner
