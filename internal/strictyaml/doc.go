// Package strictyaml decodes configuration YAML strictly: unknown fields are errors, and
// every error names the dotted path of the field it is about (ssh.keepalive_interval).
package strictyaml
