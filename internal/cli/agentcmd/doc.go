// Package agentcmd is the device agent's command line: flags and agent.yaml into an
// agent.Config, then the agent under a service manager. It imports nothing of the hub,
// so the iotsafe-agent binary built from it for devices stays small.
package agentcmd
