// Package linkbench validates the lab's emulated link (`iotsafe bench link`): bulk TCP
// goodput between two namespaces joined by the link emulator, beside the model's ceiling.
package linkbench
