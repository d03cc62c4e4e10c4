// Package mqtttopic checks and matches MQTT topic filters (MQTT 3.1.1 and 5, section
// 4.7): whether a filter is well formed, whether a topic matches it, and whether two
// filters can match one topic (the bridge's loop check). The broker's ACL and store
// rules and the bridge's topic rules all use it.
package mqtttopic
