// Package buildinfo carries the version string the plugins print for VERSION.
package buildinfo

// Version is set at link time: -ldflags "-X github.com/ovsflow/ovs-cni/pkg/buildinfo.Version=v1.2.3".
var Version = "dev"

// About is the "about" string of a plugin binary.
func About(plugin string) string { return "CNI " + plugin + " plugin (ovsflow) " + Version }
