// Package demo runs the embedded demonstration: a hub on the local data folder and a
// few simulated devices, each a small HTTP sensor app behind its own agent.
package demo
