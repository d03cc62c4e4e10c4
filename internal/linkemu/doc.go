// Package linkemu emulates slow and lossy links in user space (the kernel here has no
// netem): a model per link technology turns each IP packet into airtime and link bytes,
// and a bridge carries packets between two TUN devices in two network namespaces at the
// pace the model says, on one shared medium when the technology is half duplex.
package linkemu
