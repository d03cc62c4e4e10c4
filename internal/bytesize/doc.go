// Package bytesize is the byte count every size in hub.yaml is written as: a plain number
// or one with a unit (512KiB, 10MiB, 2MB), so limits read the same in every section.
package bytesize
