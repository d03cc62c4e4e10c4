// Package accessnote carries what a handler learned about its caller back to the access
// log of the listener around it: the front door logs every request on its host, but only
// a mounted handler such as the REST API knows whose token it was.
package accessnote
