// Package profile defines the two configuration profiles of paper 000 (IV-C.7):
// the IoTProfile that bounds what one device may do, and the hub's crypto policy.
package profile
