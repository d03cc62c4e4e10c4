// Package access decides who may reach which device service: the paper's permissions
// (operating-system users and groups) over strict (one device, one alias) and wide
// (a device group, every alias) security contexts.
package access
