// Package labcmd is 'iotsafe bench': the lab's command line, one subcommand per
// experiment (each in internal/lab/...) and the hidden helper processes the experiments
// start. It is kept apart from the admin CLI, which registers it with one AddCommand, so
// the operator's commands read on their own and a hub can be built without the lab.
package labcmd
