// Package devicecert is what a device's client certificate says: the device's name and
// incarnation (a removed and re-enrolled name is another device, so an old certificate
// does not log the new one in). The hub's local CA signs such certificates
// (`iotsafe device cert`), and the MQTT broker reads them back from a verified chain.
//
// The identity sits in the subject (CN = name, SERIALNUMBER = incarnation, OU marks a
// device certificate) and the certificate carries no subject alternative name: the CA is
// name-constrained to the front door's domain, and a client certificate needs no name
// there. Its only extended key usage is client authentication, so it can never serve as
// a server certificate for the front door's names.
package devicecert
